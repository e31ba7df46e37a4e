"""The loop a reader copies is the loop the book's tables come from, and it runs on its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import recipe_loaders
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from amp_lesson import recipe as recipe_module
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
        scaler_kwargs={"enabled": dtype == torch.float16},  # the recipe scales FP16 only
    )  # fmt: skip
    assert torch.equal(weight, twin.weight)
    assert scale == twin.final_scale
    if input_scale > 1:  # the case is meant to exercise the skip path
        assert any(entry.skipped for entry in twin.log)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", None, True])
def test_the_plain_loop_names_a_bad_accum_steps(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^accum_steps must be an int >= 1, got "):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), accum_steps=bad
        )
    assert torch.equal(model.weight, torch.zeros(1, 2))


@pytest.mark.parametrize("bad", [0, 1.5, "2"])
def test_the_plain_loop_names_bad_epochs(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^epochs must be an int >= 1, got "):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), epochs=bad
        )


@pytest.mark.parametrize(
    "empty",
    [[], DataLoader(TensorDataset(torch.zeros(0, 2), torch.zeros(0, 1)), batch_size=4)],
    ids=["list", "DataLoader"],
)
def test_the_plain_loop_names_an_empty_loader(empty):
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^loader gave no batch in epoch 1$"):
        train_mixed_precision(model, empty, nn.BCEWithLogitsLoss(), make_toy_optimizer(model))


def test_the_plain_loop_refuses_a_generator_for_more_than_one_epoch_before_training():
    X, y = make_toy_problem(device=CPU)
    model = make_toy_model(device=CPU)
    batches = (batch for batch in zip(X.split(32), y.split(32), strict=True))
    with pytest.raises(ValueError, match=r"^loader is an iterator, used up after one epoch"):
        train_mixed_precision(
            model, batches, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), epochs=2
        )
    assert torch.equal(model.weight, torch.zeros(1, 2))
    assert len(list(batches)) == 4  # not one batch was taken from it


def test_the_plain_loop_names_a_window_in_which_count_finds_no_sample():
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^count gave 0 for a window of epoch 1$"):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), accum_steps=2,
            count=lambda y: 0,
        )  # fmt: skip
    assert torch.equal(model.weight, torch.zeros(1, 2))


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


@pytest.mark.parametrize("bad", [torch.float64, torch.int32, "fp16"])
def test_the_plain_loop_names_a_dtype_autocast_would_ignore(bad):
    X, y = make_toy_problem(device=CPU)
    loader = DataLoader(TensorDataset(X, y), batch_size=32)
    model = make_toy_model(device=CPU)
    # autocast only warned "the target dtype is not supported. Disabling autocast."
    with pytest.raises(
        ValueError, match=r"^dtype must be torch.float16, torch.bfloat16 or torch.float32, got "
    ):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), dtype=bad
        )


# A reader's fresh interpreter: torch and nothing of the book. Importing amp_lesson fails,
# and the copied code brings its own imports (none are added here). It trains the toy problem,
# then every loader of recipe_loaders (torch alone), whose file is put beside the script.
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
sys.path.insert(0, {folder!r})
import recipe_loaders
print(recipe_loaders.results_as_json(train_mixed_precision))
"""

START = "# The recipe, as the chapter shows it and its copy button copies it."
END = "# End of the recipe."


