"""The benchmark harness itself, on a tiny scale: `python -m benchmarks` runs a scenario on
SQLite and PostgreSQL (scratch database created and dropped), prints the table and writes
the Markdown report, including the profile of a missed target."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get(
    "TOOLKIT_VAULT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _bench_databases() -> set[str]:
    engine = create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            return set(
                conn.execute(
                    text("select datname from pg_database where datname like 'tkv_bench_%'")
                ).scalars()
            )
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_tiny_rotation_scenario_prints_the_table_and_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "BENCH.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["TOOLKIT_VAULT_BENCH_POSTGRES_URL"] = POSTGRES_URL
    command = [sys.executable, "-m", "benchmarks", "--scale", "tiny", "--only", "rotation"]
    done = subprocess.run(
        [*command, "--write", str(report)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for database in ("sqlite", "postgres"):
        assert re.search(rf"rotation +│ {database}", done.stdout)
    assert "MultiFernet.rotate" in done.stdout
    text_ = report.read_text()
    assert "## Machine" in text_ and "| PostgreSQL |" in text_
    assert "| rotation | sqlite | 50 versions | versions/s |" in text_
    assert "| rotation master key | postgres | 200 vs 5 versions | ms |" in text_
    assert "![rotation.png](benchmarks/rotation.png)" in text_
    assert (tmp_path / "benchmarks" / "rotation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| rotation memory | postgres | peak at 200 vs 50 | MiB |" in text_
    assert "rotate_vault_key" in text_  # the tiny sizes miss targets: their profile is there
    created = set(re.findall(r"scratch database (tkv_bench_[0-9a-f]{12})", done.stderr))
    assert len(created) == 4  # on PostgreSQL: 3 sizes, then the profile of the miss
    assert not created & _bench_databases()  # every one was dropped


def test_unknown_scenario_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown scenario" in done.stderr
