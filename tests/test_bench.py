"""The benchmark harness itself, on a tiny scale: `python -m benchmarks` runs a scenario on
SQLite and PostgreSQL (scratch database created and dropped), prints the table and writes
the Markdown report, including the profile of a missed target."""

from __future__ import annotations

import json
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


def test_tiny_cli_scenario_times_the_console_script_against_importing_click(
    tmp_path: Path,
) -> None:
    """`--only cli` opens no database, so it runs without PostgreSQL (here: unreachable)."""
    report = tmp_path / "BENCH.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["TOOLKIT_VAULT_BENCH_POSTGRES_URL"] = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    command = [sys.executable, "-m", "benchmarks", "--scale", "tiny", "--only", "cli"]
    done = subprocess.run(
        [*command, "--write", str(report)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text_ = report.read_text()
    for case in ("toolkit-vault version", "toolkit-vault --help"):
        row = re.search(
            rf"\| cli \| - \| {case} \(3 runs\) \| ms \| ([\d.,]+) \| "
            r"python -c 'import click' \| ([\d.,]+) \| ([\d.]+)x \| <= 3x \|",
            text_,
        )
        assert row is not None, case
        ours, baseline, ratio = (float(n.replace(",", "")) for n in row.groups())
        assert ours > 0 and baseline > 0 and ratio == pytest.approx(ours / baseline, rel=0.02)


def test_tiny_http_scenario_measures_ours_against_the_noop(tmp_path: Path) -> None:
    """The real `serve` and the no-op, driven by wrk and the compiled wsload: the http
    table (throughput, p50/p99, server CPU per request, ratio) and its plot are written."""
    report = tmp_path / "BENCH.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    command = [sys.executable, "-m", "benchmarks", "--scale", "tiny", "--only", "http"]
    command += ["--databases", "sqlite", "--no-profile", "--write", str(report)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text_ = report.read_text()
    for request in ("HTTP list", "HTTP configure", "WebSocket list", "WebSocket configure"):
        for conns in (1, 16):
            row = re.search(rf"\| sqlite \| {request} \| {conns} \| ([\d,]+) \| ([\d,]+) \|", text_)
            assert row is not None, (request, conns)
            assert all(int(n.replace(",", "")) > 0 for n in row.groups())
    assert "![HTTP throughput against connections](BENCH-http.png)" in text_
    assert (tmp_path / "BENCH-http.png").read_bytes().startswith(b"\x89PNG")


def test_load_generators_refuse_a_run_with_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose answers are errors (here: a token the server does not know) is refused,
    never reported as throughput."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.harness import open_bench_vault
    from benchmarks.loadgen import build_wsload, run_wrk, run_wsload
    from benchmarks.servers import vault_server
    from benchmarks.toolkit import bench_registry, install_entry_point

    home, url = tmp_path / "home", f"sqlite:///{tmp_path / 'vault.db'}"
    open_bench_vault(home, url, bench_registry(1)).store.engine.dispose()
    plugins = install_entry_point(tmp_path / "plugins")
    wsload = build_wsload(tmp_path)
    stranger = ["tkv_" + "A" * 43]
    with vault_server(home, url, plugins, tmp_path / "serve.log") as server:
        list_ = '{"type":"toolkit/list/req"}'
        with pytest.raises(RuntimeError, match="wrk saw errors"):
            run_wrk(server.port, stranger, ["no-session"], list_, 2, 1, tmp_path)
        with pytest.raises(RuntimeError, match="wsload saw errors"):
            run_wsload(wsload, server.port, stranger, None, list_, 1, 2, 0.25, tmp_path)


def test_a_short_soak_stores_every_accepted_configure_once() -> None:
    """`scripts/soak` at a tiny scale: its own vault and server, agents on both transports;
    every configure it counts as accepted is in the history, and the audit chain verifies."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    command = [sys.executable, str(ROOT / "scripts" / "soak.py"), "--json"]
    command += ["--clients", "2", "--duration", "1"]  # its least: one agent on each transport
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["errors"] == {} and summary["lost"] == 0 and summary["audit_verifies"]
    assert summary["accepted"] == summary["stored"] > 0
    assert summary["latency"]["list"]["n"] > 0


def test_a_rewritten_report_keeps_its_section_kept_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.report import KEPT_BY_HAND, write

    path = tmp_path / "BENCHMARKS.md"
    write(path, "# Benchmarks\n\nfirst run\n")
    assert path.read_text() == "# Benchmarks\n\nfirst run\n"
    path.write_text(path.read_text() + f"\n{KEPT_BY_HAND}\n\npaired: 1.05x\n")
    write(path, "# Benchmarks\n\nsecond run\n")
    assert path.read_text() == f"# Benchmarks\n\nsecond run\n\n{KEPT_BY_HAND}\n\npaired: 1.05x\n"
