"""The barrier (issue 49) covers every room: import-linter's "only store/ imports
SQLAlchemy" contract names its source modules one by one, so a module added beside the
others (as `actors` and `installed` were) would be outside it unless this test notices."""

from __future__ import annotations

import tomllib
from pathlib import Path

import toolkit_vault

ROOT = Path(__file__).resolve().parent.parent


def test_the_sqlalchemy_barrier_names_every_module_but_the_stores() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    barrier = next(
        c for c in contracts["contracts"] if c["name"] == "only store/ imports SQLAlchemy"
    )
    package = Path(toolkit_vault.__file__).parent
    rooms = {
        f"toolkit_vault.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert set(barrier["source_modules"]) == rooms - {"toolkit_vault.store"}
    assert set(barrier["forbidden_modules"]) == {"sqlalchemy", "alembic"}
    assert "ignore_imports" not in barrier  # no exception list
