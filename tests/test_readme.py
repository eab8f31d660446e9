"""The README and docs/ stay true.

- The Quickstart has two commands; the second is what CI runs.
- Every other command runs as written in the shell the Quickstart left: no
  bare `observer`, `python` or `pip` (they are "command not found", or the
  wrong interpreter, unless the virtualenv is active).
- Every `.venv/bin/observer SUBCOMMAND` named is a real subcommand.
- Every link to a document of docs/ (and to one of its sections) resolves.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import click
import pytest

from observer.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A command word that only runs as meant inside an activated virtualenv.
BARE = re.compile(r"^(observer|python[0-9.]*|pip[0-9.]*)(\s|$)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*\s+")
OBSERVER_COMMAND = re.compile(r"\.venv/bin/observer((?:[ \t]+[a-z][a-z0-9-]*){1,2})")
LINK = re.compile(r"\]\(([^()\s]+)\)")
INLINE_CODE = re.compile(r"(`+).+?\1")


def quickstart() -> list[str]:
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_exactly_two_commands_demo_then_tests() -> None:
    demo, tests = quickstart()
    assert demo.endswith("observer demo")
    assert "pytest" in tests and "mypy --strict observer" in tests and "ruff check" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert quickstart()[1] in ci


# -- commands run as written ---------------------------------------------------------


def sh_lines(page: Path) -> list[str]:
    """Every line of every ```sh block of `page`."""
    return [line for block in SH_BLOCK.findall(page.read_text()) for line in block.splitlines()]


def commands(line: str) -> list[str]:
    """The commands of one shell line: comment dropped, split on && || ; |, env prefix dropped."""
    code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
    found = []
    for part in re.split(r"&&|\|\||;|\|", code):
        part = part.strip()
        while ASSIGNMENT.match(part):
            part = ASSIGNMENT.sub("", part, count=1)
        if part:
            found.append(part)
    return found


def bare_commands(page: Path, skip: set[str]) -> list[str]:
    bad = []
    for line in sh_lines(page):
        stripped = line.strip()
        if not stripped or stripped in skip or stripped.startswith(("#", "export ", "cd ")):
            continue
        bad += [f"{page.name}: {stripped}" for c in commands(stripped) if BARE.match(c)]
    return bad


def test_commands_run_as_the_quickstart_left_the_shell() -> None:
    skip = set(quickstart())
    bad = [line for page in PAGES for line in bare_commands(page, skip)]
    assert not bad, "write .venv/bin/observer, .venv/bin/python, .venv/bin/pip:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        ("observer run --once", True),
        ("  python bench/judge.py", True),
        ("OBSERVER_LOG__LEVEL=debug observer run", True),
        ("cat x.jsonl | observer score", True),
        (".venv/bin/observer check && python -V", True),
        ("pip install -e .", True),
        (".venv/bin/observer run   # observer run is the daemon", False),
        (".venv/bin/python bench/pipeline.py", False),
        ("export OBSERVER_JUDGE_MODEL=gpt-4o-mini", False),
        ("# observer check first", False),
        ("head -3 observer-demo-scores.jsonl", False),
    ],
)
def test_the_bare_command_check_itself(tmp_path: Path, line: str, flagged: bool) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"text\n\n```sh\n{line}\n```\n")
    assert bool(bare_commands(page, set())) is flagged


# -- subcommands exist ---------------------------------------------------------------


def named_subcommands(page: Path) -> list[list[str]]:
    return [match.split() for match in OBSERVER_COMMAND.findall(page.read_text())]


def unknown_subcommand(words: list[str]) -> str | None:
    """Why `.venv/bin/observer WORDS...` is not a command, or None when it is."""
    command = main.commands.get(words[0])
    if command is None:
        return f"no subcommand {words[0]!r} (there are {sorted(main.commands)})"
    # A group with a default command (`observer judge FILE` is `observer judge file FILE`).
    default = isinstance(command, click.Group) and "file" in command.commands
    if (
        isinstance(command, click.Group)
        and not default
        and (len(words) < 2 or words[1] not in command.commands)
    ):
        return f"{words[0]!r} needs one of {sorted(command.commands)}"
    return None


def test_every_observer_subcommand_named_exists() -> None:
    named = [(page.name, words) for page in PAGES for words in named_subcommands(page)]
    assert any(page == "README.md" for page, _ in named)
    bad = [
        f"{page}: observer {' '.join(words)}: {why}"
        for page, words in named
        if (why := unknown_subcommand(words)) is not None
    ]
    assert not bad, "\n".join(bad)


def test_the_subcommand_check_itself() -> None:
    assert unknown_subcommand(["config", "show"]) is None
    assert unknown_subcommand(["run", "once"]) is None  # a second word after a command is data
    assert unknown_subcommand(["config"]) is not None
    assert unknown_subcommand(["config", "edit"]) is not None
    assert unknown_subcommand(["serve"]) is not None


# -- links to docs/ resolve -----------------------------------------------------------


def anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N"))
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        slug = anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_anchor_rule() -> None:
    assert anchor("CRAG grade") == "crag-grade"
    assert anchor("Confidence, band and ungrounded") == "confidence-band-and-ungrounded"
    assert anchor("The record: RagRecord") == "the-record-ragrecord"
    assert anchor("`observer score`") == "observer-score"


def test_links_to_docs_resolve() -> None:
    assert DOCS, "docs/ holds the reference"
    bad = []
    for page in PAGES:
        for target in LINK.findall(INLINE_CODE.sub("", FENCE.sub("", page.read_text()))):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                bad.append(f"{page.name}: {target}: no such file")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                bad.append(f"{page.name}: {target}: no such section")
    assert not bad, "\n".join(bad)


def test_no_reference_to_a_document_users_do_not_have() -> None:
    for page in PAGES:
        assert "DESIGN" not in page.read_text(), f"{page.name} cites DESIGN; link docs/ instead"


# Snippets may name a notifier another snippet defines, or a module of the reader's own.
_ELSEWHERE = re.compile(r"no notifier named '\w+' \(configured: none\)|cannot import 'mypackage")


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *DOCS, ROOT / "deploy" / "README.md"], ids=lambda p: p.name
)
def test_every_toml_snippet_is_a_valid_configuration(page: Path) -> None:
    import tomllib

    from observer.config import Settings

    problems = []
    for number, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)):
        try:
            Settings(**tomllib.loads(block))
        except Exception as error:  # a TOML or validation error: both are the doc's fault
            if not _ELSEWHERE.search(str(error)):
                problems.append(f"toml block {number + 1}: {error}")
    assert not problems
