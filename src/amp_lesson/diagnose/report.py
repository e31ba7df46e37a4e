# One module: what a diagnosis measured, as attributes, plain values and a printed report.
"""The :class:`Diagnosis` that :func:`~amp_lesson.diagnose.diagnose` returns.

Its sections are plain dictionaries (:meth:`Diagnosis.to_dict` gives them
all, ready for ``json.dumps``); ``print`` gives the report, section by
section, each line saying what its figure is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from amp_lesson._checks import check_int
from amp_lesson.autocast import NOT_KNOWN
from amp_lesson.diagnose import rules as _rules
from amp_lesson.formats import dtype_of

__all__ = ["Diagnosis", "percent"]

_HIST_LOW, _HIST_HIGH = -140, 20


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`~amp_lesson.diagnose.diagnose` measured, section by section; ``print`` it.

    Parameters
    ----------
    model : str
        The model's class name.
    device : str
        Where it ran.
    parameters : int
        Trainable parameter values.
    steps : int
        Training steps per run.
    seconds : float
        How long :func:`~amp_lesson.diagnose.diagnose` ran.
    autocast, gradients, activations, advice, training, memory, recommendation : dict
        The sections; see :func:`~amp_lesson.diagnose.diagnose`.
    unavailable : dict
        The half formats that could not run the model here, each with the
        first line of its error; the other sections hold what the rest did.
    weights : dict
        For each run (``"fp32"``, ``"fp16"``, ``"bf16"``), its parameters after
        the last step (CPU copies, by name). Not in :meth:`to_dict`.
    """

    model: str
    device: str
    parameters: int
    steps: int
    seconds: float
    autocast: dict[str, Any]
    gradients: dict[str, Any]
    activations: dict[str, Any]
    advice: dict[str, Any]
    training: dict[str, Any]
    memory: dict[str, Any]
    recommendation: dict[str, Any]
    unavailable: dict[str, str] = field(default_factory=dict)
    weights: dict[str, dict[str, torch.Tensor]] = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every section as plain Python values, without ``weights``.

        Returns
        -------
        dict
            ``model``, ``device``, ``parameters``, ``steps``, ``seconds``,
            ``unavailable`` and the sections; ``json.dumps`` takes it as it is.
        """
        return {
            "model": self.model,
            "device": self.device,
            "parameters": self.parameters,
            "steps": self.steps,
            "seconds": self.seconds,
            "unavailable": self.unavailable,
            "autocast": self.autocast,
            "gradients": self.gradients,
            "activations": self.activations,
            "advice": self.advice,
            "training": self.training,
            "memory": self.memory,
            "recommendation": self.recommendation,
        }

    def __str__(self) -> str:
        return _report(self)

    def recommend(self, *, bf16_supported: bool) -> dict[str, Any]:
        """The recommendation the same measurements give on a device with or without BF16.

        Parameters
        ----------
        bf16_supported : bool
            Whether the device computes in BF16 natively; ``False`` asks what
            the rules choose on a GPU without it (a T4, a V100).

        Returns
        -------
        dict
            As ``recommendation`` (see :func:`~amp_lesson.diagnose.rules.recommend`).

        Raises
        ------
        TypeError
            If ``bf16_supported`` is not a bool.
        """
        if not isinstance(bf16_supported, bool):
            raise TypeError(f"bf16_supported must be a bool, got {bf16_supported!r}")
        return _rules.recommend(
            self.gradients, self.advice, self.training, bf16_supported=bf16_supported,
            steps=self.steps, unavailable=self.unavailable,
        )  # fmt: skip

    def gradient_histogram(self, low: int = _HIST_LOW) -> tuple[list[int], list[float], float]:
        """The ``log2`` histogram of every parameter's FP32 gradient together.

        Parameters
        ----------
        low : int, default -140
            The first bin; the bins below it are added into it.

        Returns
        -------
        edges, shares, zero_share
            As :func:`~amp_lesson.gradients.log2_histogram` returns them, over
            all gradient values of the model's parameters.

        Raises
        ------
        ValueError
            If ``low`` is outside the recorded range, -140 to 19.
        """
        check_int("low", low)
        if not _HIST_LOW <= low < _HIST_HIGH:
            raise ValueError(f"low must be in [{_HIST_LOW}, {_HIST_HIGH - 1}], got {low}")
        rows = [r for r in self.gradients["tensors"].values() if r["kind"] == "parameter"]
        total = sum(row["values"] for row in rows)
        counts = [0.0] * (_HIST_HIGH - _HIST_LOW)
        zero = 0.0
        for row in rows:
            histogram = row["histogram"]
            for i, share in enumerate(histogram["shares"]):
                counts[i] += share * row["values"]
            zero += histogram["zero"] * row["values"]
        cut = low - _HIST_LOW
        counts = [sum(counts[: cut + 1]), *counts[cut + 1 :]]
        return list(range(low, _HIST_HIGH)), [c / total for c in counts], zero / total

    def plot_gradients(
        self,
        ax: Any = None,
        dtype: str | torch.dtype = "fp16",
        *,
        label: str | None = None,
        overlay: bool = False,
    ) -> Any:
        """Draw :meth:`gradient_histogram` against ``dtype``'s range (FP16 from ``2**-50``).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw (default: new axes).
        dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
            The format whose limits to mark.
        label : str, optional
            The legend label (default: the model's class name).
        overlay : bool, default False
            Draw a dashed outline over axes that hold another model's
            histogram (see :func:`~amp_lesson.gradients.plot_gradient_histogram`).

        Returns
        -------
        matplotlib.axes.Axes
            The axes drawn on.
        """
        from amp_lesson.gradients import plot_gradient_histogram

        low = -50 if dtype_of(dtype) == torch.float16 else _HIST_LOW
        return plot_gradient_histogram(
            None, ax, dtype=dtype, histogram=self.gradient_histogram(low),
            label=label or self.model, overlay=overlay,
        )  # fmt: skip


# --------------------------------------------------------------------------- the report


def percent(share: float | None) -> str:
    """A share as a percentage, never in exponent notation.

    Parameters
    ----------
    share : float or None
        A share in ``[0, 1]``, or ``None`` for one not measured.

    Returns
    -------
    str
        ``"n/a"``, ``"0%"``, ``"<0.01%"`` or three significant digits at most.

    Examples
    --------
    >>> percent(1.0), percent(0.24), percent(0.000283), percent(2e-7), percent(0.0)
    ('100%', '24%', '0.0283%', '<0.01%', '0%')
    """
    if share is None:
        return "n/a"
    p = 100 * share
    if p == 0:
        return "0%"
    if p < 0.01:
        return "<0.01%"
    return f"{float(f'{p:.3g}'):g}%"


def power(value: float | None) -> str:
    """``2^k`` for a power of two, else the value."""
    if value is None:
        return "none"
    k = math.log2(value)
    return f"2^{round(k)}" if k == round(k) else f"{value:g}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _names(modules: list[str]) -> str:
    return ", ".join(name or "(the model)" for name in modules) or "none"


def _module(name: str, modules: dict[str, Any]) -> str:
    kind = modules.get(name, {}).get("type", "")
    where = "the model" if not name else f"module {name}"
    return f"{where} ({kind})" if kind else where


def _worst(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "n/a"
    if not entry["share"]:
        return "0%"
    what = "gradient of" if entry["kind"] == "parameter" else "output gradient of"
    return f"{percent(entry['share'])} ({what} {entry['tensor']})"


def _autocast_lines(d: Diagnosis) -> list[str]:
    ac, on = d.autocast, d.device
    ops = ac["ops"]
    calls = sum(s["calls"] for s in ops.values())
    lines = ["autocast (each op as the model's code calls it, and the dtype its arithmetic ran in)"]
    for fmt, name in (("fp16", "float16"), ("bf16", "bfloat16")):
        if fmt in d.unavailable:
            continue
        low = sum(s[f"computes_{fmt}"].get(name, 0) for s in ops.values())
        lines.append(f"  {fmt}: {low} of {calls} calls computed in {name} on {on}")
    fp16 = "fp16" not in d.unavailable
    if fp16:
        lines.append(f"  computed in FP32 only, under FP16 autocast on {on}: "
                     f"{', '.join(ac['stayed_fp32']) or 'none'}")  # fmt: skip
        hidden = sorted(
            op
            for op, s in ops.items()
            if "float16" in s["computes_fp16"] and set(s["fp16"]) == {"float32"}
        )
        if hidden:
            lines.append(f"  computed in float16, returned float32 on {on}: {', '.join(hidden)}")
    if fp16 and d.device.split(":")[0] != "cuda":
        lines.append(
            f"  returned FP32 under CUDA's FP16 autocast: "
            f"{', '.join(ac['cuda_stayed_fp32']) or 'none'}"
        )
        unknown = sorted(
            op for op, s in ops.items()
            if NOT_KNOWN in s["cuda_fp16"] or NOT_KNOWN in s["cuda_bf16"]
        )  # fmt: skip
        if unknown:
            lines.append(f"  CUDA's choice not known without a GPU for: {', '.join(unknown)}")
    if ac["cuda_refuses"]:
        lines.append(
            f"  CUDA autocast refuses: {', '.join(ac['cuda_refuses'])} (compute it outside "
            "autocast, or use its logits form)"
        )
    bad = ac["first_nonfinite_fp16"]
    if bad is not None:
        where = _module(bad["module"], d.activations["modules"])
        lines.append(f"  first inf or NaN under FP16 autocast: {bad['op']} in {where}")
    return lines


def _gradient_lines(d: Diagnosis) -> list[str]:
    g = d.gradients
    w, u = g["worst"], g["underflow"]
    noise = g["noise_floor"]
    lines = [("gradients (values a real half step holds as zero where FP32 holds them above "
             "round-off; the worst tensor decides)")]  # fmt: skip
    if noise["measured"]:
        lines.append(
            f"  noise floor (a float64 step): {noise['noise']:,} of {noise['nonzero']:,} non-zero "
            "FP32 values are round-off, left out"
        )
    else:
        lines.append(f"  noise floor not measured ({noise['error']}): every non-zero value counts")
    if g["random_not_played"]:
        lines.append(
            f"  random draws inside {', '.join(g['random_not_played'])} are not played back: "
            "each run draws its own, from the same seed"
        )
    if "fp16" in d.unavailable:
        lines.append("  FP16: could not run here (see above)")
    else:
        scale = power(g["settled_scale"])
        if g["settled_scale_capped"]:
            scale += " (the search's cap; a GradScaler would go higher)"
        lines.append(f"  settled scale (the largest at which an FP16 step is finite here): {scale}")
        rows = [("FP16 at scale 1", "fp16_unscaled")]
        if g["settled_scale"] is not None:
            default = min(g["settled_scale"], _rules.DEFAULT_SCALE)
            if default == _rules.DEFAULT_SCALE:
                rows.append((f"FP16 at {power(default)} (GradScaler's default)", "fp16_default"))
            if g["settled_scale"] != default or default != _rules.DEFAULT_SCALE:
                rows.append((f"FP16 at the settled scale {scale}", "fp16_settled"))
        for words, key in rows:
            lines.append(f"  {words}: {percent(u[key])} of all, worst {_worst(w[key])}")
    if "bf16" not in d.unavailable:
        lines.append(f"  BF16: {percent(u['bf16'])} of all, worst {_worst(w['bf16'])}")
    return lines


def _training_lines(d: Diagnosis) -> list[str]:
    t = d.training
    lines = ["training (first loss under the run's autocast -> final loss in FP32)"]
    fp32 = t["fp32"]
    move = _rules.moved(fp32)
    for fmt in ("fp32", "fp16", "bf16"):
        run = t.get(fmt)
        if run is None:
            lines.append(f"  {fmt}: could not run here")
            continue
        extra = ""
        if run["scales"] is not None:
            kept = f", {', '.join(run['keep_fp32'])} in FP32" if run["keep_fp32"] else ""
            extra = (
                f", {run['skipped']} of {len(run['losses'])} steps skipped, scale "
                f"{power(run['scales'][0])} -> {power(run['final_scale'])}{kept}"
            )
        gap = ""
        if fmt != "fp32":
            share = abs(run["gap"]) / move if move else math.inf
            shown = "n/a" if not math.isfinite(share) else f"{share:.2%}"
            gap = f", gap {run['gap']:+.3g} ({shown} of FP32's move; limit {_rules.TRACKING_SHARE:.0%})"
        lines.append(f"  {fmt}: {run['losses'][0]:.4g} -> {run['final_loss']:.4g}{gap}{extra}")
    if not math.isfinite(move):
        lines.append("  FP32's own loss went inf or NaN: there is nothing to compare the runs with")
    elif move < _rules.MOVED_SHARE * abs(fp32["losses"][0]) or move == 0:
        lines.append(
            f"  FP32 moved the loss by {move:.3g}, under {_rules.MOVED_SHARE:.0%} of its first "
            "value: too little to compare the runs by"
        )
    return lines


def _advice_words(d: Diagnosis) -> str:
    """What trying the list of modules kept in FP32 showed."""
    a, fp16 = d.advice, d.training.get("fp16")
    names = _names(a["keep_fp32"])
    if a["forward_finite"]:
        said = f"tried: with {names} in FP32 every op of the FP16 forward pass gave finite values"
    else:
        bad = a["first_nonfinite"]
        said = (
            f"tried: with {names} in FP32 the FP16 forward pass still gave inf or NaN in "
            f"{bad['op']} of {_module(bad['module'], d.activations['modules'])}: no list the "
            "search tried kept it finite"
        )
    if fp16 is not None:
        said += f", and {fp16['skipped']} of {len(fp16['losses'])} FP16 steps were skipped"
    return said


def _report(d: Diagnosis) -> str:
    a, m, r = d.activations, d.memory, d.recommendation
    lines = [
        (
            f"{d.model}: {d.parameters:,} parameters on {d.device}, {d.steps} steps per run, "
            f"diagnosed in {d.seconds:.1f} s"
        ),
    ]
    for fmt, error in d.unavailable.items():
        lines.append(f"{fmt.upper()} could not run this model on {d.device}: {error}")
    lines.append("")
    lines += _autocast_lines(d)
    lines += _gradient_lines(d)
    largest = a["largest"]
    lines += [
        "activations (FP32 forward pass, every module's tensor outputs)",
        (
            f"  largest |output| {largest['max_abs']:.3g}, of "
            f"{_module(largest['module'], a['modules'])}; FP16 rounds "
            f"{_rules.FP16_OVERFLOW:.0f} and above to inf"
        ),
        f"  beyond FP16's range, starting at: {_names(a['overflow_starts'])}",
    ]
    lines += _training_lines(d)
    b = m["bytes_per_parameter"]
    state = b["weights"] + b["gradients"] + b["optimizer_state"]
    saved = m["saved_for_backward"]
    copies = b["autocast_weight_copies"]
    lines += [
        "memory",
        (
            f"  {state:.3g} bytes per parameter with {m['optimizer']}, whatever the autocast "
            f"dtype: weights {b['weights']:.3g}, gradients {b['gradients']:.3g}, optimizer "
            f"state {b['optimizer_state']:.3g}"
        ),
        "  autocast's half-precision weight copies during a step: "
        + ", ".join(f"{fmt} {copies[fmt]:.3g}" for fmt in copies if copies[fmt] is not None)
        + " bytes per parameter",
        "  activations saved for backward, beside those copies: "
        + ", ".join(f"{fmt} {_bytes(saved[fmt]['bytes'])}" for fmt in saved if saved[fmt]),
        "recommendation",
    ]
    choice = r["choice"]
    if choice == "fp16":
        s = r["scaler"]
        lines.append(f"  FP16 with torch.amp.GradScaler(init_scale={s['init_scale']:g})")
        if s["growth_steps"]:
            lines.append(
                f"  (it grows to the settled scale, {power(s['settled_scale'])}, after "
                f"{s['growth_steps']:,} clean steps at GradScaler's default growth_interval)"
            )
    elif choice == "undecided":
        steps = r["decide_with_steps"]
        if r.get("fp32_diverged"):
            why = "FP32 training's own loss went inf or NaN (is the learning rate too high?)"
        elif steps:
            why = (f"diagnose again with steps={steps}, about twice what FP32's pace says would "
                   "move the loss enough")  # fmt: skip
        else:
            why = "FP32 training did not move the loss at all (is the learning rate zero?)"
        lines.append(f"  not decided: {why}")
    else:
        lines.append({"bf16": "  BF16 autocast, no GradScaler", "fp32": "  FP32"}[choice])
    if d.advice["keep_fp32"]:
        lines.append(f"  under FP16, keep in FP32: {_names(d.advice['keep_fp32'])}")
        lines.append(f"    ({_advice_words(d)})")
    words = {rule["key"]: rule["words"] for rule in r["rules"]}
    lines.append("  because:")
    lines += [f"    {words[key]}" for key in r["because"]]
    lines.append("  also measured:")
    also = [words[key] for key in words if key not in r["because"]]
    lines += [f"    {w}" for i, w in enumerate(also) if w not in also[:i]]  # once each
    return "\n".join(lines)
