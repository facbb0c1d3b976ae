"""A canary in every secret field of every toolkit imported from the real corpus is absent
from the database files (SQLite file and WAL, before and after a checkpoint; on PostgreSQL
every row of every table), from the debug log (SQL statements, parameters and rows echoed)
and from `history` output; while the public values configured beside them are found there,
so the scan reaches the places it claims to. Reuses the adversarial suite's scanner, which
looks for each canary raw, in hex, base64, URL- and JSON-escaped.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from test_vault import configure, handshake
from toolkit_package.selection import Selection
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import Base
from toolkit_vault.toolkits.imports import PackageRefused, import_package
from toolkit_vault.toolkits.registry import SourceKind
from toolkit_vault.toolkits.served import RUN_SERVERS_ENV

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adversarial"))
from adversarial_support import files_under, scan

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "mcp"
CANARY = "tkv-canary-imported/9c+1e=5b&2d-"  # every secret is this plus a number
PUBLIC = "tkv-public-imported-value"
LOGGERS = ("", "sqlalchemy.engine", "sqlalchemy.pool")


@pytest.fixture
def debug_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "debug.log"
    handler = logging.FileHandler(path, encoding="utf-8", errors="backslashreplace")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    logging.getLogger().addHandler(handler)
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    yield path
    logging.getLogger().removeHandler(handler)
    handler.close()
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def import_corpus(vault: Vault) -> None:
    for path in sorted(CORPUS.rglob("*.json")):
        data = path.read_bytes()
        try:
            import_package(vault.store, vault.registry, data, "local")
        except PackageRefused:  # its only server is named `filesystem` (in any case): renamed
            taken = "filesystem" if b'"filesystem"' in data else "Filesystem"
            rename = Selection(rename={taken: f"{path.stem}-filesystem"})
            import_package(vault.store, vault.registry, data, "local", rename)


def config_for(schema: dict[str, Any], counter: list[int]) -> tuple[dict[str, Any], int]:
    config: dict[str, Any] = {}
    secrets = 0
    for name, prop in schema["properties"].items():
        if prop["x-toolkit-input"]["secret"]:  # the classifier's verdict, not the schema's mark
            counter[0] += 1
            secrets += 1
            value: Any = f"{CANARY}{counter[0]}"
            config[name] = [value] if prop["type"] == "array" else value
        else:
            config[name] = {"number": 7, "boolean": True, "array": [PUBLIC]}.get(
                prop["type"], PUBLIC
            )
    return config, secrets


def database_dump(vault: Vault) -> bytes:
    out = bytearray()
    with vault.store.engine.connect() as db:
        for table in Base.metadata.sorted_tables:
            for row in db.execute(select(table)):
                for value in row:
                    data = value if isinstance(value, bytes | memoryview) else str(value).encode()
                    out += bytes(data) + b"\n"
    return bytes(out)


@pytest.fixture
def vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault that stores the corpus servers' configs and runs none of them (they are not
    installed here: each configure would be an error that the server did not start)."""
    monkeypatch.setenv(RUN_SERVERS_ENV, "off")
    opened = open_vault(home)
    yield opened
    opened.store.engine.dispose()


def test_no_canary_of_an_imported_secret_field_is_stored_or_shown(
    debug_log: Path, vault: Vault, home: VaultSettings
) -> None:
    import_corpus(vault)
    imported = [t for t in vault.registry.all() if t.source.kind is SourceKind.PACKAGE]
    assert len(imported) >= 500
    conn, _ = handshake(vault)
    counter = [0]
    configured = 0
    for toolkit in imported:
        config, secrets = config_for(toolkit.definition.config_schema, counter)
        if not secrets:
            continue
        out = configure(conn, toolkit.definition.name, config)
        assert out[0]["status"] == "ok", out
        configured += 1
    print(f"configured {configured} toolkits, {counter[0]} secret fields")
    assert configured >= 180 and counter[0] >= 200  # harmless settings are public now

    seen: list[tuple[str, bytes]] = []
    for args in (["history", "--json"], ["history"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        seen.append((" ".join(args), (result.stdout + result.stderr).encode()))
    blobs = [*seen, ("database dump", database_dump(vault))]
    blobs += [(f"home/{name}", data) for name, data in files_under(home.home)]
    vault.store.engine.dispose()  # SQLite: the WAL is checkpointed into the file
    blobs += [(f"home (closed)/{name}", data) for name, data in files_under(home.home)]
    blobs.append(("debug log", debug_log.read_bytes()))

    assert scan(blobs, {"canary": CANARY}) == []
    found = {where for where, _ in blobs if PUBLIC.encode() in _}
    assert {"history --json", "database dump", "debug log"} <= found
    assert b"INSERT INTO config_versions" in debug_log.read_bytes()
    history = json.loads(seen[0][1])
    assert len(history["versions"]) == configured
