"""Which device the book runs on, and the provenance line every page shows.

The book runs its cells on CUDA when a GPU is present and on the CPU
otherwise. ``AMP_LESSON_DEVICE=cpu`` or ``AMP_LESSON_DEVICE=cuda`` overrides
the choice, so a GPU runner can insist on the GPU (and fail loudly if it is
missing) and a laptop with a GPU can still build the CPU edition.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import platform
from dataclasses import dataclass

import torch

from amp_lesson._checks import check_choice

ENV_VAR = "AMP_LESSON_DEVICE"
"""Environment variable that overrides the device: ``auto``, ``cpu`` or ``cuda``."""

_CHOICES = ("auto", "cpu", "cuda")


def get_device(preference: str | None = None) -> torch.device:
    """Return the device the book's cells run on.

    ``preference`` is ``"auto"``, ``"cpu"`` or ``"cuda"``; ``None`` reads
    :data:`ENV_VAR` (default ``"auto"``). ``"auto"`` picks CUDA when
    ``torch.cuda.is_available()``, else the CPU. Asking for ``"cuda"`` on a
    machine without it is an error rather than a silent fall-back, because a
    page that says "GPU" must have run on one.

    >>> get_device("cpu")
    device(type='cpu')
    >>> get_device("tpu")
    Traceback (most recent call last):
    ...
    ValueError: preference must be one of 'auto', 'cpu', 'cuda'; got 'tpu'
    """
    if preference is None:
        preference = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
        name = ENV_VAR
    else:
        name = "preference"
    check_choice(name, preference, _CHOICES)
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"{name}='cuda' but torch {torch.__version__} sees no CUDA device; use 'cpu' or 'auto'"
        )
    return torch.device(preference)


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """A ``device`` argument of the package's functions, checked and resolved.

    ``None`` or ``"auto"`` means :func:`get_device`; otherwise ``"cpu"``,
    ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device` of those types. CUDA on
    a machine without it is an error, not a silent fall-back to the CPU.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")
    Traceback (most recent call last):
    ...
    ValueError: device must be one of 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device; got 'mps'
    """
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return get_device()
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str, a torch.device or None, got {device!r}")
    try:
        resolved = torch.device(device.strip().lower() if isinstance(device, str) else device)
    except RuntimeError:
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(
            "device must be one of 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device; "
            f"got {device!r}"
        )
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} but torch sees no CUDA device; use 'cpu'")
    return resolved


def place_model(model: torch.nn.Module, device: torch.device | str | None = None) -> torch.device:
    """The device ``model`` runs on: its own when ``device`` is None, else ``device`` (moved there).

    >>> place_model(torch.nn.Linear(2, 1))
    device(type='cpu')
    """
    params = list(model.parameters())
    if device is None and params:
        current = params[0].device
        if current.type not in ("cpu", "cuda"):
            raise ValueError(f"the model must be on a CPU or CUDA device, got {current}")
        return current
    resolved = resolve_device(device)
    model.to(resolved)
    return resolved


def device_name(device: torch.device | str | None = None) -> str:
    """Human-readable name of ``device`` (the GPU's name, or the CPU's).

    >>> device_name("cpu").startswith("CPU")
    True
    """
    device = get_device() if device is None else torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine() or "unknown"
    return f"CPU ({cpu}, {os.cpu_count()} cores)"


@dataclass(frozen=True)
class Provenance:
    """Where and when a page's cells ran."""

    device_type: str
    device_name: str
    torch_version: str
    cuda_version: str | None
    python_version: str
    executed_on: str
    package_version: str

    def __str__(self) -> str:
        cuda = f", CUDA {self.cuda_version}" if self.device_type == "cuda" else ""
        return (
            f"Executed on {self.device_name} with torch {self.torch_version}{cuda}, "
            f"amp_lesson {self.package_version}, Python {self.python_version}, "
            f"on {self.executed_on}."
        )

    def _repr_html_(self) -> str:
        return (
            f'<p class="amp-provenance" data-device="{html.escape(self.device_type)}">'
            f"{html.escape(str(self))}</p>"
        )


def provenance(device: torch.device | str | None = None) -> Provenance:
    """The provenance of this run: device, torch version and today's date (UTC).

    Displaying the result in a notebook shows one line, which every page of
    the book does in its first cell.

    >>> p = provenance("cpu")
    >>> p.device_type, p.torch_version == torch.__version__
    ('cpu', True)
    >>> str(p).startswith("Executed on CPU")
    True
    """
    from amp_lesson import __version__

    device = get_device() if device is None else torch.device(device)
    return Provenance(
        device_type=device.type,
        device_name=device_name(device),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        python_version=platform.python_version(),
        executed_on=_dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        package_version=__version__,
    )
