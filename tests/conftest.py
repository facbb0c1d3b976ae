"""Fixtures: a real vault home on real SQLite and real PostgreSQL, same tests for both.

PostgreSQL is required: when it is unreachable the PostgreSQL half of the suite fails
(it is never skipped silently). Set TOOLKIT_VAULT_TEST_POSTGRES_URL to point elsewhere.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.models import Base
from toolkit_vault.service import Vault
from toolkit_vault.settings import VaultSettings, load_settings

PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))  # the test plugins' dist-info makes their entry points real
SPEC_PLUGINS = PLUGINS / "spec_dist"  # a separate distribution, installed only where asked

POSTGRES_URL = os.environ.get(
    "TOOLKIT_VAULT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A scratch database for this test run, dropped at the end."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:
        pytest.fail(f"PostgreSQL is required for the test suite and unreachable: {exc}")
    name = f"tkv_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _empty_postgres(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        exists = conn.execute(text("select to_regclass('alembic_version')")).scalar()
        if exists:
            tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {tables} CASCADE"))
    engine.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> str:
    """The scratch PostgreSQL database with its tables emptied (PostgreSQL-only tests)."""
    _empty_postgres(postgres_url)
    return postgres_url


@pytest.fixture
def plugins_path() -> Path:
    return PLUGINS


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"
    url: str = request.getfixturevalue("postgres_url")
    _empty_postgres(url)
    return url


@pytest.fixture
def empty_database_url(database_url: str) -> str:
    """A database with no tables at all (PostgreSQL: the scratch schema is recreated)."""
    if database_url.startswith("postgresql"):
        engine = create_engine(database_url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()
    return database_url


@pytest.fixture
def home(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> VaultSettings:
    """An initialized vault home with a file master key."""
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", database_url)
    monkeypatch.delenv("TOOLKIT_VAULT_KEY_PROVIDER", raising=False)
    monkeypatch.delenv("TOOLKIT_VAULT_MASTER_KEYS", raising=False)
    init_vault(load_settings("file"))
    return load_settings()


@pytest.fixture
def vault(home: VaultSettings) -> Iterator[Vault]:
    opened = open_vault(home)
    yield opened
    opened.store.engine.dispose()


@pytest.fixture
def spec_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault opened with the spec-shaped plugin distribution installed (this test only)."""
    monkeypatch.syspath_prepend(str(SPEC_PLUGINS))
    opened = open_vault(home)
    yield opened
    opened.store.engine.dispose()


@pytest.fixture
def cli_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    """Environment for `toolkit-vault` subprocesses on the `home` fixture's home and database,
    with the test plugins installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")])
    env["TOOLKIT_VAULT_HOME"] = str(tmp_path / "home")
    env["TOOLKIT_VAULT_DATABASE_URL"] = database_url
    return env


@pytest.fixture
def spec_cli_env(cli_env: dict[str, str]) -> dict[str, str]:
    """`cli_env` with the spec-shaped plugin distribution installed as well."""
    return {**cli_env, "PYTHONPATH": os.pathsep.join([str(SPEC_PLUGINS), cli_env["PYTHONPATH"]])}
