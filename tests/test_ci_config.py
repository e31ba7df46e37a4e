"""CI and Read the Docs configuration: valid, safe with a self-hosted GPU runner, pinned in one place."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import build_book
import lint_workflows
import pytest
import rtd_build
import yaml
from helpers import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
LOCK = ROOT / "requirements" / "constraints.txt"
LOCK_INPUT = ROOT / "requirements" / "constraints.in"


def _workflow(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


# -- linters ------------------------------------------------------------------------


def test_workflows_pass_actionlint() -> None:
    assert WORKFLOWS, "no workflow files found"
    assert lint_workflows.lint(WORKFLOWS) == []


def test_actionlint_reports_what_is_wrong_in_a_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: [self-hosted, gpu-typo]\n"
        "    needs: missing-job\n"
        "    steps:\n"
        "      - run: echo ${{ github.event.nope( }}\n"
    )
    problems = lint_workflows.lint([broken], labels={"gpu"})
    kinds = {p["kind"] for p in problems}
    assert "runner-label" in kinds  # gpu-typo is not a declared label
    assert "job-needs" in kinds
    assert "expression" in kinds
    # a declared label is not a problem
    ok = tmp_path / "ok.yml"
    ok.write_text(
        "on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu]\n    steps:\n      - run: 'true'\n"
    )
    assert lint_workflows.lint([ok], labels={"gpu"}) == []
    assert lint_workflows.lint([ok], labels=set())[0]["kind"] == "runner-label"


def test_the_gpu_label_is_declared_for_actionlint() -> None:
    assert lint_workflows.declared_labels() == {"gpu"}


@pytest.mark.parametrize(
    ("schema", "files"),
    [
        ("vendor.readthedocs", [ROOT / ".readthedocs.yaml"]),
        ("vendor.github-workflows", WORKFLOWS),
        ("vendor.dependabot", [ROOT / ".github" / "dependabot.yml"]),
    ],
)
def test_configuration_files_match_their_schemas(schema: str, files: list[Path]) -> None:
    proc = _check_jsonschema(schema, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_readthedocs_file(tmp_path: Path) -> None:
    bad = tmp_path / ".readthedocs.yaml"
    bad.write_text((ROOT / ".readthedocs.yaml").read_text().replace("  jobs:\n", "  jobz:\n", 1))
    proc = _check_jsonschema("vendor.readthedocs", bad)
    assert proc.returncode != 0
    assert "jobz" in proc.stdout + proc.stderr


# -- the self-hosted GPU runner runs only vouched-for code ----------------------------


def test_only_the_gpu_workflow_uses_the_self_hosted_runner() -> None:
    for path in WORKFLOWS:
        data = _workflow(path.name)
        for name, job in data["jobs"].items():
            runs_on = job["runs-on"]
            labels = runs_on if isinstance(runs_on, list) else [runs_on]
            if path.name == "gpu.yml" and name == "gpu":
                assert "self-hosted" in labels, name
            else:
                assert not {"self-hosted", "gpu"} & set(labels), (path.name, name)


def test_the_gpu_workflow_never_runs_for_forks_or_unlabelled_pull_requests() -> None:
    data = _workflow("gpu.yml")
    triggers = data["on"]
    assert set(triggers) == {"push", "workflow_dispatch", "pull_request"}
    assert triggers["push"]["branches"] == ["main"]
    # a push that only brings a recording in (the pull request below) records nothing again
    assert triggers["push"]["paths-ignore"] == ["docs/_editions/**", "docs/_data/gpu/**"]
    assert set(triggers["pull_request"]["types"]) == {"labeled", "synchronize"}
    assert data["permissions"] == {"contents": "read"}
    job = data["jobs"]["gpu"]
    condition = " ".join(job["if"].split())
    assert condition.startswith("github.event_name != 'pull_request' || (")
    # every pull request must come from this repository AND carry the label
    pr_part = condition.split("||", 1)[1]
    assert "github.event.pull_request.head.repo.full_name == github.repository &&" in pr_part
    assert "contains(github.event.pull_request.labels.*.name, 'run-gpu')" in pr_part
    for path in WORKFLOWS:
        assert "pull_request_target" not in path.read_text(), path.name


# -- the workflows' supply chain: actions pinned by commit, least-privilege tokens ------

# `owner/repo[/path]@<commit>`: a tag or branch can be moved to other code, a commit cannot.
_PINNED_USES = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}")
# what follows the pinned value on its line: the release it is, for people and Dependabot
_VERSION_COMMENT = re.compile(r"[ \t]+#[ \t]*v\d+(?:\.\d+){0,2}[ \t]*")
# a run step that installs or compiles packages: code from any package it resolves may run
_RUNS_PACKAGE_CODE = re.compile(
    r"\bpip\s+(?:install|compile)\b|\buv\s+(?:pip|sync|lock|run)\b|\bnox\b"
)


def _mapping_get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(
        (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None
    )


def _uses(path: Path) -> list[tuple[str, str, str]]:
    """Every ``uses:`` of a workflow (a job's or a step's): (where, value, rest of its line)."""
    text = path.read_text()
    root = yaml.compose(text)
    found = []

    def add(where: str, node: yaml.Node | None) -> None:
        if node is not None:
            assert isinstance(node, yaml.ScalarNode), where
            found.append((where, node.value, text[node.end_mark.index :].split("\n", 1)[0]))

    jobs = _mapping_get(root, "jobs")
    assert isinstance(jobs, yaml.MappingNode), path.name
    for key, job in jobs.value:
        add(f"{path.name}: jobs.{key.value}", _mapping_get(job, "uses"))
        steps = _mapping_get(job, "steps")
        for i, step in enumerate(steps.value if isinstance(steps, yaml.SequenceNode) else []):
            add(f"{path.name}: jobs.{key.value}.steps[{i}]", _mapping_get(step, "uses"))
    return found


def _writes(permissions: dict | str | None) -> set[str]:
    """The scopes ``permissions`` grants write access to; no declaration counts as a write."""
    if permissions is None:  # the repository's default token, which may be write-all
        return {"(undeclared: the repository default)"}
    if isinstance(permissions, str):
        return set() if permissions == "read-all" else {permissions}
    return {scope for scope, level in permissions.items() if level != "read" and level != "none"}


def _job_permissions(workflow: dict, job: dict) -> dict | str | None:
    """What a job's token may do: its own ``permissions``, else the workflow's."""
    return job["permissions"] if "permissions" in job else workflow.get("permissions")


def _runs_package_code(job: dict) -> bool:
    return any(_RUNS_PACKAGE_CODE.search(step.get("run", "")) for step in job.get("steps", []))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_version_in_a_comment(path: Path) -> None:
    uses = _uses(path)
    assert uses, f"{path.name} uses no action"
    for where, value, rest in uses:
        if value.startswith("./"):  # an action of this repository, at the checked-out commit
            continue
        assert _PINNED_USES.fullmatch(value), f"{where}: {value} is not pinned to a commit SHA"
        assert _VERSION_COMMENT.fullmatch(rest), f"{where}: {value} has no `# vX.Y.Z` comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_workflow_declares_read_only_default_permissions(path: Path) -> None:
    data = _workflow(path.name)
    assert "permissions" in data, f"{path.name} leaves its token at the repository default"
    assert _writes(data["permissions"]) == set(), f"{path.name} grants writes to every job"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_job_that_installs_or_compiles_packages_holds_a_write_permission(path: Path) -> None:
    data = _workflow(path.name)
    for name, job in data["jobs"].items():
        if _runs_package_code(job):
            writes = _writes(_job_permissions(data, job))
            assert writes == set(), f"{path.name}: {name} installs packages and may write {writes}"


def test_the_lock_is_compiled_read_only_and_proposed_by_a_job_that_runs_no_package_code() -> None:
    data = _workflow("lock.yml")
    assert set(data["on"]) == {"schedule", "workflow_dispatch"}
    assert data["permissions"] == {}
    compiling = [n for n, j in data["jobs"].items() if _runs_package_code(j)]
    writing = [n for n, j in data["jobs"].items() if _writes(_job_permissions(data, j))]
    (compile_name,) = compiling
    (propose_name,) = writing
    compile_job, propose_job = data["jobs"][compile_name], data["jobs"][propose_name]
    assert compile_job["permissions"] == {"contents": "read"}
    assert any("nox -s lock -- --upgrade" in s.get("run", "") for s in compile_job["steps"])

    def steps_using(job: dict, action: str) -> list[dict]:
        return [s for s in job["steps"] if s.get("uses", "").startswith(f"{action}@")]

    (checkout,) = steps_using(compile_job, "actions/checkout")
    assert checkout["with"]["persist-credentials"] is False  # no token left in .git/config
    (upload,) = steps_using(compile_job, "actions/upload-artifact")
    # the lock, and the documentation inventories read again (tools/inventories.py refresh)
    assert upload["with"]["path"].split() == [str(LOCK.relative_to(ROOT)), "docs/_inventories/"]
    assert any("tools/inventories.py refresh" in s.get("run", "") for s in compile_job["steps"])
    # the writing job takes that artifact and only commits it and opens the pull request
    assert propose_job["needs"] in (compile_name, [compile_name])
    assert set(_writes(propose_job["permissions"])) == {"contents", "pull-requests", "actions"}
    (download,) = steps_using(propose_job, "actions/download-artifact")
    assert download["with"]["name"] == upload["with"]["name"]
    (pr,) = steps_using(propose_job, "peter-evans/create-pull-request")
    assert pr["with"]["add-paths"].split() == [str(LOCK.relative_to(ROOT)), "docs/_inventories/"]
    assert pr["with"]["branch"] == "lock-refresh"
    allowed = {"actions/checkout", "actions/download-artifact", "peter-evans/create-pull-request"}
    for step in propose_job["steps"]:
        if "uses" in step:
            assert step["uses"].split("@")[0] in allowed, step["uses"]
        run = step.get("run", "")
        assert not _RUNS_PACKAGE_CODE.search(run), run
        assert "python" not in run, run
    assert any(
        "gh workflow run ci.yml --ref lock-refresh" in s.get("run", "")
        for s in propose_job["steps"]
    )


def test_main_is_recorded_on_the_gpu_and_proposed_by_a_job_that_runs_no_package_code() -> None:
    """The GPU job records the edition and the table with a read-only token; a second job,
    which only checks the files' names and kinds and commits them, opens the pull request."""
    data = _workflow("gpu.yml")
    gpu, propose = data["jobs"]["gpu"], data["jobs"]["propose"]
    assert _writes(_job_permissions(data, gpu)) == set()
    runs = [s.get("run", "") for s in gpu["steps"]]
    order = [next(i for i, r in enumerate(runs) if f"nox -s {s}" in r)
             for s in ("docs", "gpu-record", "gpu-edition")]  # fmt: skip
    assert order == sorted(order)  # the edition's pages read the table just recorded
    (edition,) = [s for s in gpu["steps"] if "gpu-edition" in s.get("run", "")]
    assert edition["if"] == "github.event_name != 'pull_request'"
    (upload,) = [s for s in gpu["steps"] if s.get("with", {}).get("name") == "gpu-recording"]
    assert upload["with"]["path"].split() == ["docs/_editions/", "docs/_data/gpu/*.json"]
    assert propose["needs"] == "gpu"
    assert propose["if"] == "github.event_name != 'pull_request'"
    assert set(_writes(propose["permissions"])) == {"contents", "pull-requests", "actions"}
    assert not _runs_package_code(propose)
    allowed = {"actions/checkout", "actions/download-artifact", "peter-evans/create-pull-request"}
    for step in propose["steps"]:
        if "uses" in step:
            assert step["uses"].split("@")[0] in allowed, step["uses"]
        assert "python" not in step.get("run", "")
    (checkout,) = [s for s in propose["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["persist-credentials"] is False
    (pr,) = [s for s in propose["steps"] if "create-pull-request" in s.get("uses", "")]
    assert pr["with"]["branch"] == "gpu-recording"
    assert pr["with"]["add-paths"].split() == ["docs/_editions/", "docs/_data/gpu/"]
    assert "summary.txt" in pr["with"]["body"]
    assert any("gh workflow run ci.yml --ref gpu-recording" in s.get("run", "")
               for s in propose["steps"])  # fmt: skip


# -- Read the Docs, and CI's copy of it -----------------------------------------------


def test_ci_builds_the_book_as_read_the_docs_does() -> None:
    rtd = rtd_build.load_config()
    (job,) = [j for j in _workflow("ci.yml")["jobs"].values() if "rtd_build.py" in str(j)]
    setup = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-python")]
    assert setup[0]["with"]["python-version"] == str(rtd["build"]["tools"]["python"]) == "3.12"
    commands = [command for _, command in rtd_build.plan(rtd)]
    installs = [c for c in commands if "pip install" in c]
    assert all("-c requirements/constraints.txt" in c for c in installs)
    assert any("download.pytorch.org/whl/cpu" in c and "torch" in c for c in installs)
    assert any('".[notebooks]" ./book' in c for c in installs)
    assert not any("[dev]" in c or "[test]" in c for c in installs)  # the book's build only
    assert commands[-1] == "python tools/build_book.py $READTHEDOCS_OUTPUT/html"


def test_the_rtd_emulation_refuses_a_file_that_relies_on_defaults() -> None:
    with pytest.raises(ValueError, match=r"build\.jobs\.install is missing"):
        rtd_build.plan({"version": 2, "build": {"jobs": {"build": {"html": ["x"]}}}})
    with pytest.raises(ValueError, match=r"build\.jobs\.build\.html is missing"):
        rtd_build.plan({"version": 2, "build": {"jobs": {"install": ["x"]}}})


# -- what drifts is pinned in one place -------------------------------------------------

PINNED_ELSEWHERE = [
    ROOT / "noxfile.py",
    ROOT / ".readthedocs.yaml",
    ROOT / ".ci" / "run",
    ROOT / "tests" / "helpers.py",
    ROOT / "tools" / "bench_build.py",
    *WORKFLOWS,
]


def test_the_torch_version_is_set_in_one_place() -> None:
    (pin,) = re.findall(r"^torch==(\S+)$", LOCK_INPUT.read_text(), re.MULTILINE)
    assert re.search(rf"^torch=={re.escape(pin)}$", LOCK.read_text(), re.MULTILINE)
    for path in PINNED_ELSEWHERE:
        assert not re.search(r"torch\s*[=<>~]=", path.read_text()), f"{path} pins torch"


def test_the_sphinx_options_are_set_in_one_place() -> None:
    assert "-W" in build_book.SPHINX_OPTS
    assert "--keep-going" in build_book.SPHINX_OPTS
    for path in PINNED_ELSEWHERE:
        text = path.read_text()
        assert "--keep-going" not in text, f"{path} sets Sphinx options"
        assert '"-W"' not in text, f"{path} sets Sphinx options"


def _names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def test_the_lock_pins_every_dependency_of_the_package() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted |= _names(r for r in extra if not r.startswith("amp-lesson"))
    pinned = {
        m[1].lower(): m[2]
        for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", LOCK.read_text(), re.MULTILINE)
    }
    assert wanted - set(pinned) == set(), "run `nox -s lock` after changing pyproject.toml"
    assert LOCK.read_text().startswith("# This file was autogenerated by uv")
    assert "#    nox -s lock\n" in LOCK.read_text()


# -- one setting chooses the browser ------------------------------------------------------


def test_chromium_path_chooses_the_browser(monkeypatch, tmp_path: Path) -> None:
    import shutil

    import ensure_chromium

    fake = tmp_path / "my-chromium"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("CHROMIUM_PATH", str(fake))
    assert ensure_chromium.find() == str(fake)
    monkeypatch.setenv("CHROMIUM_PATH", str(tmp_path / "missing"))
    assert ensure_chromium.find() is None
    assert ensure_chromium.main() == 1  # a wrong path is an error, not a silent skip
    monkeypatch.delenv("CHROMIUM_PATH")
    from amp_book.printbook import CHROMIUM_NAMES

    system = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    assert ensure_chromium.find() == system
    # Playwright's own build, if it has been installed. Asked in a process of its own: its sync
    # API refuses to start where another is running, as the session's browser is in this one.
    env = {**os.environ, "CHROMIUM_PATH": "playwright"}
    code = "import ensure_chromium; print(ensure_chromium.find())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT / "tools", check=True)  # fmt: skip
    found = proc.stdout.strip()
    assert found == "None" or "ms-playwright" in found


def test_uv_is_handed_the_find_links_pip_is_configured_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pip_config

    first, other = str(tmp_path / "wheels"), str(tmp_path / "other")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    (tmp_path / "pip.conf").write_text(f"[global]\nfind-links = {first}\n")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    # (a machine's own pip configuration may add its folders; these are the ones set here)
    assert first in pip_config.find_links()
    assert other not in pip_config.find_links()
    monkeypatch.setenv("PIP_FIND_LINKS", f"{first} {other}")
    found = pip_config.find_links()
    assert [link for link in found if link in (first, other)] == [first, other]
    links = pip_config.uv_find_links()
    assert links[links.index(first) - 1] == "--find-links"
    # nox hands uv what this module reads (the environment's installs go through it).
    assert "uv_find_links()" in (ROOT / "noxfile.py").read_text()


def test_the_benchmark_says_before_any_build_that_it_has_no_browser(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CHROMIUM_PATH": str(tmp_path / "no-such-chromium")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_build.py")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    assert "no Chromium to weigh the pages with" in proc.stderr
    assert "CHROMIUM_PATH" in proc.stderr
