"""observer as users install it: the sdist and the wheel built from this tree (the wheel
from the sdist, as `python -m build` does), the wheel installed, not editable, in a fresh
virtualenv, and its commands run from there (the image installs that wheel: deploy/Dockerfile).

No test reaches the internet: the build runs without isolation on this environment's
setuptools, and the fresh virtualenv finds the dependencies in this environment's
site-packages through a .pth file, after its own (observer itself is only the wheel's;
the editable install's finder in there is never run). What the wheel declares is
checked apart: every distribution observer imports is among its requirements.
"""

from __future__ import annotations

import ast
import email
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path


def run(command: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        command, check=False, text=True, capture_output=True, timeout=300, **kw
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    tree = tmp_path_factory.mktemp("tree")
    # The files a clone has (and new ones not ignored): what git ignores is never built
    # from, and the build writes nothing into the working tree.
    listed = run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"])
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    done = run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("observer-*.tar.gz")
    (wheel,) = out.glob("observer-*.whl")
    return Built(sdist, wheel)


def test_the_sdist_holds_what_a_release_needs(built: Built) -> None:
    assert built.sdist.name == f"observer-{VERSION}.tar.gz"
    with tarfile.open(built.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    needed = {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "observer/cli.py",
        "observer/data/demo_traces.jsonl",
        "observer/data/demo_traffic.jsonl",
    }
    assert needed <= names, needed - names


def test_the_wheel_carries_its_data_licence_and_version(built: Built) -> None:
    assert built.wheel.name == f"observer-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        info = f"observer-{VERSION}.dist-info"
        metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    for needed in ("observer/data/demo_traces.jsonl", "observer/data/demo_traffic.jsonl",
                   "observer/py.typed", f"{info}/licenses/LICENSE"):  # fmt: skip
        assert needed in names, needed
    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "observer = observer.cli:main" in entry_points
    assert not any(n.startswith(("tests/", "bench/", "examples/")) for n in names)


def _declared(built: Built) -> set[str]:
    """The distributions the wheel requires at run time (no extra)."""
    with zipfile.ZipFile(built.wheel) as wheel:
        metadata = email.message_from_bytes(wheel.read(f"observer-{VERSION}.dist-info/METADATA"))
    found = set()
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None or "extra" not in str(requirement.marker):
            found.add(canonicalize_name(requirement.name))
    return found


def _imports_at_module_level(source: str) -> set[str]:
    """Modules imported where a module is loaded (not inside a function: those are the
    extras' lazy imports, e.g. a resolver's store client)."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        targets = [node]
        if isinstance(node, ast.Try | ast.If):
            targets = [*node.body]
        for each in targets:
            if isinstance(each, ast.Import):
                found.update(alias.name for alias in each.names)
            elif isinstance(each, ast.ImportFrom) and each.level == 0 and each.module:
                found.add(each.module)
                # `from opentelemetry import trace`: the module is the namespace's member.
                found.update(f"{each.module}.{alias.name}" for alias in each.names)
    return found


def _owner(module: str, files: dict[Path, str]) -> str | None:
    """The distribution whose files hold `module`; None for a name that is no module of
    its own (a class imported from one) or a namespace package (opentelemetry: its
    members are owned one by one)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return files.get(Path(spec.origin).resolve())


def test_every_distribution_observer_imports_is_declared(built: Built) -> None:
    """Imported directly, required directly: a distribution that only comes with another
    one leaves with it."""
    files = {
        Path(str(dist.locate_file(f))).resolve(): canonicalize_name(dist.metadata["Name"])
        for dist in distributions()
        for f in dist.files or ()
        if str(f).endswith(".py") or ".so" in str(f)
    }
    imported: set[str] = set()
    with zipfile.ZipFile(built.wheel) as wheel:
        for name in wheel.namelist():
            if name.endswith(".py"):
                imported |= _imports_at_module_level(wheel.read(name).decode())
    owners = {
        _owner(module, files)
        for module in imported
        if module.split(".")[0] not in sys.stdlib_module_names | {"observer", "__future__"}
    }
    third_party = {owner for owner in owners if owner is not None}
    assert len(third_party) > 10, "the scan finds observer's imports"
    assert third_party <= _declared(built), sorted(third_party - _declared(built))


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv with the wheel installed in it (not editable); its bin/."""
    venv = tmp_path_factory.mktemp("venv")
    done = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                "--no-index", "--no-compile", str(built.wheel)])  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "observer-test-dependencies.pth").write_text(
        "\n".join(sorted(ours)) + "\n"
    )
    yield venv / "bin"


def in_venv(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "PYTHON"))}
    return run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=env)


def test_the_installed_wheel_is_the_observer_that_runs(installed: Path, tmp_path: Path) -> None:
    where = in_venv(installed, "python", "-c", "import observer; print(observer.__file__)",
                    cwd=tmp_path)  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout
    shown = in_venv(installed, "observer", "--version", cwd=tmp_path)
    assert shown.stdout == f"observer, version {VERSION}\n"


def test_observer_demo_and_check_help_run_from_the_installed_wheel(
    installed: Path, tmp_path: Path
) -> None:
    demo = in_venv(installed, "observer", "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "scores" in demo.stdout and (tmp_path / "observer-demo.sqlite").exists()
    check = in_venv(installed, "observer", "check", "--help", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "Usage: observer check" in check.stdout
