# One module: the benchmark's display layer: every label a reader sees of its results.
"""How the benchmark's results are shown: tables, a figure, and recorded GPU tables.

This is the display layer of :mod:`amp_lesson.bench`: the results are
dataclasses (:class:`~amp_lesson.bench.measure.BenchRow`,
:class:`~amp_lesson.bench.measure.MatmulRow`,
:class:`~amp_lesson.bench.recording.Recording`) and every label a reader sees
is chosen here.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amp_lesson._checks import check_choice
from amp_lesson.bench.measure import PEAK_MEMORY_METHODS, REGIMES, BenchRow, MatmulRow
from amp_lesson.bench.recording import Recording
from amp_lesson.bench.workload import MODELS
from amp_lesson.display import Table
from amp_lesson.formats import format_spec

__all__ = [
    "MODEL_LABELS",
    "REGIME_LABELS",
    "TABLE_COLUMNS",
    "RecordingsView",
    "SpeedBeside",
    "bench_table",
    "fmt_times",
    "matmul_table",
    "plot_rows",
    "unshown_peaks_note",
]

REGIME_LABELS: dict[str, str] = {
    "fp32": "FP32", "tf32": "TF32", "fp16": "FP16 autocast", "bf16": "BF16 autocast"
}  # fmt: skip
"""How the book's tables name each regime of :data:`~amp_lesson.bench.measure.REGIMES`."""

MODEL_LABELS: dict[str, str] = {"linear_stack": "Linear stack", "transformer": "transformer"}
"""How the book's figures name each model of :data:`~amp_lesson.bench.workload.MODELS`."""

TABLE_COLUMNS: tuple[str, ...] = (
    "model", "regime", "step ms", "range ms", "vs FP32", "TFLOP/s", "peak TFLOP/s",
    "% of peak", "saved MB", "peak alloc MB", "note",
)  # fmt: skip
"""The columns of :func:`bench_table`, in order."""

_DASH = "—"  # a value not measured, or not known


def _g3(x: float | None) -> str:
    """Three significant digits, but a number of 100 or more whole (never ``2.1e+03``)."""
    if x is None:
        return _DASH
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _mb(x: int | None) -> str:
    return _DASH if x is None else _g3(x / 1e6)


_FORMATS = {
    "step ms": _g3,
    "vs FP32": lambda x: _DASH if x is None else f"{x:.2f}×",
    "TFLOP/s": _g3,
    "peak TFLOP/s": lambda x: _DASH if x is None else f"{x:.5g}",
    "% of peak": lambda x: _DASH if x is None else f"{x:.2g} %",
    "saved MB": _mb,
    "peak alloc MB": _mb,
}


def bench_table(
    rows: Sequence[BenchRow],
    *,
    columns: Sequence[str] | None = None,
    drop_empty: bool = False,
    caption: str | None = None,
) -> Table:
    """The rows as the book's table.

    Parameters
    ----------
    rows : sequence of BenchRow
        Measured or recorded rows.
    columns : sequence of str, optional
        Some of :data:`TABLE_COLUMNS`, in the order to show (default: all):
        model, regime, median step time (ms) with its min-max, speed
        relative to FP32, achieved and peak TFLOP/s, the share of peak, the
        MB saved for backward, the regime's peak memory (MB) and a note. A
        peak measured another way than
        :data:`~amp_lesson.bench.measure.PEAK_MEMORY_METHODS` (an older
        recording's, which counted earlier regimes' memory too) shows as a dash.
    drop_empty : bool, default False
        Leave out the columns that hold nothing but dashes (on a CPU: the
        datasheet peak and the share of it). A dash is a value that was not
        measured or is not known.
    caption : str, optional
        The table's caption.

    Returns
    -------
    amp_lesson.display.Table
        HTML in the book, aligned text in a terminal.

    Raises
    ------
    TypeError
        If ``rows`` is not a sequence of :class:`~amp_lesson.bench.measure.BenchRow`, or ``columns`` a
        string, or ``drop_empty`` not a bool.
    ValueError
        If a column is unknown.

    Examples
    --------
    >>> fp32 = BenchRow("linear_stack", "fp32", "cpu", step_ms=2.0, step_ms_min=1.9,
    ...                 step_ms_max=2.5, tflops=0.05, speedup=1.0,
    ...                 saved_bytes=3_000_000)
    >>> tf32 = BenchRow("linear_stack", "tf32", "cpu", available=False,
    ...                 note="unavailable")
    >>> print(bench_table([fp32, tf32], drop_empty=True))
    model         regime  step ms  range ms  vs FP32  TFLOP/s  saved MB  note
    linear_stack  FP32    2        1.9–2.5   1.00×    0.05     3         —
    linear_stack  TF32    —        —         —        —        —         unavailable
    """
    if isinstance(rows, BenchRow) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a sequence of BenchRow, got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if not isinstance(r, BenchRow):
            raise TypeError(f"rows[{i}] must be a BenchRow, got {type(r).__name__}")
    # Numbers stay numbers (the HTML table aligns them right); FORMATS turns them into text.
    table_rows = [
        {
            "model": r.model,
            "regime": REGIME_LABELS[r.regime],
            "step ms": r.step_ms,
            "range ms": _DASH
            if r.step_ms_min is None
            else f"{_g3(r.step_ms_min)}–{_g3(r.step_ms_max)}",
            "vs FP32": r.speedup,
            "TFLOP/s": r.tflops,
            "peak TFLOP/s": r.peak_tflops,
            "% of peak": r.pct_of_peak,
            "saved MB": r.saved_bytes,
            "peak alloc MB": r.peak_bytes if r.memory_method in PEAK_MEMORY_METHODS else None,
            "note": r.note or _DASH,
        }
        for r in rows
    ]
    if columns is None:
        columns = TABLE_COLUMNS
    elif isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of names from TABLE_COLUMNS, got {columns!r}")
    columns = [check_choice("columns", c, TABLE_COLUMNS) for c in columns]
    if not isinstance(drop_empty, bool):
        raise TypeError(f"drop_empty must be True or False, got {drop_empty!r}")
    if drop_empty:
        columns = [c for c in columns if any(row[c] not in (None, _DASH) for row in table_rows)]
    return Table(table_rows, columns=columns, formats=_FORMATS, caption=caption)


