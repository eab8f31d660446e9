"""observer.scores.catalogue: each score declared once, and everything else read from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from observer.judge.outcome import JUDGE_SCORE_NAMES
from observer.langfuse_setup import SCORE_CONFIGS
from observer.resolver import RESOLVER_SCORE_NAMES
from observer.scores import SIGNAL_SCORE_NAMES
from observer.scores.catalogue import CATALOGUE, Producer, ScoreSpec, names_of, spec_of

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = {
    Producer.SIGNALS: ROOT / "observer" / "scores" / "__init__.py",
    Producer.RESOLVER: ROOT / "observer" / "resolver" / "scores.py",
    Producer.JUDGE: ROOT / "observer" / "judge" / "outcome.py",
}
DATA_TYPES = {"NUMERIC", "CATEGORICAL", "BOOLEAN"}


def test_every_score_once_grouped_by_producer() -> None:
    names = [spec.name for spec in CATALOGUE]
    assert len(set(names)) == len(names)
    assert (*SIGNAL_SCORE_NAMES, *RESOLVER_SCORE_NAMES, *JUDGE_SCORE_NAMES) == tuple(names)
    assert names_of(Producer.SIGNALS) == SIGNAL_SCORE_NAMES
    assert names_of(Producer.RESOLVER) == RESOLVER_SCORE_NAMES
    assert names_of(Producer.JUDGE) == JUDGE_SCORE_NAMES
    assert all(spec_of(spec.name) is spec for spec in CATALOGUE)
    with pytest.raises(KeyError):
        spec_of("not_a_score")


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_each_spec_is_whole_for_its_data_type(spec: ScoreSpec) -> None:
    assert spec.data_type in DATA_TYPES
    assert spec.description.startswith("observer")
    assert re.fullmatch(r"[a-z0-9_]{1,35}", spec.name)
    if spec.data_type == "CATEGORICAL":
        assert spec.categories and len(set(spec.categories)) == len(spec.categories)
        assert spec.categories[0] == "LOW"  # worst first
    else:
        assert spec.categories == ()
    if spec.data_type != "NUMERIC":
        assert (spec.min_value, spec.max_value) == (None, None)
    assert spec.entry(1.0, "c") == (spec.name, 1.0, spec.data_type, "c")


def test_the_score_configs_are_the_catalogue() -> None:
    assert [(c.name, c.data_type, c.description) for c in SCORE_CONFIGS] == [
        (s.name, s.data_type, s.description) for s in CATALOGUE
    ]
    for config, spec in zip(SCORE_CONFIGS, CATALOGUE, strict=True):
        assert (config.min_value, config.max_value) == (spec.min_value, spec.max_value)
        assert tuple(c.label for c in config.categories) == spec.categories
        assert [c.value for c in config.categories] == list(range(len(spec.categories)))


def _literals(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_producers_write_no_score_name_or_data_type_of_their_own(producer: Producer) -> None:
    """A score's name and type are the catalogue's: a producer only looks them up."""
    own = _literals(PRODUCERS[producer])
    assert own & {spec.name for spec in CATALOGUE} == set()
    assert own & DATA_TYPES == set()


_IO = {"httpx", "langfuse", "pydantic", "requests", "sqlite3", "socket", "urllib", "openai"}


@pytest.mark.parametrize(
    "module",
    [
        "observer/scores/catalogue.py",
        "observer/langfuse_setup/specs.py",
        "observer/langfuse_setup/diff.py",
        "observer/langfuse_setup/report.py",
    ],
)
def test_the_pure_parts_import_no_io_library(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text())
    imported: set[str] = set()
    for node in tree.body:  # module level: a TYPE_CHECKING block is not run
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported & _IO == set()


# ---- docs/scores.md's tables ------------------------------------------------------------

_ROW = re.compile(r"^\| `(?P<name>\w+)` \| (?P<type>[A-Z]+) \| (?P<value>[^|]+) \|")


def _doc_tables() -> list[list[re.Match[str]]]:
    """The tables of docs/scores.md's section "The scores", their rows in order."""
    text = (ROOT / "docs" / "scores.md").read_text()
    section = text.split("## The scores\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[re.Match[str]]] = [[]]
    for line in section.splitlines():
        row = _ROW.match(line)
        if row:
            tables[-1].append(row)
        elif tables[-1]:
            tables.append([])
    return [t for t in tables if t]


def test_the_docs_tables_are_the_catalogue() -> None:
    """One table per producer, each listing its scores in the catalogue's order with the
    catalogue's data type, range and categories."""
    tables = _doc_tables()
    producers = [spec_of(table[0]["name"]).producer for table in tables]
    assert sorted(producers) == sorted(Producer)
    for producer, table in zip(producers, tables, strict=True):
        assert tuple(row["name"] for row in table) == names_of(producer)
        for row in table:
            spec, value = spec_of(row["name"]), row["value"].strip()
            assert row["type"] == spec.data_type, row[0]
            if spec.data_type == "CATEGORICAL":
                assert set(re.findall(r"`(\w+)`", value)) == set(spec.categories), row[0]
            elif spec.data_type == "BOOLEAN":
                assert value.startswith("1 "), row[0]
            elif (spec.min_value, spec.max_value) == (0.0, 1.0):
                assert value.startswith("0..1: "), row[0]
            else:
                assert (spec.min_value, spec.max_value) == (0.0, None)
                assert value.startswith("a count: "), row[0]