def run_alone(copied: str, folder: Path) -> tuple[dict, dict]:
    """Run the copied recipe in a fresh interpreter that cannot import amp_lesson."""
    shutil.copy(Path(recipe_loaders.__file__), folder / "recipe_loaders.py")
    script = folder / "reader.py"
    script.write_text(READER_SCRIPT.format(copied=copied, folder=str(folder)))
    proc = subprocess.run(
        [sys.executable, "-I", str(script)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    toy, loaders = proc.stdout.strip().splitlines()[-2:]
    return json.loads(toy), json.loads(loaders)


def check_against_the_package(toy: dict, loaders: dict) -> None:
    assert toy["after"] < toy["before"]  # it trains the toy problem
    X, y = make_toy_problem(device=CPU)
    model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        model, make_toy_optimizer(model), X, y, nn.BCEWithLogitsLoss(), 4, steps=20
    )
    assert toy["weight"] == [w.hex() for w in twin.weight.flatten().tolist()]
    assert toy["scale"] == twin.final_scale
    # Every loader, FP16 and BF16: the same bits as the package's loop, which
    # test_recipe_loaders holds to the float64 reference.
    package = json.loads(recipe_loaders.results_as_json(train_mixed_precision))
    assert len(loaders) == 2 * len(recipe_loaders.CASES)
    # among them a collator's dicts and a tokenizer-style mapping, with the model's own loss
    assert sum(name.startswith(("dict batches", "a tokenizer-style")) for name in loaders) == 6
    assert loaders == package


def test_the_recipe_as_the_page_includes_it_runs_alone_on_every_loader(tmp_path):
    source = Path(recipe_module.__file__).read_text()
    copied = source[source.index(START) + len(START) : source.index(END)]
    assert "amp_lesson" not in copied
    check_against_the_package(*run_alone(copied, tmp_path))


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
    # The loop is the first thing after the imports, before any argument check.
    definition = copied[copied.index("def train_mixed_precision(") :]
    assert copied.lstrip().startswith("import contextlib")
    head = definition[: definition.index("for epoch in range(1, epochs + 1):")]
    assert "def check_recipe_" in definition[len(head) :]
    assert "\n" not in head.split('"""')[1]  # a one-line docstring; the full one is in the API
    check_against_the_package(*run_alone(copied, tmp_path))
    # Under DDP on two gloo processes too: one all-reduce per window, the package's weights.
    from test_recipe_loaders import ddp_results

    copied_ranks = ddp_results(tmp_path / "copied", source=copied)
    package_ranks = ddp_results(tmp_path / "package")
    assert copied_ranks == package_ranks
    assert pg.console_errors == []


@pytest.mark.browser
def test_the_landing_pages_copy_buttons_copy_only_code_that_runs(make_page, site_url, tmp_path):
    """The landing page shows the loop's heart as an excerpt with no button, and the whole
    function, which runs as copied, in a dropdown."""
    pg = make_page(
        viewport={"width": 1280, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    pg.goto(f"{site_url}/index.html", wait_until="load")
    excerpt = pg.locator("div.highlight-python:has(pre:text('for epoch in range(1, epochs + 1):'))")
    assert excerpt.count() == 2  # the excerpt, and the loop inside the whole function
    assert excerpt.first.locator("button.copybtn").count() == 0
    pg.locator("details.sd-dropdown summary").first.click()
    whole = pg.locator(RECIPE_BLOCK)
    assert whole.count() == 1
    whole.hover()
    whole.locator("button.copybtn").click()
    copied = pg.evaluate("navigator.clipboard.readText()")
    check_against_the_package(*run_alone(copied, tmp_path))
    buttons = pg.locator("article button.copybtn")
    assert buttons.count() == 1, "every other block on the landing page is an excerpt"
    assert pg.console_errors == []


def test_every_built_copy_of_the_recipe_is_the_source_as_it_is_now(built_book):
    """The live page, the landing page's dropdown and every edition's page show the recipe's
    code as recipe.py holds it: an edition's pages include the lesson's source too, so an edit
    of the source must reach them (an edition built before the edit would show the old loop)."""
    from bs4 import BeautifulSoup

    source = Path(recipe_module.__file__).read_text()
    expected = source[source.index(START) + len(START) : source.index(END)].strip()
    pages = [built_book / "chapter" / "recipe.html", built_book / "index.html"]
    pages += sorted((built_book / "editions").glob("*/chapter/recipe.html"))
    assert len(pages) > 2, "the book holds an edition"
    for page in pages:
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        shown = [pre.get_text().strip() for pre in soup.select("div.highlight pre")]
        whole = [text for text in shown if text.startswith("import contextlib")]
        assert whole == [expected], page.relative_to(built_book)
