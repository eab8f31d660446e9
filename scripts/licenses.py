"""The licences of what observer's container image ships, from the installed metadata.

The distributions are the closure of observer's runtime requirements: the `dependencies` of
pyproject.toml (what the wheel's Requires-Dist says, without its `extra ==` ones), then each
one's own Requires-Dist, its markers evaluated for this Python (with `extra` set to the extras
that were asked of it), and so on. Each is looked up in the environment this runs in
(`importlib.metadata`), so run it with the virtualenv observer is installed in.

    python scripts/licenses.py           # rewrite the table in docs/licenses.md
    python scripts/licenses.py --check   # exit 1, naming what differs, when the table is stale

A licence is the metadata's License-Expression, else its License field (when it is a name,
not a whole licence text), else its `License ::` classifiers. `--check` compares the table's
names and licences with the closure's, not versions: they differ from machine to machine.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
DOC = ROOT / "docs" / "licenses.md"

BEGIN = "<!-- scripts/licenses.py writes the table below; edit it there, not here -->"
END = "<!-- end of the table scripts/licenses.py writes -->"
HEADER = ("Distribution", "Version", "Licence", "From")
UNKNOWN = "UNKNOWN"

# The `License ::` classifiers whose licence has one SPDX identifier. Others (`BSD License`
# says which BSD licence no more than `OSI Approved` does) are kept as they are written.
CLASSIFIER_SPDX = {
    "Apache Software License": "Apache-2.0",
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "ISC License (ISCL)": "ISC",
    "Python Software Foundation License": "PSF-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
    "Zero-Clause BSD (0BSD)": "0BSD",
    "GNU Affero General Public License v3": "AGPL-3.0-only",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0-only",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
}

# Licences that are not permissive, strongest first: the first family a licence names is its
# kind. `\bGPL` does not match inside LGPL or AGPL.
NOT_PERMISSIVE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("AGPL (network copyleft)", re.compile(r"\bAGPL|Affero", re.IGNORECASE)),
    ("GPL (copyleft)", re.compile(r"\bGPL|GNU General Public", re.IGNORECASE)),
    ("LGPL (weak copyleft)", re.compile(r"\bLGPL|GNU Lesser|GNU Library", re.IGNORECASE)),
    (
        "MPL/EPL/CDDL (file-level weak copyleft)",
        re.compile(r"\bMPL|Mozilla Public|\bEPL|Eclipse Public|\bCDDL", re.IGNORECASE),
    ),
)


class LicencesError(Exception):
    """The closure cannot be made (a requirement is not installed) or the doc has no table."""


@dataclass(frozen=True)
class Entry:
    """One distribution of the closure: its canonical name, version and licence."""

    name: NormalizedName
    version: str
    licence: str
    source: str  # where the licence was read: License-Expression, License, classifier(s), none


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[Requirement]:
    """observer's runtime requirements, as its wheel's Requires-Dist will list them."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [Requirement(line) for line in project["dependencies"]]


def applies(requirement: Requirement, extras: Iterable[str] = ()) -> bool:
    """Whether a requirement holds here: its markers for this Python, and an `extra ==` one
    only for an extra that was asked for (none, for observer's own)."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))


def closure(
    requirements: Iterable[Requirement],
    distribution: Callable[[str], metadata.Distribution] = metadata.distribution,
) -> dict[NormalizedName, metadata.Distribution]:
    """Every distribution the requirements pull in, by canonical name, walked through the
    installed metadata. A distribution asked for again with new extras is walked again."""
    found: dict[NormalizedName, metadata.Distribution] = {}
    extras: dict[NormalizedName, set[str]] = {}
    todo = [r for r in requirements if applies(r)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        asked = {canonicalize_name(e) for e in requirement.extras}
        if name in found and asked <= extras[name]:
            continue
        if name not in found:
            try:
                found[name] = distribution(requirement.name)
            except metadata.PackageNotFoundError:
                raise LicencesError(
                    f"{requirement.name} is required ({requirement}) but not installed here: "
                    "run this with the virtualenv observer is installed in"
                ) from None
            extras[name] = set()
        extras[name] |= asked
        for line in found[name].requires or []:
            dependency = Requirement(line)
            if applies(dependency, extras[name]):
                todo.append(dependency)
    return found


def _field(meta: metadata.PackageMetadata, key: str) -> str:
    values = meta.get_all(key) or []
    return str(values[0]).strip() if values else ""


def licence_of(meta: metadata.PackageMetadata) -> tuple[str, str]:
    """(licence, where it was read) from one distribution's metadata."""
    expression = _field(meta, "License-Expression")
    if expression:
        return expression, "License-Expression"
    text = _field(meta, "License")
    # Some put the licence's whole text in License: not a name, so look further.
    if text and text.upper() != UNKNOWN and "\n" not in text and len(text) <= 80:
        return text, "License"
    classifiers = [
        str(c).split(" :: ")[-1]
        for c in meta.get_all("Classifier") or []
        if str(c).startswith("License ::") and str(c).split(" :: ")[-1] != "OSI Approved"
    ]
    if classifiers:
        names = ", ".join(CLASSIFIER_SPDX.get(c, c) for c in classifiers)
        return names, "classifier" if len(classifiers) == 1 else "classifiers"
    return UNKNOWN, "none"


