"""GPU recordings: a benchmark measured on a CUDA machine, kept as JSON beside the book.

A CPU build cannot measure a GPU, and it must not make GPU numbers up. So a
CUDA machine runs ``python -m amp_lesson.bench --record``
(:func:`record` and :func:`write_recording`), which writes
``docs/_data/gpu/<gpu>.json``; every build reads those files back with
:func:`load_recordings` and shows them with their provenance.

The file format is a JSON schema, ``recording.schema.json`` beside this
module (:data:`SCHEMA_FILE`), checked with the :mod:`jsonschema` library, so
a file that loads is one the book can show. That library comes with the
package's ``recordings`` extra (``pip install "amp-lesson[recordings]"``); it
is imported only when a recording is read or written.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from amp_lesson.bench.measure import BenchRow, run_benchmarks
from amp_lesson.bench.peaks import PEAK_SOURCE
from amp_lesson.bench.workload import BenchSizes, bench_sizes
from amp_lesson.device import resolve_device

__all__ = [
    "DEFAULT_FOLDER",
    "SCHEMA",
    "SCHEMA_FILE",
    "Recording",
    "RecordingError",
    "driver_version",
    "load_recordings",
    "record",
    "slugify",
    "validate_recording",
    "write_recording",
]

SCHEMA = "amp_lesson.bench/1"
"""The ``schema`` field of a recording: the format's name and version."""

SCHEMA_FILE = Path(__file__).with_name("recording.schema.json")
"""The JSON schema every recording must follow."""

DEFAULT_FOLDER = "docs/_data/gpu"
"""Where recordings live, relative to the repository root."""


class RecordingError(ValueError):
    """A recording file does not follow the schema; the message names the file and field."""


@dataclass(frozen=True)
class Recording:
    """One GPU's recorded benchmark: where it came from, the sizes, and its rows.

    Parameters
    ----------
    path : Path
        The file it was read from (or is to be written to).
    provenance : dict
        ``gpu_name``, ``driver_version``, ``cuda_version``, ``cudnn_version``,
        ``compute_capability``, ``torch_version``, ``amp_lesson_version``,
        ``python_version`` and ``date`` (ISO, UTC).
    sizes : BenchSizes
        The sizes the rows were measured at.
    rows : list of BenchRow
        The measured rows.
    peak_source : str, optional
        Where the peak figures came from.
    """

    path: Path
    provenance: dict[str, Any]
    sizes: BenchSizes
    rows: list[BenchRow] = field(default_factory=list)
    peak_source: str | None = None

    @property
    def gpu_name(self) -> str:
        """The GPU the rows were measured on."""
        return str(self.provenance["gpu_name"])

    def describe(self) -> str:
        """One line of provenance: GPU, driver, CUDA, torch, date.

        Returns
        -------
        str
            The line the book prints above a recorded table.

        Examples
        --------
        >>> p = {"gpu_name": "NVIDIA H200", "driver_version": "580.1",
        ...      "cuda_version": "13.0", "torch_version": "2.11.0",
        ...      "date": "2026-11-20"}
        >>> print(Recording(Path("h200.json"), p, BenchSizes()).describe())
        NVIDIA H200 — driver 580.1, CUDA 13.0, torch 2.11.0, recorded 2026-11-20
        """
        p = self.provenance
        driver = p.get("driver_version") or "unknown"
        cuda = p.get("cuda_version") or "unknown"
        return (
            f"{p['gpu_name']} — driver {driver}, CUDA {cuda}, torch {p['torch_version']}, "
            f"recorded {p['date']}"
        )


if TYPE_CHECKING:
    import jsonschema


def _jsonschema() -> Any:
    """The :mod:`jsonschema` library, or an error that says which extra installs it."""
    try:
        import jsonschema
    except ImportError:
        raise ImportError(
            "reading or writing a GPU recording checks it with jsonschema, which is not "
            'installed: pip install "amp-lesson[recordings]"'
        ) from None
    return jsonschema


