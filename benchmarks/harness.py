"""Shared machinery: scales, scratch databases, vaults, timing, statement counting, results."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from toolkit_vault.access.principals import Principal
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store import driver
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import ToolkitRegistry

__all__ = [
    "AGENT",
    "DATABASES",
    "SCALES",
    "Context",
    "Result",
    "Scale",
    "count_statements",
    "median",
    "open_bench_vault",
    "postgres_admin_url",
    "profile_top",
    "reachable",
    "safe_url",
    "scratch_database",
    "timed",
    "write_connection",
]

AGENT = Principal("local", "agent")
DATABASES = ("sqlite", "postgres")
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Scale:
    """How much work each scenario does; every figure is the median over `*_repeats`."""

    name: str
    configure_calls: int
    configure_repeats: int
    list_sessions: tuple[int, int]
    list_calls: int
    list_repeats: int
    rotation_sizes: tuple[int, int]
    rotation_repeats: int
    restart_repeats: int
    http_seconds: float
    http_repeats: int
    soak_clients: int
    soak_seconds: float
    master_repeats: int = 15  # a master rotation takes milliseconds: repeats steady its median


SCALES = {
    # rotation: 5 turns at full scale; a 10,000-version rotation takes a tenth of a second,
    # and with 3 its median still moved by a third between runs on this VM. http: 3 runs, so
    # the median is a run's, not the mean of two: a configure waits on fsync, and this VM's
    # disk now and then takes 100-270 ms for one (seen with strace), which made one run's
    # p99 five to ten times the other's
    "full": Scale("full", 300, 5, (100, 10_000), 100, 5, (10_000, 100_000), 5, 5, 5.0, 3, 50, 60),
    "quick": Scale("quick", 100, 3, (100, 10_000), 40, 3, (2_000, 6_000), 3, 3, 2.0, 1, 50, 10),
    # tiny: the harness's own test (tests/test_bench.py), a smoke check of every table and
    # report line, not a measurement: the least of each (wrk still runs whole seconds)
    "tiny": Scale("tiny", 10, 1, (5, 50), 5, 1, (50, 200), 1, 1, 0.25, 1, 2, 1, master_repeats=3),
}


@dataclass
class Result:
    """One line of the table: ours against one baseline, measured in the same run."""

    scenario: str
    database: str
    case: str
    unit: str
    ours: float
    baseline_name: str
    baseline: float
    ratio: float
    target: str = ""
    holds: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    scale: Scale
    work: Path
    databases: tuple[str, ...]
    postgres_url: str
    log: Callable[[str], None] = print

    @contextmanager
    def database(self, kind: str, directory: Path) -> Iterator[str]:
        with scratch_database(kind, directory, self.postgres_url) as url:
            if kind == "postgres":
                self.log(f"scratch database {make_url(url).database}")
            yield url


def postgres_admin_url() -> str:
    return os.environ.get(
        "TOOLKIT_VAULT_BENCH_POSTGRES_URL",
        os.environ.get("TOOLKIT_VAULT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )


@contextmanager
def scratch_database(database: str, directory: Path, admin_url: str) -> Iterator[str]:
    """A fresh database: SQLite in `directory`, or `tkv_bench_<random>` on the PostgreSQL
    server of `admin_url`, dropped on exit."""
    if database == "sqlite":
        directory.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{directory / 'vault.db'}"
        return
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"tkv_bench_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def reachable(url: str) -> bool:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def open_bench_vault(home: Path, url: str, registry: ToolkitRegistry) -> Vault:
    """`init` then `open` a vault home with a file master key, with exactly `registry`."""
    settings = VaultSettings(
        home=home,
        database_url=url,
        key_provider="file",
        vault_id=str(uuid.uuid4()),
        initialized=False,
    )
    init_vault(settings)
    return open_vault(dataclasses.replace(settings, initialized=True), registry)


@contextmanager
def write_connection(engine: Engine) -> Iterator[Any]:
    """A write transaction opened as the vault opens its own (SQLite: BEGIN IMMEDIATE)."""
    with engine.connect().execution_options(vault_write=True) as conn, conn.begin():
        yield conn


@contextmanager
def count_statements(store: Store) -> Iterator[list[int]]:
    """Counts every statement sent to the database (BEGIN and executemany count as one):
    those through SQLAlchemy by its `before_cursor_execute` event, SQLite's BEGIN (sent on
    the driver, `database._sqlite_on_begin`) by the `begin` event, and those the store
    sends on the driver directly (`Store.fetch`, the list's query; a write's prebuilt
    statements, `driver._OnDriver`) by wrapping them."""
    counter = [0]
    fetch, on_driver = store.fetch, driver._OnDriver.__call__

    def seen(*_: Any) -> None:
        counter[0] += 1

    def counted(*args: Any) -> Any:
        seen()
        return fetch(*args)

    def counted_on_driver(statement: Any, *args: Any) -> Any:
        seen()
        return on_driver(statement, *args)

    event.listen(store.engine, "before_cursor_execute", seen)
    sqlite = store.engine.dialect.name == "sqlite"
    if sqlite:
        event.listen(store.engine, "begin", seen)
    store.fetch = counted  # type: ignore[method-assign]
    driver._OnDriver.__call__ = counted_on_driver  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        del store.fetch
        driver._OnDriver.__call__ = on_driver  # type: ignore[method-assign]
        event.remove(store.engine, "before_cursor_execute", seen)
        if sqlite:
            event.remove(store.engine, "begin", seen)


def timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)


def profile_top(work: Callable[[], Any], limit: int = 18) -> list[str]:
    """Deterministic profile (cProfile, stdlib) of `work`: the vault's own functions and the
    database driver's calls, by cumulative time (a call tree's main branches, in order)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(work)
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = [
        (cumulative, calls, filename, line, name)
        for (filename, line, name), (_, calls, _own, cumulative, _callers) in stats.items()
        if "toolkit_vault" in filename or name in _DRIVER_CALLS
    ]
    rows.sort(reverse=True)
    lines = [f"{'cum s':>7} {'share':>6} {'calls':>8}  function"]
    for cumulative, calls, filename, line, name in rows[:limit]:
        where = _short(filename)
        label = f"{where}:{line} {name}" if where != "~" else name
        lines.append(f"{cumulative:7.3f} {cumulative / total:6.1%} {calls:8d}  {label}")
    return lines


_DRIVER_CALLS = {
    "<method 'commit' of 'sqlite3.Connection' objects>",
    "<method 'execute' of 'sqlite3.Cursor' objects>",
    "<method 'executemany' of 'sqlite3.Cursor' objects>",
    "wait",  # psycopg: waiting for the server (round trips, commits)
}


def _short(filename: str) -> str:
    for marker in ("site-packages/", "service/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename
