"""docs/licenses.md stays true: its table lists exactly the distributions observer's runtime
requirements pull into the image, with their licences (through scripts/licenses.py's
functions); none is of unknown licence; every one that is not permissive is named in the doc.

Then the script's parts, on made-up distributions: the requirement walk, where a licence is
read from, what counts as not permissive, and what `--check` reports.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts import licenses
from scripts.licenses import Entry

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "licenses.md"


@pytest.fixture(scope="module")
def rows() -> list[Entry]:
    return licenses.image_entries()


def _section(doc: str, title: str) -> str:
    return doc.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


# -- the doc ------------------------------------------------------------------------------------


def test_the_doc_lists_exactly_the_closure(rows: list[Entry]) -> None:
    said = licenses.differences(DOC.read_text(encoding="utf-8"), rows)
    assert not said, "regenerate it: .venv/bin/python scripts/licenses.py\n" + "\n".join(said)


def test_the_closure_holds_every_runtime_requirement_and_no_extra(
    rows: list[Entry],
) -> None:
    names = {row.name for row in rows}
    direct = {canonicalize_name(r.name) for r in licenses.runtime_requirements()}
    assert direct <= names
    # the test and resolver extras' distributions are installed here, but not the image's
    assert not {"pytest", "hypothesis", "pymilvus", "mypy"} & names


def test_no_licence_is_unknown_unless_the_doc_says_it(
    rows: list[Entry],
) -> None:
    table = licenses.parse(DOC.read_text(encoding="utf-8"))
    unknown = [
        row.name
        for row in rows
        if row.licence == licenses.UNKNOWN
        and table.get(row.name, ("", licenses.UNKNOWN))[1] in ("", licenses.UNKNOWN)
    ]
    assert not unknown, f"no licence in their metadata, and docs/licenses.md says none: {unknown}"


def test_every_licence_that_is_not_permissive_is_named_in_the_doc(
    rows: list[Entry],
) -> None:
    section = _section(DOC.read_text(encoding="utf-8"), "Licences that are not permissive")
    named = set(re.findall(r"^- `([^`]+)`", section, re.M))
    kinds = {row.name: licenses.not_permissive(row.licence) for row in rows}
    flagged = {name: kind for name, kind in kinds.items() if kind is not None}
    assert named == set(flagged), f"flagged: {flagged}"
    strong = sorted(name for name, kind in flagged.items() if "GPL" in kind)
    if strong:  # then the section must not open by saying there is none
        assert "No distribution observer requires is under the GPL" not in section, strong


# -- the requirement walk -------------------------------------------------------------------------


def _distributions(
    tmp_path: Path, specs: dict[str, list[str]]
) -> Callable[[str], metadata.Distribution]:
    """Installed-looking distributions: name -> its Requires-Dist lines."""
    found: dict[str, metadata.Distribution] = {}
    for name, requires in specs.items():
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        lines = ["Metadata-Version: 2.4", f"Name: {name}", "Version: 1.0"]
        lines += [f"Requires-Dist: {line}" for line in requires]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
        found[canonicalize_name(name)] = metadata.PathDistribution(info)

    def distribution(name: str) -> metadata.Distribution:
        try:
            return found[canonicalize_name(name)]
        except KeyError:
            raise metadata.PackageNotFoundError(name) from None

    return distribution


def test_the_walk_follows_markers_and_the_extras_asked_for(tmp_path: Path) -> None:
    distribution = _distributions(
        tmp_path,
        {
            "Top_Level": [
                "leaf",
                "only-with-extra; extra == 'fast'",
                "never; python_version < '3'",
                "Needs.Extra[Fast]",
            ],
            "leaf": [],
            "needs-extra": ["leaf", "only-with-extra; extra == 'fast'"],
            "only-with-extra": [],
            "never": [],
        },
    )
    roots = [Requirement("top-level"), Requirement("test-only; extra == 'test'")]
    found = licenses.closure(roots, distribution)
    # top-level's own `extra ==` line is skipped; needs-extra's, asked for with [fast], is not
    assert set(found) == {"top-level", "leaf", "needs-extra", "only-with-extra"}


def test_a_distribution_asked_again_with_an_extra_is_walked_again(tmp_path: Path) -> None:
    distribution = _distributions(
        tmp_path,
        {"a": ["shared"], "b": ["shared[more]"], "shared": ["more; extra == 'more'"], "more": []},
    )
    found = licenses.closure([Requirement("a"), Requirement("b")], distribution)
    assert set(found) == {"a", "b", "shared", "more"}


def test_a_requirement_not_installed_is_named(tmp_path: Path) -> None:
    distribution = _distributions(tmp_path, {"a": ["missing-one>=2"]})
    with pytest.raises(licenses.LicencesError, match="missing-one"):
        licenses.closure([Requirement("a")], distribution)


# -- where a licence is read from ---------------------------------------------------------------


def _meta(tmp_path: Path, *lines: str, body: str = "") -> metadata.PackageMetadata:
    info = tmp_path / "x-1.0.dist-info"
    info.mkdir()
    text = "\n".join(["Metadata-Version: 2.4", "Name: x", "Version: 1.0", *lines]) + "\n"
    (info / "METADATA").write_text(text + ("\n" + body if body else ""))
    return metadata.PathDistribution(info).metadata


MIT = "Classifier: License :: OSI Approved :: MIT License"
APACHE = "Classifier: License :: OSI Approved :: Apache Software License"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            ("License-Expression: MIT OR Apache-2.0", "License: BSD", MIT),
            ("MIT OR Apache-2.0", "License-Expression"),
        ),
        (("License: BSD-3-Clause", MIT), ("BSD-3-Clause", "License")),
        (("License: UNKNOWN", MIT), ("MIT", "classifier")),
        (
            ("License: Copyright (c) 2020 Someone\n        Permission is hereby granted", APACHE),
            ("Apache-2.0", "classifier"),
        ),
        ((MIT, APACHE), ("MIT, Apache-2.0", "classifiers")),
        (("Classifier: License :: OSI Approved :: BSD License",), ("BSD License", "classifier")),
        (("Classifier: License :: OSI Approved",), ("UNKNOWN", "none")),
        ((), ("UNKNOWN", "none")),
    ],
    ids=[
        "expression",
        "license",
        "unknown-field",
        "license-text",
        "two-classifiers",
        "bsd",
        "osi-only",
        "none",
    ],
)
def test_the_licence_is_read_in_order(
    lines: tuple[str, ...], expected: tuple[str, str], tmp_path: Path
) -> None:
    assert licenses.licence_of(_meta(tmp_path, *lines)) == expected


@pytest.mark.parametrize(
    ("licence", "kind"),
    [
        ("MIT", None),
        ("Apache-2.0 OR BSD-2-Clause", None),
        ("PSF-2.0", None),
        ("GPL-3.0-or-later", "GPL"),
        ("GNU General Public License v2 (GPLv2)", "GPL"),
        ("LGPL-2.1-only", "LGPL"),
        ("GNU Lesser General Public License v3 (LGPLv3)", "LGPL"),
        ("AGPL-3.0-only", "AGPL"),
        ("MPL-2.0 AND (Apache-2.0 OR MIT)", "MPL"),
    ],
)
def test_what_is_not_permissive(licence: str, kind: str | None) -> None:
    found = licenses.not_permissive(licence)
    assert (found.split()[0].split("/")[0] if found else None) == kind


# -- --check -------------------------------------------------------------------------------------


def _doc(table: str) -> str:
    return f"# x\n\n{licenses.BEGIN}\n{table}\n{licenses.END}\n\nmore\n"


def _entry(name: str, licence: str, version: str = "1.0") -> Entry:
    source = "none" if licence == licenses.UNKNOWN else "License-Expression"
    return licenses.Entry(canonicalize_name(name), version, licence, source)


def test_check_compares_names_and_licences_not_versions() -> None:
    doc = _doc(licenses.render([_entry("a", "MIT", "1.0"), _entry("b", "MIT"), _entry("c", "MIT")]))
    now = [_entry("a", "MIT", "9.9"), _entry("b", "GPL-3.0-only"), _entry("d_new", "MIT")]
    assert licenses.differences(doc, now) == [
        "d-new: in the closure, missing from the table",
        "c: in the table, not in the closure",
        "b: the table says 'MIT', its metadata 'GPL-3.0-only'",
    ]
    assert (
        licenses.differences(doc, [_entry("A", "MIT"), _entry("B", "MIT"), _entry("C", "MIT")])
        == []
    )


def test_an_unknown_licence_is_the_docs_to_say(tmp_path: Path) -> None:
    rows = [_entry("a", licenses.UNKNOWN)]
    assert licenses.differences(_doc(licenses.render(rows)), rows) == [
        "a: its metadata names no licence and the table says none"
    ]
    path = tmp_path / "licenses.md"
    path.write_text(
        _doc(licenses.render(rows)).replace("| UNKNOWN |", "| MIT (its LICENSE file) |")
    )
    assert licenses.differences(path.read_text(), rows) == []
    licenses.write(path, rows)  # regenerating keeps what the doc said
    assert "| a | 1.0 | MIT (its LICENSE file) |" in path.read_text()
    assert path.read_text().endswith(f"{licenses.END}\n\nmore\n")


def test_check_exits_1_naming_what_differs(
    rows: list[Entry], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "licenses.md"
    path.write_text(_doc(licenses.render([*rows[1:], _entry("not-a-dependency", "MIT")])))
    assert licenses.main(["--check", "--doc", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{rows[0].name}: in the closure, missing from the table" in err
    assert "not-a-dependency: in the table, not in the closure" in err
    path.write_text(_doc(licenses.render(rows)))
    assert licenses.main(["--check", "--doc", str(path)]) == 0


def test_a_doc_without_the_table_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "licenses.md"
    path.write_text("# nothing\n")
    assert licenses.main(["--check", "--doc", str(path)]) == 2
