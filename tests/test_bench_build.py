"""tools/bench_build.py: what its builds share, run with its builds replaced by a recorder."""

from __future__ import annotations

import sys
from pathlib import Path

import bench_build
import ensure_chromium
import pytest

from amp_book.cache import CACHE_DIR_ENV


def test_the_cold_builds_use_caches_of_their_own_whatever_the_environment_shares(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``AMP_LESSON_CACHE_DIR`` set, as CONTRIBUTING offers for sharing between clones,
    the "cold" build used to be served from that cache, and the cold stock-kernel build from
    the forked one's ("stock / forked: 0.37", a comparison of nothing)."""
    shared = tmp_path / "shared-cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(shared))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "shared-inductor"))
    builds: list[tuple[str, str, str]] = []
    previews: list[str] = []

    def build(src: Path, out: Path, jobs: str, env: dict[str, str], *extra: str) -> dict:
        builds.append((str(out), env[CACHE_DIR_ENV], env["TORCHINDUCTOR_CACHE_DIR"]))
        return {"wall": 1.0, "cpu": 1.0}

    for name, value in {
        "build": build,
        "exec_times": lambda out: {},
        "executed_since": lambda out, since: [],
        "time_pdf": lambda out: {},
        "startup_costs": lambda env: {},
        "time_preview": lambda src, out, page, env: previews.append(env[CACHE_DIR_ENV]) or {},
        "page_weights": lambda out, pages: {},
        "report": lambda results: None,
    }.items():
        monkeypatch.setattr(bench_build, name, value)
    monkeypatch.setattr(ensure_chromium, "find", lambda: "chromium")
    monkeypatch.setattr(bench_build, "_adopt_orphans", lambda: False)  # not this test's worker
    monkeypatch.setattr(sys, "argv", ["bench_build.py", "--compare-stock", "--weigh", "index"])
    assert bench_build.main() == 0

    forked, stock = builds[:-1], builds[-1]
    assert len(forked) == 6  # cold, no change, two page edits, a module edit, -E
    assert "stock" in stock[0]
    assert len({b[1:] for b in forked}) == 1  # the forked builds share one cache: theirs
    assert previews == [forked[0][1]]  # the live preview's builds too
    caches = {forked[0][1], forked[0][2], stock[1], stock[2]}
    assert len(caches) == 4  # the stock build's are its own too
    assert not any(Path(c).is_relative_to(tmp_path) for c in caches), caches
