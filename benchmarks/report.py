"""The table (rich, on stdout) and BENCHMARKS.md, both from the same results."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .harness import Result, Scale
from .network_report import MEANING as NETWORK_MEANING
from .network_report import is_network, markdown_table, print_network, soak_table

__all__ = ["markdown", "print_table"]


def _num(value: float) -> str:
    if value == int(value) and value < 100:
        return str(int(value))
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _holds(result: Result) -> str:
    return {True: "yes", False: "**no**", None: "-"}[result.holds]


def _cells(result: Result) -> list[str]:
    return [
        result.scenario,
        result.database,
        result.case,
        result.unit,
        _num(result.ours),
        result.baseline_name,
        _num(result.baseline),
        f"{result.ratio:.2f}x",
        result.target or "-",
    ]


def print_table(results: Iterable[Result], title: str, console: Console | None = None) -> None:
    table = Table(title=title)
    for column in ("scenario", "db", "case", "unit"):
        table.add_column(column)
    table.add_column("ours", justify="right")
    table.add_column("baseline")
    table.add_column("baseline value", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target")
    table.add_column("holds")
    results = list(results)
    for result in results:
        if is_network(result):
            continue
        holds = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[result.holds]
        table.add_row(*_cells(result), holds)
    console = console or Console()
    if table.row_count:
        console.print(table)
    print_network(results, console)


PROFILE_HEADER = (
    "Profile of ours in this run (cProfile; the vault's functions and the database driver's "
    "waits by cumulative time, `share` of the profiled wall time; deterministic profiling "
    "inflates functions called very often):"
)

MEANING = """\
- **configure**: configs stored per second through the service API
  (`Connection.handle_raw` of a `toolkit/configure/req`): parse, schema-validate, split the
  2 secret fields, seal them (fresh DEK wrapped by the vault key, AES-256-GCM with key
  commitment), initialize the toolkit, then one write transaction that appends the
  version, moves the current pointer and extends the audit hash chain. The
  schema has 3 public and 2 secret fields; every call stores a distinct config.
  Baselines, same engine and same write transaction as the vault's (SQLite: WAL,
  `synchronous=FULL`, `busy_timeout`, `BEGIN IMMEDIATE`; PostgreSQL: psycopg 3, the server's
  defaults shown above), one transaction per call: **plain insert** of the same config JSON
  in clear into one table (the floor), and **StringEncryptedType**: sqlalchemy-utils
  `StringEncryptedType(Unicode, key, AesGcmEngine)` holding the whole config JSON. Ratio =
  ours / baseline throughput (higher is better). Each repeat interleaves the three in five
  slices (ours, floor, StringEncryptedType, the transaction alone, again) so disk and
  machine noise hits all alike. **configure transaction only**: that write transaction
  alone (`Store.append_version` of a version sealed once beforehand), no target: it shows
  how a configure's cost divides between the transaction and the work around it.
  **configure statements**: SQL statements per call, counted as for list below
  (SQLite's `BEGIN IMMEDIATE` counts; on PostgreSQL the vault's advisory lock does).