@cache
def _validator() -> jsonschema.protocols.Validator:
    jsonschema = _jsonschema()
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate_recording(data: Any, source: str = "<recording>") -> Recording:
    """Check a recording's parsed JSON against the schema and build a :class:`Recording`.

    Parameters
    ----------
    data : object
        The parsed JSON.
    source : str, default "<recording>"
        Names the file in every error.

    Returns
    -------
    Recording
        The recording, its rows as :class:`~amp_lesson.bench.measure.BenchRow`.

    Raises
    ------
    RecordingError
        If ``data`` breaks the schema (:data:`SCHEMA_FILE`): the message
        gives ``source``, the JSON path of the offending field and what is
        allowed there. A recording holds GPU (``device_type == "cuda"``)
        rows only, a provenance with the GPU's name, the torch version and
        an ISO date, the sizes used, and at least one row; a measured row
        has positive times, an unavailable one a note and no measurements.
        NaN and infinities are refused: JSON has no such numbers.
    TypeError
        If ``source`` is not a string.

    Examples
    --------
    >>> validate_recording({"schema": "amp_lesson.bench/1"}, "x.json")
    Traceback (most recent call last):
    ...
    amp_lesson.bench.recording.RecordingError: x.json: $: 'provenance' is a
    required property
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise RecordingError(f"{source}: is not plain finite JSON ({error})") from None
    error = _jsonschema().exceptions.best_match(_validator().iter_errors(data))
    if error is not None:
        why = error.schema.get("description") if isinstance(error.schema, Mapping) else None
        raise RecordingError(
            f"{source}: {error.json_path}: {error.message}" + (f" ({why})" if why else "")
        )
    try:
        sizes = BenchSizes(**data["sizes"])
    except ValueError as error:  # what a schema cannot say: d_model divisible by n_heads
        raise RecordingError(f"{source}: $.sizes: {error}") from None
    known = [f.name for f in fields(BenchRow)]
    rows = [BenchRow(**{k: row.get(k) for k in known if k in row}) for row in data["rows"]]
    return Recording(Path(source), dict(data["provenance"]), sizes, rows, data.get("peak_source"))


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def load_recordings(folder: str | Path = DEFAULT_FOLDER) -> list[Recording]:
    """Read and validate every ``*.json`` recording in ``folder``, sorted by file name.

    Parameters
    ----------
    folder : str or Path, default "docs/_data/gpu"
        The folder of recordings.

    Returns
    -------
    list of Recording
        ``[]`` for a folder with none.

    Raises
    ------
    FileNotFoundError
        If ``folder`` does not exist: a wrong path must not pass for "no
        GPU recording yet".
    RecordingError
        If a file is not JSON or breaks the schema; the message names the file.
    TypeError
        If ``folder`` is not a str or Path.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     load_recordings(tmp)
    []
    >>> load_recordings("no/such/folder")
    Traceback (most recent call last):
    ...
    FileNotFoundError: folder 'no/such/folder' does not exist (recordings live
    in docs/_data/gpu)
    """
    if not isinstance(folder, (str, Path)):
        raise TypeError(f"folder must be a str or Path, got {type(folder).__name__}")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(
            f"folder {str(folder)!r} does not exist (recordings live in {DEFAULT_FOLDER})"
        )
    recordings = []
    for file in sorted(path.glob("*.json")):
        try:
            data = json.loads(file.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as error:
            raise RecordingError(f"{file}: not valid JSON ({error})") from None
        recordings.append(validate_recording(data, str(file)))
    return recordings


def slugify(name: str) -> str:
    """A file-name slug of a device name: lower case, runs of other characters as ``-``.

    Parameters
    ----------
    name : str
        A device name.

    Returns
    -------
    str
        The slug.

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    ValueError
        If ``name`` has no letter or digit.

    Examples
    --------
    >>> slugify("NVIDIA H100 80GB HBM3"), slugify("Tesla T4")
    ('nvidia-h100-80gb-hbm3', 'tesla-t4')
    >>> slugify("  ")
    Traceback (most recent call last):
    ...
    ValueError: name must contain a letter or digit, got '  '
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"name must contain a letter or digit, got {name!r}")
    return slug


def driver_version() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi``, or ``None`` without it.

    A recording's provenance names it beside the GPU.

    Returns
    -------
    str or None
        The version, such as ``"580.159.03"``.

    Examples
    --------
    >>> driver_version() is None or driver_version()[0].isdigit()
    True
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()
    return first[0].strip() if first and first[0].strip() else None


def _provenance(device: torch.device) -> dict[str, Any]:
    from amp_lesson import __version__

    major, minor = torch.cuda.get_device_capability(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "gpu_name": torch.cuda.get_device_name(device),
        "driver_version": driver_version(),
        "cuda_version": torch.version.cuda,
        "cudnn_version": None if cudnn is None else str(cudnn),
        "compute_capability": f"{major}.{minor}",
        "torch_version": torch.__version__,
        "amp_lesson_version": __version__,
        "python_version": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
    }


def record(device: torch.device | str | None = None, sizes: BenchSizes | None = None) -> dict:
    """Measure everything on a CUDA ``device`` and return the recording (a JSON-ready dict).

    Parameters
    ----------
    device : torch.device or str, optional
        A CUDA device (default: the book's device, which must be CUDA).
    sizes : BenchSizes, optional
        Default: the GPU sizes, :data:`~amp_lesson.bench.workload.CUDA_SIZES`.

    Returns
    -------
    dict
        Schema, provenance, sizes, peak source and rows; it passes
        :func:`validate_recording` (checked before it is returned).

    Raises
    ------
    RuntimeError
        On a CPU: a recording holds GPU numbers only.

    Examples
    --------
    >>> record("cpu")
    Traceback (most recent call last):
    ...
    RuntimeError: a recording needs a CUDA GPU, but the device is 'cpu'; run
    `python -m amp_lesson.bench --record` on a CUDA machine
    """
    device = resolve_device(device)
    if device.type != "cuda":
        raise RuntimeError(
            f"a recording needs a CUDA GPU, but the device is {device.type!r}; "
            "run `python -m amp_lesson.bench --record` on a CUDA machine"
        )
    sizes = bench_sizes(device) if sizes is None else sizes
    rows = run_benchmarks(device, sizes)
    data = {
        "schema": SCHEMA,
        "provenance": _provenance(device),
        "sizes": sizes.as_dict(),
        "peak_source": PEAK_SOURCE,
        "rows": [r.as_dict() for r in rows],
    }
    validate_recording(data, "<new recording>")  # never write what cannot be read back
    return data


def write_recording(data: Mapping[str, Any], out: str | Path | None = None) -> Path:
    """Validate ``data`` and write it as JSON to ``out``.

    Parameters
    ----------
    data : mapping
        A recording, as :func:`record` returns it.
    out : str or Path, optional
        Where to write; default ``docs/_data/gpu/<slug of the GPU name>.json``.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    RecordingError
        If ``data`` breaks the schema; nothing is written then.
    """
    validate_recording(data, "<recording to write>")
    path = Path(DEFAULT_FOLDER) / f"{slugify(data['provenance']['gpu_name'])}.json"
    path = path if out is None else Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path
