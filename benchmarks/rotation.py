"""rotation: `keys rotate` (a new KEK, every wrapped DEK rewrapped in batches of 500 after
proving each value still decrypts) vs re-encrypting the same rows with `cryptography`'s
`MultiFernet.rotate`, read and written back in batches of 500 on the same engine; and, in
the same run, the I/O-only floor of any per-row rewrite (`rewrite_floor`: ours' reads and
writes, no crypto), reported as `rotation floor` against the same MultiFernet figure.

Speed is measured without tracing; peak memory in separate, untimed runs under
`tracemalloc` (Python heap allocations: what grows if rows were loaded whole).
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, MultiFernet
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    bindparam,
    insert,
    select,
    update,
)

from toolkit_vault.keys import provider_for
from toolkit_vault.models import ConfigVersion
from toolkit_vault.rotation import rotate_keys, version_batches, write_rewraps
from toolkit_vault.storage import Store

from .fill import fill_versions
from .harness import (
    Context,
    Result,
    median,
    open_bench_vault,
    profile_top,
    timed,
    write_connection,
)
from .toolkit import bench_config, bench_registry

__all__ = ["BATCH", "run"]

BATCH = 500
MIB = 1024 * 1024


class FernetTable:
    """The baseline's store: one row per version, the whole config as one Fernet token."""

    def __init__(self, engine: Engine, count: int) -> None:
        self.engine = engine
        metadata = MetaData()
        self.table = Table(
            "bench_fernet_configs",
            metadata,
            Column("id", Integer, primary_key=True),
            Column("token", LargeBinary, nullable=False),
        )
        metadata.create_all(engine)
        self.keys = [Fernet.generate_key()]
        first = Fernet(self.keys[0])
        with engine.begin() as conn:
            for start in range(0, count, 2000):
                conn.execute(
                    insert(self.table),
                    [
                        {"token": first.encrypt(json.dumps(bench_config(n)).encode())}
                        for n in range(start, min(count, start + 2000))
                    ],
                )

    def rotate(self) -> int:
        """A new primary key; every token re-encrypted under it (keyset-paginated)."""
        self.keys = [Fernet.generate_key(), self.keys[0]]
        multi = MultiFernet([Fernet(k) for k in self.keys])
        table, done, last_id = self.table, 0, 0
        write = (
            update(table).where(table.c.id == bindparam("b_id")).values(token=bindparam("b_token"))
        )
        while True:
            with self.engine.connect() as conn, conn.begin():
                rows = conn.execute(
                    select(table.c.id, table.c.token)
                    .where(table.c.id > last_id)
                    .order_by(table.c.id)
                    .limit(BATCH)
                ).all()
            if not rows:
                return done
            last_id = rows[-1].id
            params = [{"b_id": r.id, "b_token": multi.rotate(bytes(r.token))} for r in rows]
            with write_connection(self.engine) as conn:
                conn.execute(write, params)
            done += len(rows)


def rewrite_floor(store: Store) -> int:
    """The I/O-only floor of any per-row rewrap: `rotate_keys`' own reads (the same
    keyset-paginated batches of whole rows) and writes (the same compare-and-set `UPDATE`,
    one executemany per batch, each in the vault's retrying write transaction), with each
    row's `kek_id` and `wrapped_dek` written back unchanged: no crypto, no parsing."""
    # Ours selects `kek_id IS NOT NULL AND kek_id != <primary>`; the same shape, every row.
    where = ConfigVersion.kek_id.is_not(None) & (ConfigVersion.kek_id != "")
    done = 0
    for rows in version_batches(store, where, BATCH):
        updates = [(r.id, r.kek_id, r.wrapped_dek, r.kek_id, r.wrapped_dek) for r in rows]
        store.retrying(partial(write_rewraps, updates=updates))
        done += len(updates)
    return done


