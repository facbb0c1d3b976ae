"""What the figures were measured on: CPU, cores, RAM, load, Python, SQLite, PostgreSQL."""

from __future__ import annotations

import os
import platform
import sqlite3
from importlib.metadata import version
from pathlib import Path

from sqlalchemy import create_engine, text

__all__ = ["describe"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _postgres(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                name: str(conn.execute(text(f"SHOW {name}")).scalar())
                for name in ("server_version", "fsync", "synchronous_commit", "shared_buffers")
            }
    finally:
        engine.dispose()


def describe(postgres_url: str | None) -> dict[str, str]:
    facts = {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "RAM": _ram(),
        "OS": f"{platform.system()} {platform.release()}",
        "load average (1 min) at start": f"{os.getloadavg()[0]:.2f}",
        "Python": platform.python_version(),
        "SQLite": sqlite3.sqlite_version,
        "SQLAlchemy": version("sqlalchemy"),
        "cryptography": version("cryptography"),
        "psycopg": version("psycopg"),
    }
    if postgres_url:
        pg = _postgres(postgres_url)
        facts["PostgreSQL"] = (
            f"{pg['server_version']} (fsync={pg['fsync']}, "
            f"synchronous_commit={pg['synchronous_commit']}, "
            f"shared_buffers={pg['shared_buffers']})"
        )
    return facts
