"""The loop a reader copies is the loop the book's tables come from, and it runs on its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from amp_lesson.accumulation import (
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    train_amp_accumulated,
)
from amp_lesson.recipe import train_mixed_precision

CPU = torch.device("cpu")


def plain_run(X, y, *, accum_steps, epochs, max_norm=None, dtype=torch.float16):
    model = make_toy_model(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=len(X) // accum_steps)
    scaler = train_mixed_precision(
        model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model),
        accum_steps=accum_steps, max_norm=max_norm, dtype=dtype, epochs=epochs,
    )  # fmt: skip
    return model.weight.detach().clone(), scaler.get_scale()


@pytest.mark.parametrize(
    ("accum_steps", "epochs", "input_scale", "max_norm", "dtype"),
    [
        (1, 5, 1.0, None, torch.float16),
        (4, 5, 1.0, None, torch.float16),
        (4, 3, 1.0, 0.01, torch.float16),  # clipping bites: the gradient norm is above 0.01
        (2, 8, 100.0, None, torch.float16),  # the default scale overflows: skipped steps
        (4, 8, 100.0, 0.5, torch.float16),
        (4, 3, 1.0, None, torch.bfloat16),
    ],
)
def test_the_plain_loop_matches_its_instrumented_twin_bit_for_bit(
    accum_steps, epochs, input_scale, max_norm, dtype
):
    X, y = make_toy_problem(device=CPU)
    X = X * input_scale
    weight, scale = plain_run(
        X, y, accum_steps=accum_steps, epochs=epochs, max_norm=max_norm, dtype=dtype
    )
    model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        model, make_toy_optimizer(model), X, y, nn.BCEWithLogitsLoss(), accum_steps,
        steps=epochs, clip_norm=max_norm, dtype=dtype,
    )  # fmt: skip
    assert torch.equal(weight, twin.weight)
    assert scale == twin.final_scale
    if input_scale > 1:  # the case is meant to exercise the skip path
        assert any(entry.skipped for entry in twin.log)


@pytest.mark.parametrize("bad", [0, -1, 3, 2.0, "4", None])
def test_the_plain_loop_names_a_bad_accum_steps(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)  # 4 batches: 3 does not divide
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match="accum_steps must be an int >= 1 dividing"):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), accum_steps=bad
        )


@pytest.mark.parametrize("bad", [0, 1.5, "2"])
def test_the_plain_loop_names_bad_epochs(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match="epochs must be an int >= 1"):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), epochs=bad
        )


def test_the_plain_loop_refuses_an_optimizer_over_another_models_parameters():
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model, other = make_toy_model(device=CPU), make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^optimizer must hold every trainable parameter$"):
        train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(other))
    assert torch.equal(model.weight, torch.zeros(1, 2))  # it trained nothing, and said so


def test_the_plain_loop_wants_every_trainable_parameter_and_lets_a_frozen_one_out():
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = nn.Linear(2, 1)
    weight_only = torch.optim.SGD([model.weight], lr=0.1)
    with pytest.raises(ValueError, match=r"^optimizer must hold every trainable parameter$"):
        train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), weight_only)
    model.bias.requires_grad_(False)
    train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), weight_only)


@pytest.mark.parametrize("bad", [torch.float32, torch.int32, "fp16"])
def test_the_plain_loop_names_a_dtype_autocast_would_ignore(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    # autocast only warned "the target dtype is not supported. Disabling autocast."
    with pytest.raises(ValueError, match=r"^dtype must be float16 or bfloat16, got "):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), dtype=bad
        )


# A reader's fresh interpreter: torch and nothing of the book. Importing amp_lesson fails,
# and the copied code brings its own imports (none are added here).
READER_SCRIPT = """
import sys
sys.modules["amp_lesson"] = None  # the copied code must not need the book's package

{copied}

import json
X = torch.randn(128, 2, generator=torch.Generator().manual_seed(42))
y = (X.sum(dim=1, keepdim=True) > 0).float()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=32)
model = torch.nn.Linear(2, 1, bias=False)
torch.nn.init.zeros_(model.weight)
loss_fn = torch.nn.BCEWithLogitsLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.no_grad():
    before = loss_fn(model(X), y).item()
scaler = train_mixed_precision(model, loader, loss_fn, optimizer, accum_steps=4, epochs=20)
with torch.no_grad():
    after = loss_fn(model(X), y).item()
print(json.dumps({{"before": before, "after": after, "scale": scaler.get_scale(),
                  "weight": [w.hex() for w in model.weight.flatten().tolist()]}}))
"""

# The highlighted block on the recipe page that defines the loop, and its copy button.
RECIPE_BLOCK = "div.highlight-python:has(pre:text('def train_mixed_precision('))"


@pytest.mark.browser
def test_what_the_recipe_pages_copy_button_copies_runs_alone_and_matches_the_package(
    make_page, site_url, tmp_path
):
    pg = make_page(
        viewport={"width": 1280, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    pg.goto(f"{site_url}/chapter/recipe.html", wait_until="load")
    block = pg.locator(RECIPE_BLOCK)
    assert block.count() == 1, "the recipe page must show the loop's definition once"
    block.hover()
    block.locator("button.copybtn").click()
    copied = pg.evaluate("navigator.clipboard.readText()")
    # The loop is the first thing after the import, before any argument check.
    definition = copied[copied.index("def train_mixed_precision(") :]
    assert copied.lstrip().startswith("import torch")
    head = definition[: definition.index("for _ in range(epochs):")]
    assert "def check_recipe_" in definition[len(head) :]
    assert "\n" not in head.split('"""')[1]  # a one-line docstring; the full one is in the API
    script = tmp_path / "reader.py"
    script.write_text(READER_SCRIPT.format(copied=copied))
    proc = subprocess.run(
        [sys.executable, "-I", str(script)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["after"] < result["before"]  # it trains the toy problem
    X, y = make_toy_problem(device=CPU)
    model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        model, make_toy_optimizer(model), X, y, nn.BCEWithLogitsLoss(), 4, steps=20
    )
    assert result["weight"] == [w.hex() for w in twin.weight.flatten().tolist()]
    assert result["scale"] == twin.final_scale
    assert pg.console_errors == []
