# One module: the thresholds and rules the recommendation is chosen by, and the choice itself.
"""The rules :func:`~amp_lesson.diagnose.diagnose` recommends a format by.

Each rule tests numbers the diagnosis measured and holds, fails, or is not
decided (the measurement cannot tell). :func:`recommend` evaluates them and
takes the first choice whose rules all hold:

1. **BF16** if ``bf16_supported``, ``bf16_keeps_gradients`` and
   ``bf16_tracks_fp32`` hold. BF16 comes first because it needs no loss
   scale and skips no step: its normal numbers reach as far down as FP32's.
   It keeps 8 significant bits to FP16's 11; the training runs are where
   that shows.
2. **FP16 with a GradScaler** if ``forward_fits_fp16``,
   ``scaler_keeps_fp16_gradients`` and ``fp16_tracks_fp32`` hold, with the
   ``init_scale`` and the modules to keep in FP32 that the FP16 run used.
3. **Not decided** if neither applies but one of them fails only on rules
   not decided: FP32 training moved the loss too little in ``steps`` to
   compare the runs by. The recommendation says how many steps would.
4. **FP32** otherwise: the measurements showed that neither half format
   trains this model as FP32 does here.

``fp16_keeps_unscaled_gradients`` says whether this model would do without
the loss scale (when it fails, the scale matters); it does not enter the
choice (FP16 always runs with a scaler). Every rule reads "holds" as the good
outcome.

>>> [rule.key for rule in RULES][:2]
['forward_fits_fp16', 'fp16_keeps_unscaled_gradients']
>>> f"one in {1 / LOST_SHARE:,.0f}"
'one in 1,000'
"""

from __future__ import annotations

import math
import platform
from typing import Any, NamedTuple

import torch

__all__ = [
    "DEFAULT_SCALE",
    "FP16_MAX",
    "FP16_OVERFLOW",
    "FP16_SMALLEST_NORMAL",
    "FP16_SMALLEST_SUBNORMAL",
    "LOST_SHARE",
    "MOVED_SHARE",
    "NOISE_SHARE",
    "RULES",
    "TRACKING_SHARE",
    "Rule",
    "bf16_native",
    "recommend",
]

FP16_MAX = float(torch.finfo(torch.float16).max)
"""The largest finite FP16 value, 65504."""

FP16_OVERFLOW = 65520.0
"""The smallest magnitude FP16 rounds to ``inf``: halfway between 65504 and the next step,
65536, which ties to even, beyond the largest exponent. A value between 65504 and 65520
rounds to 65504."""

FP16_SMALLEST_NORMAL = float(torch.finfo(torch.float16).tiny)
"""FP16's smallest normal number, ``2**-14``: below it FP16 has fewer significant bits, and
below ``2**-25`` none."""

FP16_SMALLEST_SUBNORMAL = 2.0**-24
"""The smallest FP16 subnormal, ``2**-24``; a value at or below half of it rounds to zero."""

DEFAULT_SCALE = 2.0**16
"""``torch.amp.GradScaler``'s default ``init_scale``."""

LOST_SHARE = 1e-3
"""A format keeps a model's gradients when a step in it loses at most this share of the
non-zero values of each gradient tensor (see :func:`~amp_lesson.diagnose.diagnose`)."""

NOISE_SHARE = 0.5
"""A gradient value is round-off noise, which FP32 cannot tell from zero, when FP32's value
differs from a float64 run's by at least this share of the float64 value."""

TRACKING_SHARE = 0.1
"""A run tracks FP32 when its final loss is within this share of how far FP32 moved the loss."""

MOVED_SHARE = 0.01
"""Runs are compared only where FP32 moved the loss by at least this share of its first value."""


class Rule(NamedTuple):
    """One rule the recommendation is chosen by, with the words for each outcome.

    Parameters
    ----------
    key : str
        Its name in ``Diagnosis.recommendation["rules"]``.
    tests : str
        What its condition tests, in words.
    says, otherwise : str
        The sentence when the condition holds, and when it fails.
    undecided : str
        The sentence when the measurements cannot decide it (empty for a rule
        that is always decided).
    """

    key: str
    tests: str
    says: str
    otherwise: str
    undecided: str = ""