def matmul_table(rows: Sequence[MatmulRow]) -> Table:
    """The matrix-product times as a table: format, milliseconds, time relative to FP32.

    Parameters
    ----------
    rows : sequence of MatmulRow
        What :func:`~amp_lesson.bench.measure.matmul_rows` returned.

    Returns
    -------
    amp_lesson.display.Table
        One row per dtype.

    Examples
    --------
    >>> import torch
    >>> print(matmul_table([MatmulRow(torch.float32, 8, 0.5, 1.0)]))
    format  8×8 matmul, ms  time vs FP32
    FP32    0.5             1
    """
    return Table(
        [
            {
                "format": format_spec(r.dtype).label,
                f"{r.n}×{r.n} matmul, ms": r.ms,
                "time vs FP32": r.vs_fp32,
            }
            for r in rows
        ]
    )


def plot_rows(rows: Sequence[BenchRow], *, title: str | None = None) -> Any:
    """Two panels: each regime's speed relative to FP32 (log scale), and MB saved for backward.

    One group of bars per model, one bar per measured regime, told apart by
    hatching as well as colour, so that no distinction rests on colour alone.

    Parameters
    ----------
    rows : sequence of BenchRow
        Rows with a ``speedup`` (from :func:`~amp_lesson.bench.measure.run_benchmarks`).
    title : str, optional
        The figure's title.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.

    Raises
    ------
    ValueError
        If no row is measured with a speed-up.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    measured = [r for r in rows if r.available and r.speedup is not None]
    if not measured:
        raise ValueError("rows must hold at least one measured row with a speedup")
    models = [m for m in MODELS if any(r.model == m for r in measured)]
    regimes = [g for g in REGIMES if any(r.regime == g for r in measured)]
    by = {(r.model, r.regime): r for r in measured}
    hatches = {"fp32": "", "tf32": "..", "fp16": "//", "bf16": "xx"}
    # One above the other, five inches wide: side by side, the text was too small on a phone.
    fig, (ax_time, ax_mem) = plt.subplots(2, 1, figsize=(5.0, 6.0), layout="constrained")
    at = np.arange(len(models))
    width = 0.8 / len(regimes)
    for i, regime in enumerate(regimes):
        rs = [by.get((m, regime)) for m in models]
        speed = [np.nan if r is None else r.speedup for r in rs]
        saved = [np.nan if r is None else r.saved_bytes / 1e6 for r in rs]
        for ax, values in ((ax_time, speed), (ax_mem, saved)):
            ax.bar(at + i * width, values, width, label=REGIME_LABELS[regime],
                   hatch=hatches[regime], edgecolor="black", linewidth=0.6)  # fmt: skip
    ax_time.axhline(1, color="black", linewidth=0.8)
    ax_time.set_yscale("log")
    ax_time.set_ylabel("speed relative to FP32 (log)")
    ax_mem.set_ylabel("saved for backward (MB)")
    for ax in (ax_time, ax_mem):
        ax.set_xticks(at + width * (len(regimes) - 1) / 2, [MODEL_LABELS[m] for m in models])
    # below both panels: inside one, tall bars (a GPU's FP32 memory) would hide it
    fig.legend(*ax_mem.get_legend_handles_labels(), loc="outside lower center",
               ncols=min(len(regimes), 2))  # fmt: skip
    if title:
        fig.suptitle(title)
    return fig


@dataclass(frozen=True)
class RecordingsView:
    """Recorded GPU tables with their provenance, or what the page has without them.

    Displays as HTML in the book and as text in a terminal.

    Parameters
    ----------
    recordings : sequence of Recording
        What :func:`~amp_lesson.bench.recording.load_recordings` found.
    measured_on : str, optional
        The device the page's live numbers came from, named when there is
        no recording to show.

    Examples
    --------
    >>> print(RecordingsView([], measured_on="CPU (x86_64, 2 cores)"))
    No GPU measurement is shown here: every number on this page was measured
    on CPU (x86_64, 2 cores). ...
    """

    recordings: Sequence[Recording]
    measured_on: str | None = None

    def _without(self) -> str:
        where = f" on {self.measured_on}" if self.measured_on else " on the device that built it"
        return (
            f"No GPU measurement is shown here: every number on this page was measured{where}. "
            "On a GPU the step times change most: FP16 and BF16 matrix products run on tensor "
            "cores, several times faster than FP32, and TF32 becomes a mode of its own. The "
            "memory saved for backward stays as it is, since it counts bytes; a GPU table adds "
            "the allocator's peak and the share of the datasheet peak that a step reached."
        )

    def __str__(self) -> str:
        if not self.recordings:
            return self._without()
        parts = []
        for r in self.recordings:
            parts.append(f"{r.describe()}\n{bench_table(r.rows, drop_empty=True)}")
            note = unshown_peaks_note(r)
            if note:
                parts.append(note)
        return "\n\n".join(parts)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        if not self.recordings:
            return f'<p class="amp-no-recording">{html.escape(self._without())}</p>'
        parts = []
        for r in self.recordings:
            parts.append(f'<p class="amp-recording">{html.escape(r.describe())}</p>')
            parts.append(bench_table(r.rows, drop_empty=True)._repr_html_())
            note = unshown_peaks_note(r)
            if note:
                parts.append(f'<p class="amp-recording-note">{html.escape(note)}</p>')
        return "\n".join(parts)


def fmt_times(ratio: float) -> str:
    """A ratio as the book writes "N times": whole from 10 up, two significant digits below.

    Parameters
    ----------
    ratio : float
        A positive ratio.

    Returns
    -------
    str
        Never in exponent notation (``1.1e+02`` would be ``110``).

    Examples
    --------
    >>> fmt_times(34.2), fmt_times(8.14), fmt_times(0.5)
    ('34', '8.1', '0.5')
    """
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.2g}"


def _times_fp32(ratio: float | str | None) -> str:
    """A time relative to FP32's as a reader says it: "34× slower", "10× faster"."""
    if ratio is None:
        return _DASH
    if isinstance(ratio, str):
        return ratio
    if ratio == 1:
        return "as fast"
    text = fmt_times(ratio if ratio > 1 else 1 / ratio)
    return f"{text}× slower" if ratio > 1 else f"{text}× faster"


