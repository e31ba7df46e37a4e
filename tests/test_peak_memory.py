"""tools/peak_memory.py: the memory of a command and of every process it starts, summed."""

from __future__ import annotations

import sys

import peak_memory  # tools/
import pytest

pytestmark = [
    pytest.mark.fast,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

# A parent that starts a child; each touches its own 150 MiB, then both wait a moment.
TWO_PROCESSES = """
import subprocess, sys, time
code = "import time; b = bytearray(150 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
child = subprocess.Popen([sys.executable, "-c", code])
b = bytearray(150 * 2**20); b[::4096] = b"x" * len(b[::4096])
child.wait()
"""


def test_the_peak_sums_a_command_and_the_processes_it_starts() -> None:
    measured = peak_memory.run_measured([sys.executable, "-c", TWO_PROCESSES], interval=0.05)
    assert measured.returncode == 0
    assert measured.peak_processes >= 2
    assert measured.peak_bytes >= 290 * 2**20  # both buffers, not one


# A process that starts a child in a session of its own, which touches 200 MiB, and ends at
# once; the command that ran it goes on. The child is an orphan: init adopts it, unless the
# measuring process does.
ORPHAN = """
import subprocess, sys
code = "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(2)"
subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
"""
COMMAND = (
    "import subprocess, sys, time\n"
    f"subprocess.run([sys.executable, '-c', {ORPHAN!r}])\n"
    "time.sleep(1.5)\n"
)


def test_an_orphan_of_the_command_is_counted_where_the_measure_adopts_it(tmp_path) -> None:
    """Run as its own process (as tools/rtd_build.py is), it adopts the orphans of the tree;
    a measure that walks the command's tree alone loses them."""
    import json
    import subprocess

    alone = peak_memory.run_measured([sys.executable, "-c", COMMAND], interval=0.05)
    assert alone.peak_bytes < 150 * 2**20  # what adopting fixes
    out = tmp_path / "m.json"
    cmd = [sys.executable, peak_memory.__file__, "--json", str(out), "--interval", "0.05", "--",
           sys.executable, "-c", COMMAND]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    assert json.loads(out.read_text())["peak_bytes"] >= 190 * 2**20


def test_a_failing_command_keeps_its_status() -> None:
    measured = peak_memory.run_measured([sys.executable, "-c", "raise SystemExit(3)"])
    assert measured.returncode == 3


def test_a_bad_interval_is_named() -> None:
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        peak_memory.run_measured(["true"], interval=0)
