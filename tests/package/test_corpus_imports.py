"""The real corpus (tests/fixtures/mcp) through the vault: every client config imports (a
`filesystem` entry skipped, or renamed by the user), the registry listing imports in bulk,
and an input over 1 MiB imports while the 16 MiB bound holds. On SQLite: what it tests is the
import, above the store (tests/test_import.py stores imports on both databases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_import import CORPUS, events, imported_rows, one_error_line, run, vault_cli
from toolkit_package.selection import Selection
from toolkit_vault.core.vault import Vault
from toolkit_vault.toolkits.imports import MAX_IMPORT_BYTES, PackageRefused, import_package

pytestmark = pytest.mark.one_database


@pytest.mark.parametrize("path", sorted((CORPUS / "clients").rglob("*.json")), ids=lambda p: p.name)
def test_every_client_config_imports(path: Path, vault: Vault) -> None:
    """Each one as it is; one whose only server is `filesystem` needs the user's --rename."""
    data = path.read_bytes()
    try:
        report = import_package(vault.store, vault.registry, data, "local")
    except PackageRefused as exc:
        assert "no_servers" in exc.message
        rename = Selection(rename={"filesystem": f"{path.stem}-filesystem"})
        report = import_package(vault.store, vault.registry, data, "local", rename)
    assert report.toolkits
    assert all(s.name == "filesystem" and s.code == "name_taken" for s in report.skipped)


def test_the_registry_listing_imports_in_bulk(vault: Vault) -> None:
    data = (CORPUS / "registry/seed_2025_05_16.json").read_bytes()
    report = import_package(vault.store, vault.registry, data, "local")
    assert report.format == "mcp_registry_list"
    assert len(report.toolkits) == len(imported_rows(vault)) == 472
    assert len(events(vault)) == 472
    assert sorted({s.code for s in report.skipped}) == ["invalid_entry", "invalid_server_json"]
    slack = vault.registry.get("io.github.korotovsky/slack-mcp-server").definition.config_schema
    assert list(slack["properties"]) == ["slack_mcp_sse_api_key"]
    assert slack["properties"]["slack_mcp_sse_api_key"]["writeOnly"] is True


def test_more_than_one_mebibyte_imports_and_the_bulk_bound_holds(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    seed = json.loads((CORPUS / "registry/seed_2025_05_16.json").read_text())
    copies = [
        {**entry, "name": f"{entry['name']}-{n}"}
        for n in range(3)
        for entry in seed
        if entry["name"]
    ]
    big = json.dumps({"servers": copies}, indent=2).encode()
    assert len(big) > 1 << 20
    (tmp_path / "big.json").write_bytes(big)
    done = vault_cli(cli_env, "toolkits", "import", str(tmp_path / "big.json"), "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["toolkits"]) == 3 * 472
    inspected = run("toolkit-package-inspect", cli_env, stdin=big)
    assert inspected.returncode == 2 and "input_too_large" in inspected.stderr
    too_big = b"{" + b" " * MAX_IMPORT_BYTES + b"}"
    line = "toolkit-vault: error: package refused: input_too_large: input exceeds 16777216 bytes"
    assert one_error_line(vault_cli(cli_env, "toolkits", "import", "-", stdin=too_big)) == line
