"""The package as a user installs it, and the lock the scripts install from.

`test_the_wheel_works_alone` builds the wheel from a copy of the sources, installs it with
its dependencies (pinned by requirements/lock.txt, from pip's cache) into a new virtual
environment, and from there runs `init` (file key provider, a new home), a configure of the
built-in `filesystem` toolkit over `stdio`, and `check`: nothing of this checkout is on that
environment's path, so a file the wheel lacks (as `migrations/` once was) fails it. It needs
no database fixture and runs once (marked `wheel`: `-m "not wheel"` leaves it out).

The other two are quick: every package under service/ (and migrations/) is listed in
pyproject.toml, which names its packages instead of finding them; and every distribution
this environment installed for the project is the version the lock pins.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "wire_examples.json").read_text())
CONFIGURE_REQ = json.loads(VECTORS["messages"][2]["json"])  # the spec's, on `filesystem`
SKIPPED = ("__pycache__",)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if found:
            pins[_normal(found[1])] = found[2]
    return pins


def _source_packages() -> dict[str, Path]:
    """Every directory the wheel must carry, by its package name, after package-dir."""
    packages = {}
    for name, where in SETUPTOOLS["package-dir"].items():
        top = ROOT / where
        for folder in [top, *sorted(p for p in top.rglob("*") if p.is_dir())]:
            relative = folder.relative_to(top).parts
            if any(part in SKIPPED or part.endswith(".egg-info") for part in relative):
                continue
            if not any(entry.name not in SKIPPED for entry in folder.iterdir()):
                continue  # a package that is gone, its bytecode left behind
            dotted = ".".join(filter(None, (name, *relative)))
            if dotted:
                packages[dotted] = folder
    return packages


def test_every_package_is_listed() -> None:
    """pyproject.toml lists its packages (`packages.find` cannot map migrations/ into the
    package): a package added under service/ must be added there too, or the wheel lacks it."""
    listed = set(SETUPTOOLS["packages"])
    found = set(_source_packages())
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "pyproject.toml lists packages that are gone"
    assert SETUPTOOLS["package-dir"]["toolkit_vault._migrations"] == "migrations"


def test_the_lock_pins_what_is_installed() -> None:
    """Every distribution the project (with the extras this environment has) requires, at
    any depth, is pinned in requirements/lock.txt at the version installed here: a
    dependency added to pyproject.toml without `scripts/lock` fails here."""
    pins = _pins()
    project = metadata.distribution("toolkit-vault")
    extras = {"dev"} if "dev" in (project.metadata.get_all("Provides-Extra") or []) else set()
    wanted: list[tuple[str, frozenset[str]]] = [("toolkit-vault", frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    wrong = []
    while wanted:
        name, asked = wanted.pop()
        if (name, asked) in seen:
            continue
        seen.add((name, asked))
        dist = metadata.distribution(name)
        if name != "toolkit-vault" and pins.get(name) != dist.version:
            wrong.append(f"{name} {dist.version} installed, {pins.get(name, 'not')} pinned")
        for text in dist.requires or []:
            req = Requirement(text)
            environments = [{"extra": extra} for extra in asked or {""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in environments):
                wanted.append((_normal(req.name), frozenset(req.extras)))
    assert wrong == [], (
        "this environment is not the lock's: pyproject.toml changed without `scripts/lock`, or "
        "the environment was not installed from the lock (scripts/_venv does that)"
    )


def _run(command: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=240, **kwargs
    )
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


def _copy_sources(to: Path) -> None:
    """What the wheel is built from, as in a fresh checkout (no bytecode, no egg-info): a
    build in this tree would write into it while others use it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, to / name)
    for name in ["service", *SETUPTOOLS["package-dir"].values()]:
        if name and not (to / name).exists():
            shutil.copytree(ROOT / name, to / name, ignore=ignore)


@pytest.mark.wheel
def test_the_wheel_works_alone(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--quiet"]
    source, dist, venv = tmp_path / "source", tmp_path / "dist", tmp_path / "venv"
    _copy_sources(source)
    _run([*pip, "wheel", "--no-deps", "--build-constraint", LOCK, "--wheel-dir", dist, source])
    (wheel,) = dist.glob("toolkit_vault-*.whl")

    # Every module and package-data file of the sources is in the wheel, migrations/ too.
    with zipfile.ZipFile(wheel) as built:
        carried = set(built.namelist())
    packages = _source_packages()
    expected = {(name, file) for name, folder in packages.items() for file in folder.glob("*.py")}
    for name, patterns in SETUPTOOLS["package-data"].items():
        expected |= {(name, f) for pattern in patterns for f in packages[name].glob(pattern)}
    missing = sorted(
        path
        for name, file in expected
        if (path := f"{name.replace('.', '/')}/{file.relative_to(packages[name])}") not in carried
    )
    assert missing == [] and "toolkit_vault/_migrations/env.py" in carried

    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    _run([*pip, "--python", python, "install", "--no-compile", "--constraint", LOCK, wheel])

    home = tmp_path / "home"
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "TOOLKIT_VAULT_HOME": str(home),
    }
    cli = venv / "bin" / "toolkit-vault"
    where = _run(
        [
            python,
            "-c",
            "import toolkit_vault.store.database as d; print(d.__file__, d.migrations())",
        ],
        env=env,
        cwd=tmp_path,
    ).stdout.split()
    site = str(venv / "lib")
    assert where[0].startswith(site) and where[1].startswith(site), where

    _run([cli, "init", "--key-provider", "file"], env=env, cwd=tmp_path)
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="tkv-wheel-") as root_dir:
        handshake = {"type": "handshake/req", "id": "h1", "capabilities": ["toolkits"]}
        configure = {**CONFIGURE_REQ, "session_id": "", "config": {"root_dir": root_dir}}
        lines = "".join(json.dumps(m) + "\n" for m in (handshake, configure))
        out = _run([cli, "stdio"], input=lines, env=env, cwd=tmp_path).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    assert answers[0]["type"] == "handshake/resp"
    configured = next(a for a in answers if a["type"] == "toolkit/configure/resp")
    assert (configured["req_id"], configured["status"]) == ("tk3", "ok"), configured

    checked = json.loads(_run([cli, "check", "--json"], env=env, cwd=tmp_path).stdout)
    assert checked["intact"] == 1, checked
