#!/usr/bin/env bash
# The book's GPU check, in one go, for a session that has a CUDA machine.
#
#   bash tools/gpu_check.sh            # from anywhere; runs in the repository root
#
# 1. every test file with a test marked `cuda` (tests/test_gpu.py and the modules' own CUDA
#    cases), whole, so their other tests run on the GPU too; plus the bench tests and doctests,
# 2. the recording: python -m amp_lesson.bench --record -> docs/_data/gpu/<gpu>.json,
# 3. the GPU edition: tools/record_edition.py builds the book with every page executed on
#    the GPU and stores it in docs/_editions/<gpu>/ (needs the book's build, ./book).
# The recordings are written even if a test fails; the exit status is the first failure.
# Commit the JSON file and the edition's folder: CPU builds of the book show them.
#
# Python: $PYTHON if set, else the first of .venv/bin/python, python3, python whose torch
# sees a CUDA device (amp_lesson is taken from src/ and the book's build from book/src/, so
# neither need be installed).
# If $OUT names a folder (the device tool's results folder), the recording and the
# log are copied there too, and docs/_editions as editions.tar.gz. Takes about two minutes
# on a data-centre GPU.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for candidate in .venv/bin/python python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      PY="$candidate"
      break
    fi
  done
fi
if [[ -z "$PY" ]]; then
  echo "gpu_check: no Python here has a torch that sees a CUDA device; set PYTHON=..." >&2
  exit 2
fi

export PYTHONPATH="$PWD/src:$PWD/book/src${PYTHONPATH:+:$PYTHONPATH}"
export AMP_LESSON_DEVICE=cuda # fail loudly rather than fall back to the CPU
WORK="$(mktemp -d -t gpu_check.XXXXXX)"

run_all() {
  local status=0
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
      "GPU", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'

  echo "== tests (every file with a cuda-marked test, bench)"
  local cuda_files
  mapfile -t cuda_files < <(grep -l "pytest.mark.cuda" tests/test_*.py)
  "$PY" -m pytest "${cuda_files[@]}" tests/test_bench.py src/amp_lesson/bench src/amp_lesson/timing.py \
    -q -p no:cacheprovider -rs || status=$?

  echo "== recording"
  "$PY" -m amp_lesson.bench --record | tee "$WORK/record.log"
  local record_status=${PIPESTATUS[0]}
  if [[ $status -eq 0 ]]; then status=$record_status; fi

  echo "== the GPU edition (every page executed here)"
  if "$PY" -c 'import sphinx, myst_nb, jupyter_cache, ipykernel, sphinx_book_theme, amp_book' 2>/dev/null; then
    "$PY" tools/record_edition.py --device cuda
    local edition_status=$?
    if [[ $status -eq 0 ]]; then status=$edition_status; fi
  else
    echo "gpu_check: NOT RECORDED: this Python lacks the book's toolchain (pip install -e '.[notebooks]' -e ./book;"
    echo "  offline: tools/device_wheels.py, then CONTRIBUTING.md, 'The GPU edition')"
    if [[ $status -eq 0 ]]; then status=3; fi
  fi
  return "$status"
}

run_all 2>&1 | tee "$WORK/gpu_check.log"
status=${PIPESTATUS[0]}
written="$(sed -n 's/^wrote //p' "$WORK/record.log" 2>/dev/null | tail -n 1)"
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  if [[ -n "$written" && -f "$written" ]]; then cp "$written" "$OUT/"; fi
  cp "$WORK/gpu_check.log" "$OUT/gpu_check.log"
  if [[ -d docs/_editions ]]; then tar -czf "$OUT/editions.tar.gz" -C docs _editions; fi
fi
echo "== done: status $status${written:+, recording $written}"
exit "$status"
