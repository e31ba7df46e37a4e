"""What mixed precision buys: step time, memory and achieved TFLOP/s, measured.

Mixed precision is sold on two promises: matrix products run faster in FP16
and BF16 (on GPUs with tensor cores), and the activations kept for backward
take half the bytes. This subpackage measures both for one full training
step (forward, loss, backward, optimizer step) of two models under four
precision regimes, and shows the results beside GPU measurements recorded
elsewhere. One module per concern:

- :mod:`amp_lesson.bench.peaks` -- the datasheet peak table;
- :mod:`amp_lesson.bench.workload` -- the models, their sizes per device and
  their FLOP counts;
- :mod:`amp_lesson.bench.measure` -- timing and memory of a step, and the
  bare matrix product;
- :mod:`amp_lesson.bench.recording` -- the JSON recording of a GPU's run
  and its schema;
- :mod:`amp_lesson.bench.tables` -- tables and the figure (every label a
  reader sees);
- :mod:`amp_lesson.bench.cli` -- ``python -m amp_lesson.bench``.

The names a page needs are importable from here:

>>> from amp_lesson import bench
>>> bench.REGIMES, bench.MODELS
(('fp32', 'tf32', 'fp16', 'bf16'), ('linear_stack', 'transformer'))
"""

from amp_lesson.bench.cli import main
from amp_lesson.bench.measure import (
    PEAK_MEMORY_METHODS,
    REGIMES,
    BenchRow,
    MatmulRow,
    cpu_features,
    make_train_step,
    matmul_rows,
    measure_step,
    paired_speedup,
    run_benchmarks,
)
from amp_lesson.bench.peaks import PEAK_SOURCE, PEAK_TFLOPS, peak_tflops
from amp_lesson.bench.recording import (
    DEFAULT_FOLDER,
    SCHEMA,
    SCHEMA_FILE,
    Recording,
    RecordingError,
    load_recordings,
    record,
    slugify,
    validate_recording,
    write_recording,
)
from amp_lesson.bench.tables import (
    MODEL_LABELS,
    REGIME_LABELS,
    TABLE_COLUMNS,
    RecordingsView,
    SpeedBeside,
    bench_table,
    fmt_times,
    matmul_table,
    plot_rows,
    unshown_peaks_note,
)
from amp_lesson.bench.workload import (
    CPU_SIZES,
    CUDA_SIZES,
    MODELS,
    BenchSizes,
    bench_sizes,
    build_workload,
    linear_stack_flops,
    step_flops,
    torch_counted_flops,
    transformer_flops,
)

__all__ = [
    "CPU_SIZES",
    "CUDA_SIZES",
    "DEFAULT_FOLDER",
    "MODELS",
    "MODEL_LABELS",
    "PEAK_MEMORY_METHODS",
    "PEAK_SOURCE",
    "PEAK_TFLOPS",
    "REGIMES",
    "REGIME_LABELS",
    "SCHEMA",
    "SCHEMA_FILE",
    "TABLE_COLUMNS",
    "BenchRow",
    "BenchSizes",
    "MatmulRow",
    "Recording",
    "RecordingError",
    "RecordingsView",
    "SpeedBeside",
    "bench_sizes",
    "bench_table",
    "build_workload",
    "cpu_features",
    "fmt_times",
    "linear_stack_flops",
    "load_recordings",
    "main",
    "make_train_step",
    "matmul_rows",
    "matmul_table",
    "measure_step",
    "paired_speedup",
    "peak_tflops",
    "plot_rows",
    "record",
    "run_benchmarks",
    "slugify",
    "step_flops",
    "torch_counted_flops",
    "transformer_flops",
    "unshown_peaks_note",
    "validate_recording",
    "write_recording",
]
