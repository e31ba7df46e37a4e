"""The pages whose outcomes depend most on their inputs, run again with other inputs.

Each page's cells run in a fresh process (``tests/run_page.py``) with changed
seeds, scales and sizes, and its claims are compared with those of the page as
written, as the suite's build of the book ran it (each claim's record is glued
into the executed notebook). The changed run must finish: a claim it
contradicts, a hidden check that repeats a constant the visible cell no longer
has, or a typed outcome turned into a committed claim fails the run and names
itself. And the changed inputs must change what the page says, or the flip
tested nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amp_book import variants, workdirs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN_PAGE = Path(__file__).with_name("run_page.py")

# page -> (text in the page, what the changed run has instead); each text occurs exactly once
FLIPS: dict[str, list[tuple[str, str]]] = {
    "beyond/check-your-own-model": [
        # images five orders larger: the CNN's first convolution overflows FP16
        (
            "cnn_batch = images.contiguous(), digits.y_train[:16]",
            "cnn_batch = images.contiguous() * 1e5, digits.y_train[:16]",
        ),
        # a loss 2**-120 smaller: the decoder's gradients below BF16's and a scaled FP16's range
        (
            "    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())\n",
            "    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()) * 2**-120\n",
        ),
        ("n_embd=64, n_layer=2", "n_embd=32, n_layer=2"),  # GPT-2 narrower: a shorter key bias
        ('reduction="sum")', 'reduction="mean")'),  # the watched loss as meant: no overflow
    ],
    "beyond/fsdp-mixed-precision": [
        (
            "run_fsdp(world_size=2, n_accum=4, steps=2)",
            "run_fsdp(world_size=2, n_accum=2, steps=3, seed=1)",
        ),
        ("reference_full_batch(steps=2)", "reference_full_batch(steps=3, seed=1)"),
    ],
    "beyond/mx-block-scaling": [
        (
            "train_digits(data, epochs=1, record_grads_at",
            "train_digits(data, epochs=1, seed=1, record_grads_at",
        ),
        ('run.params["0.weight"].flatten()[:32]', 'run.params["0.weight"].flatten()[32:64]'),
        ("data.X_test[:64]", "data.X_test[:128]"),
    ],
    "beyond/bf16-without-master-weights": [
        # a negative weight, an update above half BF16's spacing, fewer steps
        ("start, update, steps = 1.0, 1e-3, 100", "start, update, steps = -0.75, -2e-3, 60"),
        ("torch.manual_seed(0)\nweight = torch.full", "torch.manual_seed(1)\nweight = torch.full"),
        ("for lr in (1e-4, 1e-3)}", "for lr in (2e-4, 1e-3)}"),
    ],
    "beyond/amp-in-a-training-job": [
        ("TOTAL, STOP = 48, 22", "TOTAL, STOP = 40, 17"),
        ("train_two_models(steps=6, device=device)", "train_two_models(steps=8, device=device)"),
        ("penalty_step(v, steps=6, device=device)", "penalty_step(v, steps=4, device=device)"),
    ],
}

CLAIM = re.compile(r"^CLAIM (\w+) holds=(True|False): (.*)$", re.MULTILINE)


def run_page(page: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run ``page``'s cells in a fresh process; return the process and each claim's words."""
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),  # this test's own compile cache
        "PYTHONPATH": str(ROOT / "src"),
    }
    done = subprocess.run(
        [sys.executable, str(RUN_PAGE), str(page)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    return done, {key: words for key, _, words in CLAIM.findall(done.stdout)}


def edited(page: str, flips: list[tuple[str, str]]) -> str:
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    for old, new in flips:
        assert text.count(old) == 1, f"{page}: {old!r} occurs {text.count(old)} times, not once"
        text = text.replace(old, new)
    return text


def claims_of_the_build(built_book: Path, page: str) -> dict[str, str]:
    """Each claim's words as the build of ``built_book`` ran ``page`` (read from the glue data
    MyST-NB wrote for it, as the book's claim variants read them)."""
    glue_file = workdirs.executed_folder(built_book) / f"{page}.glue.json"
    claims = variants.read_claims(json.loads(glue_file.read_text(encoding="utf-8")), "")
    return {c.key: c.says if c.holds else c.otherwise for c in claims}


@pytest.mark.parametrize("page", sorted(FLIPS))
def test_the_page_holds_with_other_inputs_and_says_what_they_did(
    page: str, built_book: Path, tmp_path: Path
) -> None:
    before = claims_of_the_build(built_book, page)  # the page as written: the build ran it
    assert before, f"{page}: the build recorded no claim"
    changed_page = tmp_path / "changed.md"
    changed_page.write_text(edited(page, FLIPS[page]), encoding="utf-8")
    changed, after = run_page(changed_page, tmp_path)
    assert changed.returncode == 0, changed.stdout[-4000:] + changed.stderr[-4000:]
    assert before.keys() == after.keys()  # the same sentences, each chosen by its own run
    moved = [key for key in before if before[key] != after[key]]
    assert len(moved) >= len(before) // 3, f"the changed inputs moved only {moved}"


@pytest.mark.pages
def test_a_contradicted_claim_fails_the_run_and_names_itself(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n"
        "# A page\n\n```{code-cell} ipython3\nseed = 3\n```\n\n"
        "```{code-cell} ipython3\n:tags: [remove-cell]\nfrom amp_lesson.claims import claim\n"
        'claim("odd_seed", seed % 2 == 0, "The seed is even.")\n```\n',
        encoding="utf-8",
    )
    done, _ = run_page(page, tmp_path)
    assert done.returncode == 1
    assert "ClaimContradicted: claim 'odd_seed'" in done.stdout + done.stderr
    assert "FAILED at the cell on line 17" in done.stdout  # the hidden cell's fence