_PER = f"one in {1 / LOST_SHARE:,.0f} of each gradient tensor's non-zero values"
_FOLLOWS = (
    f"its final loss differs from FP32's by at most {TRACKING_SHARE:.0%} of how far FP32 "
    "training moved the loss"
)
_NOT_FOLLOWS = (
    f"its loss is not finite, or its final loss differs from FP32's by more than "
    f"{TRACKING_SHARE:.0%} of how far FP32 training moved the loss"
)
_TOO_LITTLE = (
    f"FP32 training moved the loss by less than {MOVED_SHARE:.0%} of its first value, too little "
    "to compare the runs by"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "forward_fits_fp16",
        "under FP16 autocast, with the modules of keep_fp32 run in FP32 (none if the list is "
        "empty), every op of the forward pass and the loss gives finite values wherever FP32's "
        "does",
        "Under FP16 autocast every op of the forward pass gave finite values (with the modules "
        "listed to keep in FP32, if any, run in FP32).",
        "Under FP16 autocast an op of the forward pass gave inf or NaN, and running the modules "
        "it happened in in FP32, where a module narrower than the model held it, did not stop "
        "it.",
    ),
    Rule(
        "fp16_keeps_unscaled_gradients",
        "at scale 1, the FP16 step loses at most LOST_SHARE of each gradient tensor's "
        "non-zero values",
        f"Even without a loss scale, an FP16 step loses at most {_PER}.",
        f"Without a loss scale, an FP16 step would lose more than {_PER.replace('each', 'some')}.",
    ),
    Rule(
        "scaler_keeps_fp16_gradients",
        "some scale keeps an FP16 step's gradient finite, and from the init_scale "
        "recommended (GradScaler's default 2**16 where that keeps the gradient, else the "
        "settled scale) the FP16 step loses at most LOST_SHARE of each gradient tensor's "
        "non-zero values",
        f"From the init_scale recommended, an FP16 step loses at most {_PER}.",
        f"An FP16 step loses more than {_PER.replace('each', 'some')} even at the scale a "
        "GradScaler settles on, or no scale keeps its gradient finite.",
    ),
    Rule(
        "bf16_keeps_gradients",
        "the BF16 step loses at most LOST_SHARE of each gradient tensor's non-zero values",
        f"A BF16 step loses at most {_PER}, without any scaling.",
        f"A BF16 step loses more than {_PER.replace('each', 'some')}.",
    ),
    Rule(
        "fp16_tracks_fp32",
        "FP32 moved the loss by at least MOVED_SHARE of its first value, and the FP16 run's "
        "losses are finite and its final loss within TRACKING_SHARE of that move from FP32's",
        f"Training in FP16 with a GradScaler follows FP32 training: {_FOLLOWS}.",
        f"Training in FP16 with a GradScaler does not follow FP32 training: {_NOT_FOLLOWS}.",
        f"Whether training in FP16 follows FP32 training is not decided: {_TOO_LITTLE}.",
    ),
    Rule(
        "bf16_tracks_fp32",
        "FP32 moved the loss by at least MOVED_SHARE of its first value, and the BF16 run's "
        "losses are finite and its final loss within TRACKING_SHARE of that move from FP32's",
        f"Training in BF16 follows FP32 training: {_FOLLOWS}.",
        f"Training in BF16 does not follow FP32 training: {_NOT_FOLLOWS}.",
        f"Whether training in BF16 follows FP32 training is not decided: {_TOO_LITTLE}.",
    ),
    Rule(
        "bf16_supported",
        "the device computes in BF16 natively: a GPU for which "
        "torch.cuda.is_bf16_supported(including_emulation=False), or a CPU with AVX-512 BF16, "
        "AMX or Arm BF16 instructions",
        "This device computes in BF16 natively.",
        "This device does not compute in BF16 natively (it would emulate it, slowly).",
    ),
)
"""The rules of the recommendation, in the order the report lists them."""

_WORDS = {rule.key: rule for rule in RULES}
_BF16 = ("bf16_supported", "bf16_keeps_gradients", "bf16_tracks_fp32")
_FP16 = ("forward_fits_fp16", "scaler_keeps_fp16_gradients", "fp16_tracks_fp32")