- **list**: milliseconds per `toolkit/list/req` with 200 registered toolkits (10 of them
  configured in the listing session), in a store of 10,000 sessions (3 configured toolkits
  each) against the same list in a store of 100 sessions, each list reading the store as
  it does after any commit (with nothing committed since the session's last list, a list on
  SQLite reads nothing: the http scenario's list). Ratio = cost at 10,000 / cost at
  100 (lower is better). **list statements**: SQL statements per list, counted with a
  SQLAlchemy `before_cursor_execute` listener plus the store's statements on the driver
  directly (`Store.fetch`: a list's one `SELECT`, without SQLAlchemy's `BEGIN`; a write's
  prebuilt statements, sent on the driver's cursor).
- **rotation master key**: `rotate_master_key` (what `keys rotate` runs): the key provider
  (the file provider: a new key in the key document, written and synced) makes a new master
  key, then every vault key is unwrapped and wrapped under it and written back in one
  audited transaction. Timed (median of 15) at the large size against a tenth of the small
  size (ratio = time at the large size / time at the small one, lower is better: the
  versions are never read), and as versions/s (versions protected by the rotated key per
  second of rotation) against **MultiFernet.rotate** re-encrypting the same number of
  configs (the whole config as one Fernet token per row) read and written back in batches
  of 500 with one `UPDATE` executemany per batch, on the same engine.
- **rotation** (the vault key): versions rewrapped per second by `rotate_vault_key` (what `keys
  rotate --vault-key` runs: a new vault key wrapped by the provider and made active, then
  every data key unwrapped and wrapped under it, the key only, no value opened, and written
  back by compare-and-set, 500 rows a batch, each batch read as id, key id and wrapped key)
  against MultiFernet as above, and against **rotation floor (no crypto)**: the same reads
  and compare-and-set `UPDATE` batches moving each row to another key id as a rotation
  does (its key id index entry moves with it), its wrapped key written back unchanged: the
  fastest any per-row rewrap can be. DB reads and writes are included in all. Ratio =
  ours / baseline throughput (higher is better). **rotation floor** rows: the floor against
  MultiFernet (no target).
- **rotation memory**: peak Python heap during one vault key rotation, measured with
  `tracemalloc` (`reset_peak` before, `get_traced_memory()[1]` after) in separate, untimed
  runs. It counts Python allocations (rows, statements, ciphertexts), not SQLite's page
  cache or the interpreter's fixed footprint: it is what grows if a rotation loads rows
  whole. Ratio = peak at the large size / peak at the small size.
- **restart**: milliseconds from spawning a cold `toolkit-vault stdio` process to its
  handshake response resuming a session whose toolkit is configured (settings, key file,
  vault key unwrap, internal keys, decrypt, `initialize` all happen before the response; a list
  then checks `configured: true`), against the same cold process opening a new session.
  No target: it shows what resuming adds to a cold start. Most of a cold start is Python
  importing the service and its dependencies (SQLAlchemy, jsonschema, pydantic, click; see
  `python -X importtime -c 'import toolkit_vault.cli.serving'`, `stdio`'s module); resuming
  adds the session lookup, one unwrap and decrypt, and the toolkit's `initialize`.
- **cli**: milliseconds from spawning `toolkit-vault version` or `toolkit-vault --help`
  (the installed console script, a cold process) to its exit, against `python -c 'import
  click'` on the same interpreter: the floor of any click command line, including the
  interpreter's start-up and the editable install's path hook. The three alternate run by
  run. Neither command opens a vault or imports a command module (`toolkit_vault.cli`
  imports a command's module only when it runs); ratio = ours / floor (lower is better).
- Every figure is the median of the repeats shown in the case column or the scale below.
"""


def markdown(
    results: list[Result],
    scale: Scale,
    machine: dict[str, str],
    elapsed: float,
    notes: dict[str, str],
    profiles: dict[str, list[str]],
    profile_headers: dict[str, str] | None = None,
    plot: str | None = None,
    figures: list[tuple[str, str]] | None = None,
) -> str:
    generic = [r for r in results if not is_network(r)]
    network = markdown_table(results)
    if network:
        network = ["### http", "", *network, ""]
        if plot:
            network += [f"![HTTP throughput against connections]({plot})", ""]
    soak = soak_table(results)
    if soak:
        network += ["### soak", "", *soak, ""]
    out = [
        "# Benchmarks",
        "",
        f"Generated by `scripts/bench` on {time.strftime('%Y-%m-%d %H:%M %Z')}: the "
        f"**{scale.name}** run, {elapsed / 60:.1f} minutes. Do not edit by hand but its last "
        "section: `scripts/bench` rewrites this file (the prose lives in "
        "`benchmarks/report.py`) and carries that section over.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine.items()),
        "",
        "## Reproduce",
        "",
        "```sh",
        "scripts/bench            # full run (~30 min): prints the table, rewrites BENCHMARKS.md",
        "scripts/bench --quick    # quick run (~5 min): prints the table only",
        "scripts/bench --only rotation --databases sqlite   # one scenario, one database",
        "scripts/bench --only http --databases sqlite       # the network path only",
        "scripts/bench --only cli                           # command-line start-up (seconds)",
        "scripts/bench --only history --databases sqlite    # 1M events against an empty vault",
        "scripts/bench --only verification --databases sqlite  # audit verify, check, backup",
        ".venv/bin/python -m benchmarks.ab --base main      # a change, paired against main",
        "```",
        "",
        "`scripts/bench` sets up `.venv` with the `bench` and `dev` extras (sqlalchemy-utils "
        "for the StringEncryptedType baseline) and runs `python -m benchmarks`. Each scenario "
        "runs on SQLite (a temporary home) and on PostgreSQL (a scratch database "
        "`tkv_bench_<random>`, created and dropped, on the server of "
        "`TOOLKIT_VAULT_BENCH_POSTGRES_URL`, else `TOOLKIT_VAULT_TEST_POSTGRES_URL`, else "
        "`postgresql+psycopg://postgres@127.0.0.1:5432/test`).",
        "",
        "This machine's speed drifts by 15-65% from one hour to the next, so two runs cannot "
        "show a 5% change; `benchmarks.ab` can: the working tree and a revision serve at "
        "once, short runs of the network cases (or the soak) alternate between them, and "
        "the median of the per-pair ratios is the change.",
        "",
        f"Scale of this run: configure {scale.configure_calls} calls x "
        f"{scale.configure_repeats} repeats; list {scale.list_calls} lists x "
        f"{scale.list_repeats} repeats; rotation {scale.rotation_repeats} repeats per size; "
        f"restart {scale.restart_repeats} repeats; http {scale.http_seconds:g} s per run x "
        f"{scale.http_repeats}.",
        "",
        "## Results",
        "",
        "| scenario | db | case | unit | ours | baseline | baseline value | ratio | target | "
        "holds |",
        "|---|---|---|---|--:|---|--:|--:|---|---|",
        *("| " + " | ".join([*_cells(r), _holds(r)]) + " |" for r in generic),
        "",
        *network,
        *_plots(figures or []),
        "## What the figures mean",
        "",
        MEANING + NETWORK_MEANING,
        "## Targets",
        "",
    ]
    for result in results:
        if result.holds is None:
            continue
        verdict = "holds" if result.holds else "**missed**"
        out.append(
            f"- {result.scenario} ({result.database}, {result.case}) vs "
            f"{result.baseline_name}: {result.ratio:.2f}x, target {result.target}: {verdict}"
        )
    missed = sorted({r.scenario for r in results if r.holds is False})
    if missed:
        out += ["", "## Where a target is missed, and what bounds it", ""]
        for scenario in missed:
            out += [f"### {scenario}", "", notes.get(scenario, "(no note)"), ""]
            if scenario in profiles:
                out += [
                    (profile_headers or {}).get(scenario, PROFILE_HEADER),
                    "",
                    "```",
                    *profiles[scenario][1:],
                    "```",
                    "",
                ]
    return "\n".join(out).rstrip() + "\n"


def _plots(figures: list[tuple[str, str]]) -> list[str]:
    """Each plot (caption, path relative to the report) as an image and its caption."""
    if not figures:
        return []
    lines = ["## Plots", ""]
    for caption, path in figures:
        lines += [f"![{path.rsplit('/', 1)[-1]}]({path})", "", caption, ""]
    return lines


KEPT_BY_HAND = "## Paired A/B history (kept by hand)"


def write(path: Path, text: str) -> None:
    """Replace the report, carrying over its last section, which is kept by hand (paired
    A/B figures and where the numbers in the code's prose came from)."""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if KEPT_BY_HAND in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(KEPT_BY_HAND) :]
    temp = path.with_suffix(".tmp")
    temp.write_text(text, encoding="utf-8")
    temp.replace(path)