@dataclass(frozen=True)
class SpeedBeside:
    """Each recorded GPU's time per dtype, then this machine's, all as multiples of FP32's time.

    The recorded GPUs come first: what mixed precision is for happens there.
    Each recording gives one column per model, ``1 / speedup`` of its regimes,
    and its provenance line under the table. The live column, last, is what the
    machine running the page measured. Below 1 a dtype is faster than
    FP32, above 1 slower. Displays as HTML in the book and as text elsewhere.

    Parameters
    ----------
    live : mapping of str to float
        Time relative to FP32 per regime of
        :data:`~amp_lesson.bench.measure.REGIMES` that this run measured
        (``"fp32"`` must be 1).
    live_label : str
        What the live column measured, on which device.
    recordings : sequence of Recording
        What :func:`~amp_lesson.bench.recording.load_recordings` found.

    Raises
    ------
    ValueError
        If ``live`` names a regime not in ``REGIMES``, holds a time that is
        not a positive finite number, or does not give FP32 as 1.

    Examples
    --------
    >>> print(SpeedBeside({"fp32": 1.0, "fp16": 34.0}, "one product, this CPU", []))
    dtype  one product, this CPU
    FP32   reference
    FP16   34× slower
    No GPU recording is stored with the book's sources.
    """

    live: dict[str, float]
    live_label: str
    recordings: Sequence[Recording]

    def __post_init__(self) -> None:
        for regime, ratio in self.live.items():
            check_choice("live", regime, REGIMES)
            if not (isinstance(ratio, (int, float)) and 0 < ratio < float("inf")):
                raise ValueError(
                    f"live[{regime!r}] must be a positive finite number, got {ratio!r}"
                )
        if self.live.get("fp32") != 1:
            raise ValueError(
                f"live must give 'fp32' as 1 (times are relative to it), got {self.live}"
            )

    @classmethod
    def measure(
        cls, device: Any, recordings: Sequence[Recording], *, n: int = 256, repeats: int = 10
    ) -> SpeedBeside:
        """Time one ``n x n`` product per dtype on ``device`` and set it beside ``recordings``.

        Parameters
        ----------
        device : torch.device or str
            Where the live products run (:func:`amp_lesson.timing.matmul_times`,
            fastest of ``repeats``).
        recordings : sequence of Recording
            The recorded GPUs to set beside it.
        n : int, default 256
            Size of the square matrices.
        repeats : int, default 10
            Timed products per dtype.

        Returns
        -------
        SpeedBeside
            With FP32, FP16 and BF16 measured live.

        Examples
        --------
        >>> view = SpeedBeside.measure("cpu", [], n=16, repeats=2)
        >>> sorted(view.live), view.live["fp32"]
        (['bf16', 'fp16', 'fp32'], 1.0)
        """
        import torch

        from amp_lesson.device import resolve_device
        from amp_lesson.timing import matmul_times

        device = resolve_device(device)
        dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
        times = matmul_times(n, tuple(dtypes.values()), device, repeats=repeats)
        fastest = {fmt: times[dt].min for fmt, dt in dtypes.items()}
        live = {fmt: t / fastest["fp32"] for fmt, t in fastest.items()}
        from amp_lesson.device import device_name

        return cls(live, f"one {n}×{n} product on {device_name(device)}", recordings)

    def claim_sentences(self, key: str, device_name: str) -> tuple[str, str]:
        """Bind the two sentences a page says about these times, as ``key_live`` and ``key_recorded``.

        The first says whether the live FP16 product was faster than FP32's,
        the second what each recording's FP16 training steps gained (or that
        there is none); :func:`amp_lesson.claims.claim` glues each. A page
        shows the recorded sentence first.

        Parameters
        ----------
        key : str
            The glue keys' prefix, a Python identifier.
        device_name : str
            The machine that ran the page, as the sentence names it.

        Returns
        -------
        tuple of str
            The two sentences the run chose.

        Examples
        --------
        >>> view = SpeedBeside({"fp32": 1.0, "fp16": 34.0}, "live", [])
        >>> print(*view.claim_sentences("speed", "CPU (x86_64, 2 cores)"), sep="\\n")
        On CPU (x86_64, 2 cores), an FP16 matrix product took 34 times as long as
        an FP32 one. How fast a processor multiplies in FP16 depends on its
        arithmetic units, so this time says nothing about another machine's.
        No GPU recording is stored with the book's sources, so this page cannot
        show what a GPU with tensor cores does with the same switch.
        """
        from amp_lesson.claims import claim

        live16 = self.live["fp16"]
        live = claim(
            f"{key}_live",
            live16 < 1,
            f"On {device_name}, an FP16 matrix product "
            f"ran {fmt_times(1 / live16)} times as fast as an FP32 one.",
            f"On {device_name}, an FP16 matrix product "
            f"took {fmt_times(live16)} times as long as an FP32 one. How fast a processor "
            "multiplies in FP16 depends on its arithmetic units, so this time says nothing "
            "about another machine's.",
        )
        recorded = []
        for r in self.recordings:
            fp16 = {
                row.model: row.speedup for row in r.rows if row.regime == "fp16" and row.speedup
            }
            if {"linear_stack", "transformer"} <= fp16.keys():
                recorded.append(
                    f"On the recorded {r.gpu_name} a whole FP16 autocast training step ran "
                    f"{fmt_times(fp16['linear_stack'])} times as fast as FP32 for the Linear "
                    f"stack and {fmt_times(fp16['transformer'])} times as fast for the "
                    "transformer block."
                )
        steps = claim(
            f"{key}_recorded",
            bool(recorded),
            " ".join(recorded)
            if recorded
            else "A GPU recording would give this sentence its numbers.",
            "No GPU recording is stored with the book's sources, so this page cannot show what "
            "a GPU with tensor cores does with the same switch."
            if not self.recordings
            else "No GPU recording stored with the book's sources has FP16 training-step times "
            "for both models, so this page cannot show what a GPU with tensor cores does with "
            "the same switch.",
        )
        return live, steps

    def columns(self) -> list[tuple[str, dict[str, float]]]:
        """The table's columns of times: each recorded GPU's, then the live one.

        Returns
        -------
        list of (str, dict)
            ``(label, time relative to FP32 per regime)`` for each column.
        """
        out = []
        for r in self.recordings:
            for model in MODELS:
                ratios = {
                    row.regime: 1 / row.speedup
                    for row in r.rows
                    if row.model == model and row.available and row.speedup
                }
                if ratios:
                    label = f"{MODEL_LABELS[model]} step, {r.gpu_name} (recorded)"
                    out.append((label, ratios))
        out.append((self.live_label, dict(self.live)))
        return out

    def table(self) -> Table:
        """The times as a table.

        Returns
        -------
        Table
            One row per regime that any column measured, a dash where a
            column did not.
        """
        columns = self.columns()
        regimes = [g for g in REGIMES if any(g in ratios for _, ratios in columns)]
        rows = [
            {"dtype": format_spec(g).label}
            | {
                label: "reference" if g == "fp32" and g in ratios else ratios.get(g)
                for label, ratios in columns
            }
            for g in regimes
        ]

        return Table(rows, formats={label: _times_fp32 for label, _ in columns})

    def _notes(self) -> list[str]:
        if not self.recordings:
            return ["No GPU recording is stored with the book's sources."]
        return [f"The GPU columns: {r.describe()}" for r in self.recordings]

    def __str__(self) -> str:
        return "\n".join([str(self.table()), *self._notes()])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        notes = "".join(f'<p class="amp-recording">{html.escape(n)}</p>' for n in self._notes())
        return self.table()._repr_html_() + notes