def bf16_native(device: torch.device | str) -> bool:
    """Whether ``device`` computes in BF16 with instructions of its own.

    A GPU does where :func:`torch.cuda.is_bf16_supported` says so without
    emulation (a T4 or V100 does not); a CPU where it has AVX-512 BF16 or AMX
    instructions (x86) or the BF16 extension (Arm). Elsewhere torch emulates
    BF16 in FP32 arithmetic: the numbers are BF16's, the speed is not.

    Parameters
    ----------
    device : torch.device or str
        A CPU or CUDA device.

    Returns
    -------
    bool
        Whether it computes in BF16 natively.

    Raises
    ------
    ValueError
        If ``device`` is neither a CPU nor a CUDA device.

    Examples
    --------
    >>> isinstance(bf16_native("cpu"), bool)
    True
    """
    device = torch.device(device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type != "cpu":
        raise ValueError(f"device must be a CPU or CUDA device, got {device}")
    cpu = torch.cpu
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        if getattr(cpu, probe, lambda: False)():
            return True
    if platform.machine().lower() in ("aarch64", "arm64"):
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
                return any(
                    line.startswith("Features") and " bf16" in f" {line.split(':', 1)[1]}"
                    for line in info
                )
        except OSError:
            return False
    return False


def moved(fp32: dict[str, Any]) -> float:
    """How far FP32 training moved the loss from its first value."""
    return abs(fp32["final_loss"] - fp32["losses"][0])


def _tells(fp32: dict[str, Any]) -> bool:
    move = moved(fp32)
    return math.isfinite(move) and move > 0 and move >= MOVED_SHARE * abs(fp32["losses"][0])


def _finite(run: dict[str, Any]) -> bool:
    return all(math.isfinite(v) for v in (*run["losses"], run["final_loss"]))


def _tracks(run: dict[str, Any] | None, fp32: dict[str, Any]) -> bool | None:
    if run is None:
        return False
    if not _finite(fp32):
        return None  # no FP32 run to compare with
    if not _finite(run):
        return False
    if not _tells(fp32):
        return None
    return abs(run["final_loss"] - fp32["final_loss"]) <= TRACKING_SHARE * moved(fp32)


def steps_to_decide(fp32: dict[str, Any], steps: int) -> int | None:
    """Twice the steps FP32 would need to move the loss by MOVED_SHARE, at the rate it moved
    it in ``steps`` (a loss falls more slowly as it goes), and at least ``steps + 1``.

    ``None`` where FP32 did not move it at all (a learning rate of zero, say), or its loss
    went inf or NaN.
    """
    move = moved(fp32)
    if not _finite(fp32) or move <= 0:
        return None
    need = MOVED_SHARE * abs(fp32["losses"][0]) / move
    return max(steps + 1, math.ceil(steps * need * 2))


def _worst_share(gradients: dict[str, Any], measurement: str) -> float | None:
    worst = gradients["worst"].get(measurement)
    return None if worst is None else worst["share"]


def recommend(
    gradients: dict[str, Any],
    advice: dict[str, Any],
    training: dict[str, Any],
    *,
    bf16_supported: bool,
    steps: int,
    unavailable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Evaluate :data:`~amp_lesson.diagnose.rules.RULES` on a diagnosis's sections and choose.

    Parameters
    ----------
    gradients, advice, training : dict
        The sections of a :class:`~amp_lesson.diagnose.Diagnosis` of those
        names.
    bf16_supported : bool
        Whether the device computes in BF16 natively (:func:`bf16_native`);
        pass ``False`` to ask what the rules choose on a GPU without it.
    steps : int
        The training runs' steps, to say how many would decide.
    unavailable : dict, optional
        Formats that could not run the model here, with the error.

    Returns
    -------
    dict
        ``choice`` (``"bf16"``, ``"fp16"``, ``"fp32"`` or ``"undecided"``),
        ``autocast_dtype``, ``scaler`` (FP16's ``init_scale``, the settled
        scale and the clean steps growth takes from one to the other),
        ``keep_fp32``, ``because`` (the rules the choice rests on: those that
        held, or those that failed or were not decided), ``decide_with_steps``
        and ``rules``: each rule with ``holds`` (``True``, ``False`` or
        ``None``, not decided), its sentences and ``words``, the one that
        applies, and ``note``, which format could not run the model.

    Examples
    --------
    >>> from amp_lesson.diagnose import diagnose
    >>> model = torch.nn.Linear(4, 1)
    >>> batch = torch.ones(8, 4), torch.zeros(8, 1)
    >>> d = diagnose(model, batch, torch.nn.functional.mse_loss, steps=5)
    >>> recommend(d.gradients, d.advice, d.training, bf16_supported=False,
    ...           steps=5)["choice"] in ("fp16", "fp32", "undecided")
    True
    """
    unavailable = unavailable or {}
    fp32 = training["fp32"]
    settled = gradients.get("settled_scale")
    init = gradients.get("init_scale")
    unscaled = _worst_share(gradients, "fp16_unscaled")
    at_init = _worst_share(gradients, "fp16_init")
    bf16 = _worst_share(gradients, "bf16")
    holds: dict[str, bool | None] = {
        "forward_fits_fp16": "fp16" not in unavailable and bool(advice.get("forward_finite")),
        "fp16_keeps_unscaled_gradients": None if unscaled is None else unscaled <= LOST_SHARE,
        "scaler_keeps_fp16_gradients": "fp16" not in unavailable
        and settled is not None
        and at_init is not None
        and at_init <= LOST_SHARE,
        "bf16_keeps_gradients": "bf16" not in unavailable
        and bf16 is not None
        and bf16 <= LOST_SHARE,
        "fp16_tracks_fp32": _tracks(training.get("fp16"), fp32),
        "bf16_tracks_fp32": _tracks(training.get("bf16"), fp32),
        "bf16_supported": bool(bf16_supported),
    }
    if holds["fp16_keeps_unscaled_gradients"] is None and "fp16" not in unavailable:
        holds["fp16_keeps_unscaled_gradients"] = True
    notes = {key: None for key in holds}
    for fmt, keys in (("fp16", (*_FP16[:2], "fp16_tracks_fp32")), ("bf16", _BF16[1:])):
        if fmt in unavailable:
            for key in keys:
                notes[key] = f"{fmt.upper()} could not run this model here"
                holds[key] = False
    if "fp16" in unavailable:
        notes["fp16_keeps_unscaled_gradients"] = notes["forward_fits_fp16"]
        holds["fp16_keeps_unscaled_gradients"] = None
    diverged = not _finite(fp32)
    if diverged:
        for key in ("fp16_tracks_fp32", "bf16_tracks_fp32"):
            if notes[key] is None:
                notes[key] = ("FP32 training's own loss went inf or NaN in these steps, so there "
                              "is no FP32 run to compare with")  # fmt: skip

    def path(keys: tuple[str, ...]) -> bool | None:
        values = [holds[k] for k in keys]
        if all(v is True for v in values):
            return True
        return None if False not in values else False

    bf16_path, fp16_path = path(_BF16), path(_FP16)
    decide = None
    if bf16_path:
        choice, because = "bf16", list(_BF16)
    elif fp16_path:
        choice, because = "fp16", list(_FP16)
    elif bf16_path is None or fp16_path is None:
        choice = "undecided"
        because = [k for k in (*_BF16, *_FP16) if holds[k] is None]
        decide = steps_to_decide(fp32, steps)
    else:
        choice = "fp32"
        because = [k for k in (*_BF16, *_FP16) if holds[k] is False]
    rules = []
    for rule in RULES:
        value = holds[rule.key]
        words = rule.says if value else rule.otherwise
        if value is None and notes[rule.key] and rule.undecided:
            words = f"Not decided: {notes[rule.key]}."
        elif value is None:
            words = rule.undecided or f"Not measured: {notes[rule.key]}."
        elif notes[rule.key]:
            words = f"Not measured: {notes[rule.key]}."
        rules.append(
            {
                "key": rule.key,
                "tests": rule.tests,
                "holds": value,
                "says": rule.says,
                "otherwise": rule.otherwise,
                "undecided": rule.undecided,
                "words": words,
                "note": notes[rule.key],
            }
        )
    scaler = None
    if choice == "fp16":
        scaler = {
            "init_scale": init,
            "settled_scale": settled,
            "growth_steps": gradients.get("growth_steps"),
        }
    return {
        "choice": choice,
        "autocast_dtype": {"bf16": "bfloat16", "fp16": "float16"}.get(choice),
        "scaler": scaler,
        "keep_fp32": list(advice.get("keep_fp32", [])) if choice == "fp16" else [],
        "because": because,
        "decide_with_steps": decide,
        "fp32_diverged": diverged,
        "rules": rules,
    }
