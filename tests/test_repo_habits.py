"""The repository cites only what a maintainer can read, in rooms a person can hold.

- No file of the code, the tests, the benchmarks, the docs or the README cites a
  design document kept outside the repository (`DESIGN §4`, `shared/DESIGN.md`) or
  points at a path outside it (`../shared/`, `/work/shared/`): what such a comment
  leans on is in docs/, and it cites the page there.
- Every `docs/<page>.md` the code, the tests and the benchmarks cite exists, and so
  does the section when one is named (`docs/scores.md#ids-and-timestamps`).
- In observer/: no file over 800 lines, no function over 100, no class name defined
  twice (a reader can tell from a name which one is meant), `__init__.py` files that
  re-export and hold no code (a lazy face's table and `__getattr__` aside), and no
  dead code (vulture, pyproject's [tool.vulture] and scripts/vulture_whitelist.py).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.test_readme import anchors

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()

# Where to look: every file under these (caches and installed packages aside), and these.
TREES = ("observer", "tests", "bench", "docs", "grafana", "examples", "deploy")
FILES = ("README.md", "pyproject.toml")
# Caches, and what npm installs beside the captured JS apps (not the repository's).
SKIPPED_DIRS = {
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "node_modules",
}

# A citation of the outside spec, or a path that leaves the repository for it.
OUTSIDE = ("DESIGN §", "shared/DESIGN", "../shared/", "/work/shared/")

CITED_DOC = re.compile(r"\bdocs/([A-Za-z0-9_.-]+?\.md)(?:#([A-Za-z0-9_-]+))?")
CITING = ("observer", "tests", "bench")


def _files(trees: tuple[str, ...], files: tuple[str, ...] = ()) -> list[Path]:
    found = [ROOT / name for name in files if (ROOT / name).is_file()]
    for tree in trees:
        for path in sorted((ROOT / tree).rglob("*")):
            relative = path.relative_to(ROOT).parts
            if path.is_file() and not SKIPPED_DIRS.intersection(relative):
                found.append(path)
    return [path for path in found if path.resolve() != THIS]


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def test_the_scan_sees_the_repository() -> None:
    scanned = {path.relative_to(ROOT).as_posix() for path in _files(TREES, FILES)}
    assert {
        "README.md",
        "docs/daemon.md",
        "observer/pipeline/__init__.py",
        "bench/soak.py",
    } <= scanned
    assert "tests/test_repo_habits.py" not in scanned


def test_nothing_cites_a_document_outside_the_repository() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _files(TREES, FILES)
        for number, line in enumerate(_text(path).splitlines(), 1)
        if any(marker in line for marker in OUTSIDE)
    ]
    assert not bad, "cite the page of docs/ that says it instead:\n" + "\n".join(bad)


def test_every_cited_docs_page_and_section_exists() -> None:
    pages = {page.name: anchors(page) for page in (ROOT / "docs").glob("*.md")}
    cited = 0
    bad = []
    for path in _files(CITING):
        if path.suffix not in (".py", ".md", ".toml"):
            continue
        for number, line in enumerate(_text(path).splitlines(), 1):
            for page, section in CITED_DOC.findall(line):
                cited += 1
                where = f"{path.relative_to(ROOT)}:{number}: docs/{page}"
                if page not in pages:
                    bad.append(f"{where}: no such page")
                elif section and section not in pages[page]:
                    bad.append(f"{where}#{section}: no such section")
    assert cited > 50, "the pattern finds the code's citations of docs/"
    assert not bad, "\n".join(bad)


MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
# The metrics are a table of declarations beside the few helpers that feed them; a room's
# own metrics are declared beside what they measure (observer/fleet, observer/otlp).
MAX_TELEMETRY_LINES = 1100


def _modules() -> list[tuple[str, str, ast.Module]]:
    """(path, text, tree) of every module of observer/."""
    found = []
    for path in _files(("observer",)):
        if path.suffix == ".py":
            text = _text(path)
            found.append((path.relative_to(ROOT).as_posix(), text, ast.parse(text)))
    return found


def test_no_file_over_800_lines() -> None:
    long = {p: n for p, text, _ in _modules() if (n := len(text.splitlines())) > MAX_FILE_LINES}
    assert not long, f"split these by what they hold: {long}"


def test_telemetry_stays_a_table() -> None:
    lines = sum(len(text.splitlines()) for p, text, _ in _modules() if "/telemetry/" in p)
    assert 0 < lines <= MAX_TELEMETRY_LINES, f"observer/telemetry/ is {lines} lines"


def test_no_function_over_100_lines() -> None:
    long = {}
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                if (lines := node.end_lineno - first + 1) > MAX_FUNCTION_LINES:
                    long[f"{path}:{node.name}"] = lines
    assert not long, f"split these into steps with names: {long}"


def test_each_class_name_is_defined_once() -> None:
    homes: dict[str, list[str]] = defaultdict(list)
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(path)
    twice = {name: paths for name, paths in homes.items() if len(paths) > 1}
    assert not twice, f"name each for what it is: {twice}"


def _holds_code(node: ast.stmt) -> bool:
    """Anything but imports, the docstring, `__all__`, a TYPE_CHECKING block, and a
    lazy face (its private table of homes, its module `__getattr__`)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return False
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return False
    if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
        return False
    if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
        return False
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        return not names or not all(n == "__all__" or n.startswith("_") for n in names)
    return True


def test_package_faces_re_export_and_hold_no_code() -> None:
    holding = {
        path: [ast.unparse(node).splitlines()[0] for node in tree.body if _holds_code(node)]
        for path, _, tree in _modules()
        if path.endswith("/__init__.py")
    }
    holding = {path: code for path, code in holding.items() if code}
    assert not holding, f"move it to a module named for what it holds: {holding}"


def test_no_dead_code() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "vulture"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, (
        "unused in observer/ (remove it; what a framework calls goes in "
        f"scripts/vulture_whitelist.py):\n{found.stdout}{found.stderr}"
    )
