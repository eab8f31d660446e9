"""The repository cites only what a maintainer can read: its own docs/.

- No file of the code, the tests, the benchmarks, the docs or the README cites a
  design document kept outside the repository (`DESIGN §4`, `shared/DESIGN.md`) or
  points at a path outside it (`../shared/`, `/work/shared/`): what such a comment
  leans on is in docs/, and it cites the page there.
- Every `docs/<page>.md` the code, the tests and the benchmarks cite exists, and so
  does the section when one is named (`docs/scores.md#ids-and-timestamps`).
"""

from __future__ import annotations

import re
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
