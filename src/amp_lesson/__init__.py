"""amp_lesson: the computation behind the mixed-precision book.

Every number, table and figure of the book is computed by this package when
the book is built. One module per idea:

- :mod:`amp_lesson.device` -- which device the book runs on, and the
  provenance line each page shows.
- :mod:`amp_lesson.formats` -- what a floating-point format can hold.
- :mod:`amp_lesson.scaler` -- dynamic loss scaling, exactly as
  :class:`torch.amp.GradScaler` does it.
- :mod:`amp_lesson.accumulation` -- the training loops the book runs.
- :mod:`amp_lesson.recipe` -- the loop a reader copies: any loader, windows
  weighted by their samples.
- :mod:`amp_lesson.windows` -- a loader's accumulation windows, the float64
  reference that steps once per window, and the bound the recipe meets.
- :mod:`amp_lesson.memory` -- where the bytes go.
- :mod:`amp_lesson.autocast` -- the dtype autocast gives each op and each
  tensor of a step, and the ways to train in lower precision.
- :mod:`amp_lesson.fp8` -- scaling tensors into FP8: casts, losses, delayed scaling.
- :mod:`amp_lesson.gradients` -- real gradients (digits MLP) and what FP16 keeps of them.
- :mod:`amp_lesson.accumulation_pitfalls` -- where accumulation is not the
  full batch.
- :mod:`amp_lesson.scaler_failures` -- how GradScaler fails.
- :mod:`amp_lesson.models` -- the small seeded models every page builds.
- :mod:`amp_lesson.timing` -- the one timer, and the matrix-product benchmark.
- :mod:`amp_lesson.distributed` -- accumulation with DistributedDataParallel.
- :mod:`amp_lesson.sharded` -- FSDP2 with a mixed-precision policy.
- :mod:`amp_lesson.training_job` -- checkpoints, several losses, gradient
  penalties, custom autograd functions and ``torch.compile`` under AMP.
- :mod:`amp_lesson.mx` -- block scaling: the MX formats MXFP8 and MXFP4.
- :mod:`amp_lesson.pure_bf16` -- training without FP32 master weights.
- :mod:`amp_lesson.bench` -- what mixed precision buys: step time, memory,
  TFLOP/s, and recorded GPU results.
- :mod:`amp_lesson.display` -- tables and number formatting for pages.
- :mod:`amp_lesson.playground` -- what the in-page bit explorer and GradScaler
  playground share with Python: their input language, the formats' parameters.
- :mod:`amp_lesson.plotting` -- figures that read in light and dark themes.
- :mod:`amp_lesson.diagnose` -- the book's instruments pointed at your own
  model: what FP16 and BF16 would do to it, and which to use.

The book's build (its Sphinx extension, kernel server and notebook export) is a
distribution of its own, ``amp-lesson-book`` (``book/`` in the repository):
nothing here imports Sphinx.
"""

__version__ = "0.1.0.dev0"
