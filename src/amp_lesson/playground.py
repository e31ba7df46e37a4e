# One module: the Python twin of the two playgrounds' script, held to it by the tests as one piece.
"""The Python side of the book's two in-page playgrounds.

The bit explorer and the GradScaler playground run in the reader's browser,
in plain JavaScript shipped with the book (``amp_book/static/``),
so a reader can try values with no server. Their arithmetic must be exactly
torch's; this module holds what they share with Python, so that one source
of truth serves both and the browser tests have a reference to compare with:

- :func:`explorer_rows` -- the explorer's columns for a few values, the table a
  reader without JavaScript sees;
- :func:`read_steps` and :func:`every` -- schedules of overflows, as the playground
  writes them (``x..x``);
- :func:`scaler_trace` and :func:`describe_trace` -- the playground's trace
  and its summary, the worked example a reader without JavaScript sees.

Why this module is long: the bit explorer and the GradScaler playground read one set
of facts with their Python references beside them; half of its lines are docstrings.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping

from amp_lesson._checks import check_choice, check_int
from amp_lesson.formats import FORMATS, Stored, store

__all__ = [
    "CHANGE_TEXT",
    "CLASS_TEXT",
    "EVENT_TEXT",
    "EXAMPLE_VALUES",
    "EXPLORER_FORMATS",
    "MAX_STEPS",
    "NOT_STORED",
    "TRACE_COLUMNS",
    "class_text",
    "describe_trace",
    "event_text",
    "every",
    "explorer_rows",
    "read_steps",
    "scaler_trace",
]

EXPLORER_FORMATS: tuple[str, ...] = ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2")
"""The formats the bit explorer offers, in its order (FP16, which most readers come for,
first)."""

EXAMPLE_VALUES: tuple[float, ...] = (
    0.1,
    65519.0,
    65520.0,
    1e-8,
    500.0,
    -0.0,
    math.inf,
    math.nan,
)
"""Values whose rows teach something (rounding, FP16's overflow threshold, a
gradient FP16 loses, E4M3's saturation, a signed zero, infinity and NaN)."""

EVENT_TEXT: Mapping[str, str] = {
    "exact": "exact",
    "rounded": "rounded",
    "underflow": "underflow to zero",
    "overflow": "overflow to inf",
    "saturated": "saturated to max",
    "no_nan": "no NaN in this format",
}
"""How the explorer words each ``event`` of a :class:`~amp_lesson.formats.Stored`, and
``no_nan``: a NaN typed for a format that has none (FP4 E2M1), which
:func:`~amp_lesson.formats.store` refuses."""

NOT_STORED = "—"
"""What the explorer shows for the stored value, bits, class and relative error of a NaN
in a format that has none."""

CLASS_TEXT: Mapping[str, str] = {
    "normal": "normal",
    "subnormal": "subnormal",
    "zero": "zero",
    "inf": "inf",
    "nan": "NaN",
}
"""How the explorer words each ``kind`` of a :class:`~amp_lesson.formats.Stored`."""

MAX_STEPS = 1000
"""The longest schedule the GradScaler playground runs (the page stays quick)."""


def event_text(stored: Stored) -> str:
    """The explorer's words for what happened to a value on its way into a format.

    Parameters
    ----------
    stored : amp_lesson.formats.Stored
        What :func:`~amp_lesson.formats.store` returned.

    Returns
    -------
    str
        The event in words.

    Examples
    --------
    >>> event_text(store(65520.0, "fp16")), event_text(store(1e6, "fp8_e4m3"))
    ('overflow to inf', 'saturated to max')
    >>> event_text(store(float("1e400"), "fp16"))  # inf: an overflow, not exact
    'overflow to inf'
    """
    if stored.event == "overflow" and math.isnan(stored.stored):
        return "overflow to NaN"  # a format with no infinity that does not saturate
    if stored.event == "exact" and math.isinf(stored.value):
        return EVENT_TEXT["overflow"]  # inf, or 1e400 (past float64), is no exact value
    return EVENT_TEXT[stored.event]


def class_text(stored: Stored) -> str:
    """The explorer's class of a stored value: its kind, or ``saturated`` when clamped to max.

    Parameters
    ----------
    stored : amp_lesson.formats.Stored
        What :func:`~amp_lesson.formats.store` returned.

    Returns
    -------
    str
        The class in words.

    Examples
    --------
    >>> class_text(store(1e-8, "fp16")), class_text(store(500.0, "fp8_e4m3"))
    ('zero', 'saturated')
    """
    return "saturated" if stored.event == "saturated" else CLASS_TEXT[stored.kind]


def explorer_rows(
    values: Iterable[float] = EXAMPLE_VALUES, names: Iterable[str] = EXPLORER_FORMATS
) -> list[dict[str, str]]:
    """The bit explorer's columns for each value in each format, as text.

    One row per value and format, in that order, with the keys ``value``,
    ``format``, ``stored``, ``bits`` (sign, exponent and mantissa separated by
    spaces), ``class``, ``event`` and ``relative error``. Numbers are written
    as Python's ``repr`` writes them; the relative error with three
    significant digits. A NaN in a format that has none (FP4 E2M1) is not
    stored: :data:`NOT_STORED` in those columns, and the ``no_nan`` event's
    words. This is the table a reader without JavaScript sees.

    Parameters
    ----------
    values : iterable of float
        The values.
    names : iterable of str
        Format names of :data:`~amp_lesson.formats.FORMATS`.

    Returns
    -------
    list of dict of str to str
        One row per value and format.

    Raises
    ------
    TypeError
        If ``values`` is not a sequence of real numbers or ``names`` not a
        sequence of names.
    ValueError
        If a name is not a format of :data:`~amp_lesson.formats.FORMATS`.

    Examples
    --------
    >>> for row in explorer_rows([65520.0], ["fp16", "bf16"]):
    ...     print(row["format"], row["stored"], row["bits"], row["event"])
    FP16 inf 0 11111 0000000000 overflow to inf
    BF16 65536.0 0 10001111 0000000 rounded
    >>> for row in explorer_rows([0.3, math.nan], ["fp4_e2m1"]):
    ...     print(row["stored"], row["bits"], row["event"])
    0.5 0 00 1 rounded
    — — no NaN in this format
    """
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be a sequence of format names, got {names!r}")
    names = [check_choice("names", n, FORMATS) for n in names]
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"values must be a sequence of numbers, got {values!r}")
    values = list(values)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"values must hold real numbers, got {value!r}")
    rows = []
    for value in values:
        for name in names:
            if math.isnan(value) and not FORMATS[name].has_nan:
                rows.append(
                    {"value": repr(value), "format": FORMATS[name].label}
                    | dict.fromkeys(("stored", "bits", "class", "relative error"), NOT_STORED)
                    | {"event": EVENT_TEXT["no_nan"]}
                )
                continue
            s = store(value, name)
            rows.append(
                {
                    "value": repr(s.value),
                    "format": FORMATS[name].label,
                    "stored": repr(s.stored),
                    "bits": f"{s.sign} {s.exponent} {s.mantissa}",
                    "class": class_text(s),
                    "event": event_text(s),
                    "relative error": format(s.rel_error, ".3g"),
                }
            )
    return rows


