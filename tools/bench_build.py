"""Benchmark the book build the way an author meets it.

Builds a copy of ``docs/`` in a scratch folder (the working tree is not
touched) and prints:

- cold build (no build folder, no execution cache),
- no-change rebuild,
- one-page edit rebuilds: a sentence added to one page (served from the
  cache) and a cell added to it (the page re-executes),
- per-page execution time (from the cold build),
- first-load weight of a page (bytes transferred and gzipped, all requests
  of a real Chromium load) and the count of requests that leave the machine.

Targets on a 2-core machine: cold <= 90 s, no-change <= 3 s, one-page edit
<= 12 s, zero outside requests. This reports; it does not fail on a miss.

    python tools/bench_build.py [--page chapter/formats] [--jobs N] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"cold_s": 90.0, "no_change_s": 3.0, "one_page_edit_s": 12.0, "outside_requests": 0}


def build(src: Path, out: Path, jobs: str) -> float:
    cmd = [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html"]
    if jobs != "1":
        cmd += ["-j", jobs]
    start = time.perf_counter()
    subprocess.run([*cmd, str(src), str(out)], check=True, cwd=ROOT)
    return time.perf_counter() - start


def exec_times(out: Path) -> dict[str, float]:
    with open(out / ".doctrees" / "environment.pickle", "rb") as f:
        env = pickle.load(f)
    return {
        doc: round(meta["exec_data"]["runtime"] or 0.0, 2)
        for doc, meta in sorted(env.nb_metadata.items())
        if meta.get("exec_data")
    }


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def page_weight(html_dir: Path, page: str) -> dict[str, int]:
    """Load ``page`` in Chromium; sum what it fetched, raw and gzipped."""
    sys.path.insert(0, str(ROOT / "tools"))
    from ensure_chromium import find
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_Quiet, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    local: list[str] = []
    outside: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=find(),
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                ],
            )
            pg = browser.new_page()

            def route(r):  # type: ignore[no-untyped-def]
                url = r.request.url
                if url.startswith(base):
                    local.append(url)
                    r.continue_()
                elif url.startswith(("data:", "blob:")):
                    r.continue_()
                else:
                    outside.append(url)
                    r.abort()

            pg.route("**/*", route)
            pg.goto(base + page + ".html", wait_until="networkidle")
            browser.close()
    finally:
        server.shutdown()
    raw = gz = 0
    for url in set(local):
        path = html_dir / url[len(base) :].split("?")[0].split("#")[0]
        if path.is_file():
            data = path.read_bytes()
            raw += len(data)
            gz += len(gzip.compress(data, 6))
    return {
        "requests": len(set(local)),
        "bytes": raw,
        "bytes_gzip": gz,
        "outside_requests": len(outside),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", default="chapter/formats", help="page to weigh and edit")
    parser.add_argument("--jobs", default="auto", help="sphinx-build -j value (nox uses auto)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="amp-bench-"))
    try:
        src = scratch / "docs"
        shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns("_build"))
        out = scratch / "_build" / "html"
        page_src = src / f"{args.page}.md"
        if not page_src.is_file():
            parser.error(f"--page {args.page!r}: no such page in docs/")
        results: dict[str, object] = {"jobs": args.jobs}
        results["cold_s"] = round(build(src, out, args.jobs), 1)
        results["per_page_exec_s"] = exec_times(out)
        results["no_change_s"] = round(build(src, out, args.jobs), 1)
        # A prose edit re-reads the page and serves its outputs from the cache; a
        # cell edit re-executes it. The second is the one an author waits for.
        page_src.write_text(page_src.read_text() + "\nOne more sentence for the benchmark.\n")
        results["one_page_prose_edit_s"] = round(build(src, out, args.jobs), 1)
        page_src.write_text(page_src.read_text() + "\n```{code-cell} ipython3\n1 + 1\n```\n")
        results["one_page_edit_s"] = round(build(src, out, args.jobs), 1)
        results["page_weight"] = {args.page: page_weight(out, args.page)}
        results["outside_requests"] = results["page_weight"][args.page]["outside_requests"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"{'measure':<22}{'value':>10}{'target':>10}")
    for key in (
        "cold_s",
        "no_change_s",
        "one_page_prose_edit_s",
        "one_page_edit_s",
        "outside_requests",
    ):
        target = TARGETS.get(key, TARGETS["one_page_edit_s"])
        print(f"{key:<22}{results[key]!s:>10}{target!s:>10}")
    weight = results["page_weight"][args.page]
    print(
        f"first load of {args.page}: {weight['requests']} requests, "
        f"{weight['bytes'] / 1024:.0f} KiB ({weight['bytes_gzip'] / 1024:.0f} KiB gzipped)"
    )
    print("execution time per page (cold build):")
    for doc, secs in results["per_page_exec_s"].items():
        print(f"  {doc:<44}{secs:>6.1f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
