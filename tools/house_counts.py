"""Count what makes the code hard to see and change: big modules, long functions, private
names used across modules, and public names of the lesson only the book's build uses.

    python tools/house_counts.py [ROOT] [--list]

``ROOT`` is a checkout (default: this one), so a before/after comparison reads two. It
prints four counts (and with ``--list`` what each counts):

- modules over 600 lines (``src/``, ``book/src/``, ``tools/``);
- functions over 80 lines of code (docstring, comments and blank lines left out);
- private names crossing modules: a ``_name`` one module imports from, or reads on, another
  of the two packages (a package's private submodule imported within that package is its
  own business, not counted);
- names in an ``__all__`` of ``amp_lesson`` that the build (``book/src``, ``tools``) uses and
  nothing of the lesson's own does: no page or notebook of the book, no other lesson code.

Standard library only.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

OWN = ("amp_lesson", "amp_book")
BIG_MODULE_LINES = 600
LONG_FUNCTION_LINES = 80


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for base in (root / "src", root / "book" / "src", root / "tools"):
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _code_lines(lines: list[str], node: ast.AST) -> int:
    body = getattr(node, "body", [])
    doc: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        doc = set(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    span = range(node.lineno, (node.end_lineno or node.lineno) + 1)  # type: ignore[attr-defined]
    return sum(
        1
        for n in span
        if n not in doc and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#")
    )


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _crossings(name: str, path: Path, tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    found = set()
    package = _package(name, path)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if base.split(".")[0] not in OWN:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                own_submodule = full in modules and base == package
                if private and base != name and not own_submodule:
                    found.add(f"{name} -> {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    aliases[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            attr = node.attr
            if target and target != name and attr.startswith("_") and not attr.startswith("__"):
                found.add(f"{name} -> {target}.{attr}")
    return found


def _build_only(root: Path) -> list[str]:
    lesson = root / "src" / "amp_lesson"
    exported: dict[str, Path] = {}  # each name and the module that exports it
    for path in lesson.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", "") == "__all__" for t in node.targets
            ):
                for item in getattr(node.value, "elts", []):
                    exported.setdefault(item.value, path)

    def text(*globs: tuple[Path, str]) -> str:
        return "\n".join(
            p.read_text(encoding="utf-8", errors="ignore")
            for base, pattern in globs
            for p in base.rglob(pattern)
            if "_build" not in p.parts and "__pycache__" not in p.parts
        )

    build = text((root / "book" / "src", "*.py"), (root / "tools", "*.py"))
    readers = text((root / "docs", "*.md"), (root / "notebooks", "*.ipynb"))
    # Every name each lesson module reads (a Name loaded, or an attribute), parsed once.
    reads: dict[Path, set[str]] = {}
    for path in lesson.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
        reads[path] = names
    only = []
    build_words = set(re.findall(r"\w+", build))
    reader_words = set(re.findall(r"\w+", readers))
    for name in sorted(exported):
        if name not in build_words or name in reader_words:
            continue
        if not any(name in names for names in reads.values()):
            only.append(name)
    return only


def counts(root: Path) -> dict[str, list[str]]:
    """The four counts' members for the checkout ``root``."""
    modules = _modules(root)
    big, long, crossing = [], [], set()
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        if len(lines) > BIG_MODULE_LINES:
            big.append(f"{name} ({len(lines)})")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(lines, node)
                if n > LONG_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} ({n})")
        crossing |= _crossings(name, path, tree, modules)
    return {
        f"modules over {BIG_MODULE_LINES} lines": sorted(big),
        f"functions over {LONG_FUNCTION_LINES} lines of code": sorted(long),
        "private names crossing modules": sorted(crossing),
        "lesson __all__ names used only by the build": _build_only(root),
    }


def main(argv: list[str]) -> int:
    show = "--list" in argv
    args = [a for a in argv if a != "--list"]
    root = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    for title, members in counts(root).items():
        print(f"{title}: {len(members)}")
        if show:
            for member in members:
                print(f"  {member}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
