"""Device choice and the provenance line."""

from __future__ import annotations

import datetime as dt

import pytest
import torch

from amp_lesson.device import ENV_VAR, get_device, provenance, resolve_device


def test_auto_follows_cuda_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_the_environment_variable_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, " CPU ")
    assert get_device() == torch.device("cpu")
    monkeypatch.setenv(ENV_VAR, "tpu")
    with pytest.raises(ValueError, match=f"{ENV_VAR} must be one of 'auto', 'cpu', 'cuda'"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_asking_for_cuda_without_it_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        get_device()
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        resolve_device("cuda:0")


@pytest.mark.parametrize(
    ("device", "error"),
    [
        ("mps", ValueError),
        ("nonsense", ValueError),
        (3, TypeError),
        (torch.device("meta"), ValueError),
    ],
)
def test_resolve_device_rejects_what_the_book_cannot_run_on(device: object, error: type) -> None:
    with pytest.raises(error, match="device must be"):
        resolve_device(device)  # type: ignore[arg-type]


def test_resolve_device_accepts_auto_and_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "cpu")
    assert resolve_device(None) == resolve_device("auto") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_provenance_names_device_torch_and_date() -> None:
    p = provenance("cpu")
    line = str(p)
    assert p.device_type == "cpu"
    assert torch.__version__ in line
    assert dt.date.fromisoformat(p.executed_on) <= dt.datetime.now(dt.timezone.utc).date()
    assert p.executed_on in line
    assert 'class="amp-provenance"' in p._repr_html_()
    assert "<" not in p._repr_html_().split(">", 1)[1].rsplit("<", 1)[0]  # text is escaped
