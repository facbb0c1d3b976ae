"""backup: `backup create` and `backup verify` at the large rotation size (100,000 versions
at full scale) against what an operator would otherwise run on the same database, in the
same run: `sqlite3 FILE .backup` (SQLite's online backup API) and `pg_dump -Fc`.

The baselines copy pages or rows and check nothing; ours writes a portable, authenticated
file (every row re-encoded as JSON, one HMAC) and `verify` loads it into a scratch SQLite
database, walks the chain, checks every row MAC and opens every version in memory: the
ratio says what that costs, not that the baselines do the same work. A third line holds
`verify` to our own `create` of the same file (issue 53's line, 100,000 versions at full
scale; not judged at a smaller one, where fixed costs weigh most).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import partial
from pathlib import Path

from sqlalchemy.engine import make_url

from toolkit_vault.backup import create_backup, verify_backup
from toolkit_vault.settings import VaultSettings

from .fill import fill_versions
from .harness import Context, Result, median, open_bench_vault, timed
from .toolkit import bench_registry

__all__ = ["run"]

VERIFY_TARGET = 2.0  # issue 53: verifying a backup takes at most twice its making ...
VERIFY_AT = 100_000  # ... at this many versions (smaller ones are mostly fixed costs)


def _baseline(database: str, url: str, out: Path) -> tuple[str, list[str]]:
    if database == "sqlite":
        path = make_url(url).database or ""
        return "sqlite3 .backup", ["sqlite3", path, f".backup '{out}'"]
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return "pg_dump -Fc", ["pg_dump", "-Fc", "-f", str(out), plain]


def run(ctx: Context) -> list[Result]:
    count = ctx.scale.rotation_sizes[1]
    repeats = max(1, min(3, ctx.scale.rotation_repeats))
    results: list[Result] = []
    for database in ctx.databases:
        directory = ctx.work / f"backup-{database}"
        with ctx.database(database, directory / "db") as url:
            home = directory / "home"
            vault = open_bench_vault(home, url, bench_registry(1))
            try:
                fill_versions(vault, count)
            finally:
                vault.store.engine.dispose()
            settings = VaultSettings(home, url, "file", "bench", initialized=True)
            file = directory / "vault.tkvb"
            ctx.log(f"backup: {count:,} versions on {database}")
            make = partial(create_backup, settings, file)
            ours = median([timed(make) for _ in range(repeats)])
            checked = verify_backup(file, settings)
            check = partial(verify_backup, file, settings)
            verify = median([timed(check) for _ in range(repeats)])
            name, command = _baseline(database, url, directory / "baseline.dump")
            if shutil.which(command[0]) is None:
                ctx.log(f"backup: {command[0]} is not installed; no baseline on {database}")
                continue

            def dump(command: list[str] = command) -> None:
                subprocess.run(command, check=True, capture_output=True)

            baseline = median([timed(dump) for _ in range(repeats)])
            size = file.stat().st_size
            dumped = (directory / "baseline.dump").stat().st_size
            extra = {"bytes": size, "baseline_bytes": dumped, "versions_open": checked.versions}
            for case, value in (("create", ours), ("verify", verify)):
                results.append(
                    Result(
                        "backup",
                        database,
                        f"{case}, {count:,} versions",
                        "s",
                        value,
                        name,
                        baseline,
                        value / baseline if baseline else 0.0,
                        extra=extra,
                    )
                )
            results.append(
                Result(
                    "backup",
                    database,
                    f"verify against create, {count:,} versions",
                    "s",
                    verify,
                    "our own `backup create`",
                    ours,
                    verify / ours if ours else float("inf"),
                    f"<= {VERIFY_TARGET:g}x at {VERIFY_AT:,} versions",
                    verify <= VERIFY_TARGET * ours if count >= VERIFY_AT else None,
                )
            )
    return results
