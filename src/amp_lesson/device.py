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

__all__ = [
    "ENV_VAR",
    "Provenance",
    "device_name",
    "get_device",
    "place_model",
    "provenance",
    "resolve_device",
]

ENV_VAR = "AMP_LESSON_DEVICE"
"""The environment variable that overrides the device (``auto``, ``cpu`` or ``cuda``)."""

_CHOICES = ("auto", "cpu", "cuda")


def get_device(preference: str | None = None) -> torch.device:
    """Return the device the book's cells run on.

    ``"auto"`` picks CUDA when ``torch.cuda.is_available()``, else the CPU.
    Asking for ``"cuda"`` on a machine without it is an error rather than a
    silent fall-back, because a page that says "GPU" must have run on one.

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda"}, optional
        The device to use; ``None`` reads :data:`ENV_VAR` (default ``"auto"``).

    Returns
    -------
    torch.device
        ``device(type='cuda')`` or ``device(type='cpu')``.

    Raises
    ------
    ValueError
        If the preference is none of the three.
    RuntimeError
        If CUDA is asked for and torch sees none.

    Examples
    --------
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
    """Check and resolve the ``device`` argument of the package's functions.

    Parameters
    ----------
    device : torch.device or str, optional
        ``None`` or ``"auto"`` means :func:`get_device`; otherwise ``"cpu"``,
        ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device` of those types.

    Returns
    -------
    torch.device
        The device to run on.

    Raises
    ------
    TypeError
        If ``device`` is not a str, torch.device or None.
    ValueError
        If it names another device type.
    RuntimeError
        If it names CUDA on a machine without it (no silent fall-back to the CPU).

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")
    Traceback (most recent call last):
    ...
    ValueError: device must be one of 'auto', 'cpu', 'cuda', 'cuda:N' or a
    torch.device; got 'mps'
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
    """Return the device ``model`` runs on: its own when ``device`` is None, else ``device``.

    Parameters
    ----------
    model : torch.nn.Module
        The model; moved to ``device`` when one is given.
    device : torch.device or str, optional
        Where to put the model (see :func:`resolve_device`).

    Returns
    -------
    torch.device
        The device the model's parameters are on now.

    Raises
    ------
    ValueError
        If the model sits on a device other than a CPU or CUDA.

    Examples
    --------
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
    """Return a human-readable name of ``device``: the GPU's name, or the CPU's.

    Parameters
    ----------
    device : torch.device or str, optional
        The device (default: :func:`get_device`).

    Returns
    -------
    str
        For example ``"NVIDIA H100 80GB HBM3"`` or ``"CPU (x86_64, 2 cores)"``.

    Examples
    --------
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
    """Where and when a page's cells ran; displays as the line every page shows.

    Parameters
    ----------
    device_type : str
        ``"cpu"`` or ``"cuda"``.
    device_name : str
        :func:`device_name` of the device.
    torch_version : str
        ``torch.__version__``.
    cuda_version : str or None
        ``torch.version.cuda`` (``None`` for a CPU build of torch).
    python_version : str
        The Python version.
    executed_on : str
        The date (ISO, UTC).
    package_version : str
        ``amp_lesson.__version__``.
    """

    device_type: str
    device_name: str
    torch_version: str
    cuda_version: str | None
    python_version: str
    executed_on: str
    package_version: str

    def __str__(self) -> str:
        cuda = f" · CUDA {self.cuda_version}" if self.device_type == "cuda" else ""
        return (
            f"Ran on {self.device_name} · torch {self.torch_version}{cuda} · "
            f"amp_lesson {self.package_version} · Python {self.python_version} · "
            f"{self.executed_on}"
        )

    def _repr_html_(self) -> str:
        return (
            f'<p class="amp-provenance" data-device="{html.escape(self.device_type)}">'
            f"{html.escape(str(self))}</p>"
        )


def provenance(device: torch.device | str | None = None) -> Provenance:
    """Return the provenance of this run: device, versions and today's date (UTC).

    Displaying the result in a notebook shows one line, which every page of
    the book does in its first cell.

    Parameters
    ----------
    device : torch.device or str, optional
        The device the page runs on (default: :func:`get_device`).

    Returns
    -------
    Provenance
        The record; ``str()`` of it is the line.

    Examples
    --------
    >>> p = provenance("cpu")
    >>> p.device_type, p.torch_version == torch.__version__
    ('cpu', True)
    >>> str(p).startswith("Ran on CPU")
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
