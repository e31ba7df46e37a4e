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


def test_a_failing_command_keeps_its_status() -> None:
    measured = peak_memory.run_measured([sys.executable, "-c", "raise SystemExit(3)"])
    assert measured.returncode == 3


def test_a_bad_interval_is_named() -> None:
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        peak_memory.run_measured(["true"], interval=0)