def unshown_peaks_note(recording: Recording) -> str | None:
    """Why a recording's allocator peaks are not shown, or ``None`` when they are (or it has none).

    A row's peak is shown only when its ``memory_method`` is one of
    :data:`~amp_lesson.bench.measure.PEAK_MEMORY_METHODS`: measured for the
    regime alone. An older recording's peaks also counted what the regimes
    measured before it left allocated.

    Parameters
    ----------
    recording : Recording
        A loaded recording.

    Returns
    -------
    str or None
        A sentence for the reader, built from the recording's own rows.

    Examples
    --------
    >>> from pathlib import Path
    >>> from amp_lesson.bench.workload import BenchSizes
    >>> old = "saved_tensors + cuda_max_memory_allocated"
    >>> rows = [BenchRow("linear_stack", g, "cuda", peak_bytes=b, memory_method=old)
    ...         for g, b in [("fp32", 2_000_000_000), ("fp16", 3_000_000_000)]]
    >>> p = {"gpu_name": "NVIDIA H200", "torch_version": "2.11.0",
    ...      "date": "2026-11-30"}
    >>> recording = Recording(Path("h200.json"), p, BenchSizes(), rows)
    >>> print(unshown_peaks_note(recording))
    The recording's "peak alloc MB" is not shown. It was read as
    torch.cuda.max_memory_allocated ... in the order the regimes ran they only
    rise, from 2000 to 3000 MB. ...
    """
    stale = [
        r for r in recording.rows
        if r.peak_bytes is not None and r.memory_method not in PEAK_MEMORY_METHODS
    ]  # fmt: skip
    if not stale:
        return None
    peaks = [r.peak_bytes / 1e6 for r in stale]
    rising = all(a < b for a, b in itertools.pairwise(peaks))
    how = (
        f"in the order the regimes ran they only rise, from {_g3(peaks[0])} to {_g3(peaks[-1])} MB"
        if rising and len(peaks) > 1
        else "so each depends on the regimes measured before it"
    )
    return (
        'The recording\'s "peak alloc MB" is not shown. It was read as '
        "torch.cuda.max_memory_allocated after reset_peak_memory_stats, which starts from what is "
        "allocated at that moment, and that included memory the regimes measured before had left "
        f"allocated: {how}. The benchmark now measures each regime's peak above what was "
        "allocated when the regime began, and a recording made with it carries the column."
    )