def peak_bytes(work: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(ctx: Context) -> list[Result]:
    results: list[Result] = []
    small, large = ctx.scale.rotation_sizes
    for database in ctx.databases:
        peaks: dict[tuple[str, int], int] = {}
        for size in (small, large):
            directory = ctx.work / f"rotation-{database}-{size}"
            with ctx.database(database, directory) as url:
                measured, peak = _measure(ctx, database, url, directory / "home", size)
            results += measured
            peaks.update({(name, size): value for name, value in peak.items()})
        ours = peaks[("ours", large)] / peaks[("ours", small)]
        fernet = peaks[("fernet", large)] / peaks[("fernet", small)]
        results += [
            Result(
                "rotation memory",
                database,
                f"peak at {large:,} vs {small:,}",
                "MiB",
                peaks[("ours", large)] / MIB,
                f"ours at {small:,}",
                peaks[("ours", small)] / MIB,
                ours,
                "<= 1.2x",
                ours <= 1.2,
            ),
            Result(
                "rotation memory",
                database,
                f"MultiFernet peak at {large:,} vs {small:,}",
                "MiB",
                peaks[("fernet", large)] / MIB,
                f"MultiFernet at {small:,}",
                peaks[("fernet", small)] / MIB,
                fernet,
            ),
        ]
    return results


def _measure(
    ctx: Context, database: str, url: str, home: Path, size: int
) -> tuple[list[Result], dict[str, int]]:
    ctx.log(f"rotation: {database}, filling {size:,} versions")
    vault = open_bench_vault(home, url, bench_registry(1))
    engine = vault.store.engine
    fill_versions(vault, size)
    fernet = FernetTable(engine, size)
    provider = provider_for("file", home, "")

    def ours() -> None:
        report = rotate_keys(vault.store, provider, batch_size=BATCH)
        if report.rewrapped != size or report.failed:
            raise RuntimeError(f"rotation rewrapped {report.rewrapped} of {size}")

    def theirs() -> None:
        if fernet.rotate() != size:
            raise RuntimeError("MultiFernet rotation missed rows")

    def floor() -> None:
        if rewrite_floor(vault.store) != size:
            raise RuntimeError("the rewrite floor missed rows")

    rates: dict[str, list[float]] = {"ours": [], "fernet": [], "floor": []}
    for repeat in range(ctx.scale.rotation_repeats):
        ctx.log(f"rotation: {database}, {size:,} versions, repeat {repeat + 1}")
        rates["ours"].append(size / timed(ours))
        rates["fernet"].append(size / timed(theirs))
        rates["floor"].append(size / timed(floor))
    peak = {"ours": peak_bytes(ours), "fernet": peak_bytes(theirs)}
    engine.dispose()
    rate = {name: median(runs) for name, runs in rates.items()}
    ratio = rate["ours"] / rate["fernet"]
    result = Result(
        "rotation",
        database,
        f"{size:,} versions",
        "versions/s",
        rate["ours"],
        "MultiFernet.rotate",
        rate["fernet"],
        ratio,
        ">= 10x",
        ratio >= 10,
        {"runs": rates, "peak_bytes": peak},
    )
    floor_result = Result(
        "rotation floor",
        database,
        f"{size:,} versions, rewrite without crypto",
        "versions/s",
        rate["floor"],
        "MultiFernet.rotate",
        rate["fernet"],
        rate["floor"] / rate["fernet"],
        extra={"runs": rates["floor"]},
    )
    return [result, floor_result], peak


def bound(results: list[Result]) -> str:
    """What bounds the missed rotation target, with this run's figures."""
    figures = []
    for result in results:
        if result.scenario in ("rotation", "rotation floor"):
            us = 1e6 / result.ours
            figures.append(
                f"{result.scenario} on {result.database} at {result.case}: {us:.0f} us a row "
                f"against MultiFernet's {1e6 / result.baseline:.0f} ({result.ratio:.2f}x)"
            )
    return _BOUND.format(figures="; ".join(figures))


_BOUND = """\
What bounds the ratio is the per-row rewrite itself, not our crypto. Both sides read every
row and write it back in batches of 500, and the `rotation floor` rows time that alone in the
same run: `rotate_keys`' own keyset-paginated reads and compare-and-set `UPDATE` executemany,
each row's wrapped DEK written back unchanged, no crypto and no parsing. In this run:
{figures}. A 10x target means a row in a tenth of MultiFernet's time, everything included,
while reading and rewriting a row with no crypto at all already costs about as much as
MultiFernet's whole rotation of it: the floor's ratio is the ceiling of any per-row rewrite,
ours or another. The design requires the per-row rewrite ("every wrapped DEK is rewrapped"),
so the target cannot hold; a hierarchy that rotates only an intermediate key would be O(1)
per rotation but is not the design.
Between the floor and ours is the work a rewrap has to do per row. Sampled separately
(py-spy, 10,000-row rotations, not this run): crypto 51-56% (HKDF 16-18%, AES-GCM about 10%:
four committing-AEAD operations, unwrap the DEK, decrypt and parse each of the 2 secrets to
prove the version intact before anything is written, wrap the DEK under the new KEK),
rebuilding the version's context from the row 21-24% (JSON, base64, and the RFC 8785 digest
of its public half that the wrapped DEK is bound to, 9-10%), the batch writes 10-17% and the
reads the rest. MultiFernet does one HMAC check + AES-CBC decrypt and one encrypt of a
~200-byte token. Rewrapping beats re-encrypting when payloads are large (its cost does not
grow with the secrets' size), not for configs of a few hundred bytes.
Fixed along the way: one `UPDATE` was built per row (SQLAlchemy construction cost more than
the row's crypto); it is now one prebuilt statement sent as an executemany per batch, with
the same compare-and-set on the old wrapped key. Trimmed since: the AAD encoding (a prebuilt
length packer) and the JSON decoding of each value, about 5% of the crypto, within this
machine's run-to-run noise. Not available: an AES-GCM object cached per KEK (each
envelope's AES key is HKDF(KEK, nonce), so there is none to cache without changing the
format). Kept by design: the decryption proof for every value (without it the crypto per row
would halve, but a rotation could rewrap a version whose values no longer decrypt)."""


def profile(ctx: Context, database: str) -> list[str]:
    """One `rotate_keys` of the small size under cProfile."""
    size = ctx.scale.rotation_sizes[0]
    directory = ctx.work / f"rotation-profile-{database}"
    with ctx.database(database, directory) as url:
        vault = open_bench_vault(directory / "home", url, bench_registry(1))
        fill_versions(vault, size)
        provider = provider_for("file", directory / "home", "")
        lines = profile_top(lambda: rotate_keys(vault.store, provider, batch_size=BATCH))
        vault.store.engine.dispose()
    return [f"rotate_keys of {size:,} versions on {database}", *lines]