# -- the GradScaler playground ------------------------------------------------------


def read_steps(pattern: str) -> list[bool]:
    """The schedule of overflows a pattern stands for: ``x`` an overflow, ``.`` a clean step.

    Spaces are ignored, so a pattern can be grouped; at most
    :data:`MAX_STEPS` steps.

    Parameters
    ----------
    pattern : str
        The schedule as typed.

    Returns
    -------
    list of bool
        One entry per step, ``True`` for an overflow.

    Raises
    ------
    ValueError
        If a character is neither ``x`` nor ``.``, or the pattern is empty or too long.

    Examples
    --------
    >>> read_steps("xx.. .x")
    [True, True, False, False, False, True]
    >>> read_steps("x.o")
    Traceback (most recent call last):
    ...
    ValueError: steps: character 3 is “o”; use . for a clean step and x for an
    overflow.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, got {type(pattern).__name__} {pattern!r}")
    schedule = []
    for position, char in enumerate(pattern, start=1):
        if char.isspace():
            continue
        if char not in ".xX":
            raise ValueError(
                f"steps: character {position} is “{char}”; "
                "use . for a clean step and x for an overflow."
            )
        schedule.append(char != ".")
    if not schedule:
        raise ValueError("steps: type at least one step, . for a clean step or x for an overflow.")
    if len(schedule) > MAX_STEPS:
        raise ValueError(f"steps: at most {MAX_STEPS} steps, got {len(schedule)}.")
    return schedule


def every(k: int, n: int) -> list[bool]:
    """``n`` steps with an overflow on every ``k``-th (steps ``k``, ``2k``, ...).

    Parameters
    ----------
    k : int
        The period of the overflows.
    n : int
        The number of steps.

    Returns
    -------
    list of bool
        The schedule.

    Examples
    --------
    >>> every(3, 7)
    [False, False, True, False, False, True, False]
    """
    check_int("k", k, minimum=1)
    check_int("n", n, minimum=1)
    if n > MAX_STEPS:
        raise ValueError(f"n must be at most {MAX_STEPS}, got {n}")
    return [step % k == 0 for step in range(1, n + 1)]


TRACE_COLUMNS: tuple[str, ...] = (
    "step",
    "scale used",
    "inv_scale",
    "overflow",
    "skipped",
    "scale after",
    "growth tracker",
    "what happened",
)
"""The columns of the playground's trace, in its order."""