def entries(found: Mapping[NormalizedName, metadata.Distribution]) -> list[Entry]:
    """The closure as the table's rows, sorted by name."""
    rows = []
    for name in sorted(found):
        licence, source = licence_of(found[name].metadata)
        rows.append(Entry(name, found[name].version, licence, source))
    return rows


def image_entries(pyproject: Path = PYPROJECT) -> list[Entry]:
    """The rows for what the image ships besides observer and the base image."""
    return entries(closure(runtime_requirements(pyproject)))


def not_permissive(licence: str) -> str | None:
    """The kind of a licence that is not permissive (GPL, LGPL, ...), None for a permissive
    one. A licence offering a permissive choice (`MIT OR GPL-2.0`) is flagged all the same:
    the doc says why it is fine."""
    for kind, pattern in NOT_PERMISSIVE:
        if pattern.search(licence):
            return kind
    return None


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


def render(rows: Iterable[Entry], keep: Mapping[NormalizedName, str] | None = None) -> str:
    """The Markdown table. `keep`: the doc's licences, by name, kept for a distribution whose
    metadata names none (the doc then says what it is)."""
    keep = keep or {}
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        licence, source = row.licence, row.source
        if licence == UNKNOWN and keep.get(row.name, UNKNOWN) != UNKNOWN:
            licence, source = keep[row.name], "docs/licenses.md (the metadata names none)"
        cells = (row.name, row.version, licence, source)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _table_block(doc: str) -> tuple[int, int]:
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise LicencesError(f"the doc has no table between {BEGIN!r} and {END!r}")
    return start + len(BEGIN), end


def parse(doc: str) -> dict[NormalizedName, tuple[str, str]]:
    """The doc's table: (version, licence) by canonical name."""
    start, end = _table_block(doc)
    table: dict[NormalizedName, tuple[str, str]] = {}
    for line in doc[start:end].splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace(r"\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) < 3 or tuple(cells) == HEADER or set(cells[0]) <= set("-: "):
            continue
        table[canonicalize_name(cells[0])] = (cells[1], cells[2])
    return table


def differences(doc: str, rows: Iterable[Entry]) -> list[str]:
    """What the doc's table says otherwise than the closure: names, then licences. A licence
    the metadata does not give is the doc's to say, as long as it says one."""
    table = parse(doc)
    want = {row.name: row for row in rows}
    said = []
    for name in sorted(want.keys() - table.keys()):
        said.append(f"{name}: in the closure, missing from the table")
    for name in sorted(table.keys() - want.keys()):
        said.append(f"{name}: in the table, not in the closure")
    for name in sorted(want.keys() & table.keys()):
        licence, documented = want[name].licence, table[name][1]
        if licence == UNKNOWN:
            if documented in ("", UNKNOWN):
                said.append(f"{name}: its metadata names no licence and the table says none")
        elif documented != licence:
            said.append(f"{name}: the table says {documented!r}, its metadata {licence!r}")
    return said


def write(doc_path: Path, rows: list[Entry]) -> None:
    """Replace the table in the doc, keeping the doc's word on licences the metadata lacks."""
    doc = doc_path.read_text(encoding="utf-8")
    start, end = _table_block(doc)
    keep = {name: licence for name, (_, licence) in parse(doc).items()}
    table = render(rows, keep)
    doc_path.write_text(f"{doc[:start]}\n{table}\n{doc[end:]}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--doc", type=Path, default=DOC, help="default: docs/licenses.md")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    try:
        rows = image_entries(args.pyproject)
        if args.check:
            said = differences(args.doc.read_text(encoding="utf-8"), rows)
            for line in said:
                print(f"{args.doc}: {line}", file=sys.stderr)
            if said:
                print("regenerate it: .venv/bin/python scripts/licenses.py", file=sys.stderr)
                return 1
            print(f"{args.doc}: the table lists the closure's {len(rows)} distributions")
            return 0
        write(args.doc, rows)
    except LicencesError as error:
        print(f"licenses.py: {error}", file=sys.stderr)
        return 2
    print(f"{args.doc}: {len(rows)} distributions")
    for row in rows:
        kind = not_permissive(row.licence)
        if kind:
            print(f"  not permissive: {row.name} ({row.licence}): {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