CHANGE_TEXT: Mapping[str, str] = {
    "backoff": "skipped; scale × backoff",
    "grow": "scale × growth",
    "capped": "growth would overflow float32: scale kept",
    "count": "",
}
"""How the trace words what ``update()`` did to the scale after a step."""


def scaler_trace(settings: Mapping[str, float | int], schedule: Iterable[bool]) -> list[dict]:
    """The playground's trace of a schedule: one row of :data:`TRACE_COLUMNS` text per step.

    The steps are :func:`~amp_lesson.scaler.simulate`'s; ``inv_scale`` is the
    float32 reciprocal GradScaler unscales with, and "what happened" says
    whether ``update()`` backed off, grew the scale, or would have grown it
    past float32's largest value and so kept it. This is the table a reader
    without JavaScript sees, and the one the playground draws.

    Parameters
    ----------
    settings : mapping
        GradScaler's four arguments: ``init_scale``, ``growth_factor``, ``backoff_factor``,
        ``growth_interval``.
    schedule : iterable of bool
        One entry per step, ``True`` for an overflow (:func:`read_steps`).

    Returns
    -------
    list of dict of str to str
        One row per step.

    Examples
    --------
    >>> settings = {"init_scale": 8.0, "growth_factor": 2.0,
    ...             "backoff_factor": 0.5, "growth_interval": 2}
    >>> for row in scaler_trace(settings, read_steps("x..")):
    ...     print(row["step"], row["scale used"], row["inv_scale"],
    ...           row["what happened"])
    1 8.0 0.125 skipped; scale × backoff
    2 4.0 0.25
    3 4.0 0.25 scale × growth
    """
    from amp_lesson.scaler import simulate

    rows = []
    for r in simulate(schedule, **settings):  # type: ignore[arg-type]
        # What update() did, as the simulator recorded it; the float32 reciprocal GradScaler
        # unscales with (inf for a scale of 0).
        change, inverse = r.change, r.inv_scale
        values = (
            str(r.step),
            repr(r.scale_used),
            repr(inverse),
            "yes" if r.found_inf else "no",
            "yes" if r.skipped else "no",
            repr(r.scale_after),
            str(r.growth_tracker_after),
            CHANGE_TEXT[change],
        )
        rows.append(dict(zip(TRACE_COLUMNS, values, strict=True)))
    return rows


def describe_trace(rows: list[dict]) -> str:
    """The playground's summary of a trace from :func:`scaler_trace`, in its words.

    Parameters
    ----------
    rows : list of dict
        The trace, at least one step.

    Returns
    -------
    str
        How many steps were skipped, where the scale went, and whether it
        reached zero, an infinite inverse or the top of float32.

    Raises
    ------
    ValueError
        If ``rows`` is empty.

    Examples
    --------
    >>> settings = {"init_scale": 8.0, "growth_factor": 2.0,
    ...             "backoff_factor": 0.5, "growth_interval": 2}
    >>> describe_trace(scaler_trace(settings, read_steps("x..")))
    '3 steps, 1 skipped. The scale went from 8.0 to 8.0; the growth tracker
    ends at 0.'
    """
    from amp_lesson.display import count

    if not rows:
        raise ValueError("rows must hold at least one step")
    skipped = sum(r["skipped"] == "yes" for r in rows)
    last = rows[-1]
    text = (
        f"{count(len(rows), 'step')}, {skipped} skipped. The scale went from "
        f"{rows[0]['scale used']} to {last['scale after']}; the growth tracker ends at "
        f"{last['growth tracker']}."
    )
    infinite = next((r for r in rows if r["inv_scale"] == "inf"), None)
    zero = next((r for r in rows if r["scale after"] == "0.0"), None)
    capped = next((r for r in rows if r["what happened"] == CHANGE_TEXT["capped"]), None)
    if infinite:
        text += (
            f" From step {infinite['step']} the scale is 2^-128 or less, so inv_scale = "
            "1/scale overflows float32 to inf: a clean step then unscales its gradients "
            "to inf or NaN."
        )
    if zero:
        text += (
            f" After step {zero['step']} the scale is 0, and it cannot grow back: "
            "0 × growth_factor is 0."
        )
    if capped:
        text += (
            f" At step {capped['step']} growth would have overflowed float32, so the "
            "scale stayed put."
        )
    return text
