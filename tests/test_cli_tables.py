"""Human output at 80 columns: names never cut, one time format, names instead of ids, and
ids typed back by a unique prefix (an ambiguous or unknown one is a clear error)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from test_vault import configure, request
from toolkit_vault.access.principals import Principal, PrincipalInfo, create_token
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.cli import main
from toolkit_vault.cli.ids import resolve_principal, unique_prefixes
from toolkit_vault.cli.shell import iso_seconds
from toolkit_vault.cli.tables import Column, Row, render
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.rotation import rotate_vault_key
from toolkit_vault.settings import VaultSettings, load_settings

pytestmark = pytest.mark.one_database

LONG = "io.github.an-example-organisation/a-rather-long-mcp-server-name"
SERVER = {
    "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
    "name": LONG,
    "description": "A server with two packages, so each gets a #package-N suffix.",
    "version": "1.0.0",
    "packages": [
        {
            "registryType": "npm",
            "identifier": "long-server",
            "version": "1.0.0",
            "transport": {"type": "stdio"},
            "environmentVariables": [{"name": "LONG_API_KEY", "isSecret": True}],
        },
        {
            "registryType": "oci",
            "identifier": "docker.io/example/long-server:1.0.0",
            "transport": {"type": "stdio"},
            "environmentVariables": [{"name": "LONG_API_KEY", "isSecret": True}],
        },
    ],
}
TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")


def cli(*args: str, columns: int = 80) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns)})


def fits(text: str, width: int = 80) -> None:
    """Every line fits, unless it is one unbreakable word (a name longer than the screen)."""
    for line in text.splitlines():
        assert len(line) <= width or " " not in line.strip(), line


def imported(tmp_path: Path) -> list[str]:
    source = tmp_path / "server.json"
    source.write_text(json.dumps(SERVER))
    done = cli("toolkits", "import", str(source))
    assert done.exit_code == 0, done.output
    return [f"{LONG}#package-0", f"{LONG}#package-1"]


# -- the renderer --------------------------------------------------------------------------


def test_render_moves_cells_and_never_cuts_them() -> None:
    columns = [Column("NAME"), Column("WHEN", fixed=True), Column("TOOLS")]
    rows = [
        Row(["fs", "2026-01-31T12:00:00Z", "read_file, write_file, list_dir"]),
        Row([LONG + "#package-0", "2026-01-31T12:00:01Z", ""], ["/api_key 0123456789ab*"]),
    ]
    for width in (120, 80, 60, 40):
        lines = render(columns, rows, width)
        text = "\n".join(lines)
        assert LONG + "#package-0" in text.split()
        assert "2026-01-31T12:00:00Z" in text and "2026-01-31T12:00:01Z" in text
        assert {"read_file,", "write_file,", "list_dir"} <= set(text.split())
        assert "    /api_key 0123456789ab*" in lines
        fits(text, width)
    wide = render(columns, rows, None)
    assert wide[2].startswith(LONG + "#package-0  2026-01-31T12:00:01Z")
    narrow = render(columns, rows, 20)  # not even the headers fit: header: value lines
    assert (
        f"name: {LONG}#package-0" in narrow and "tools: read_file, write_file, list_dir" in narrow
    )


def test_unique_prefixes_are_unique_and_at_least_8() -> None:
    ids = ["3f2a9c1e-aaaa", "3f2a9c1e-aaab", "7b00e5d1-0000", "7b00e5d2-0000"]
    shown = unique_prefixes(ids)
    assert shown == {
        "3f2a9c1e-aaaa": "3f2a9c1e-aaaa",
        "3f2a9c1e-aaab": "3f2a9c1e-aaab",
        "7b00e5d1-0000": "7b00e5d1",
        "7b00e5d2-0000": "7b00e5d2",
    }
    assert unique_prefixes(["abc"]) == {"abc": "abc"}


def test_one_time_format() -> None:
    assert iso_seconds(0) == "1970-01-01T00:00:00Z" and iso_seconds(None) == ""


# -- toolkits list ---------------------------------------------------------------------------


def test_toolkits_list_shows_imported_names_whole(vault: Vault, tmp_path: Path) -> None:
    names = imported(tmp_path)
    for columns in (80, 100, 120):
        done = cli("toolkits", "list", columns=columns)
        assert done.exit_code == 0, done.output
        words = done.stdout.split()
        assert all(name in words for name in names), done.stdout
        assert not any(w.startswith(LONG) and w not in names for w in words)  # never cut
        fits(done.stdout, columns)
    wide = cli("toolkits", "list", "--wide").stdout.splitlines()
    (row,) = [line for line in wide if line.startswith(names[0] + " ")]
    assert "package sha256:" in row and "…" not in row and "local_mcp" in row


@pytest.mark.key_providers("file")  # it takes the key away by moving the key file
def test_toolkits_list_needs_no_master_key_and_says_what_it_could_not_check(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    names = imported(tmp_path)
    key_file = home.home / "master-keys.json"
    keyed = json.loads(cli("toolkits", "list", "--json").stdout)["toolkits"]
    assert {t["name"]: t["verified"] for t in keyed} == {
        "filesystem": True,
        "secretive": True,
        names[0]: True,
        names[1]: True,
    }
    assert "unverified" not in cli("toolkits", "list").stdout
    saved = key_file.read_bytes()
    key_file.unlink()
    try:
        done = cli("toolkits", "list")
        assert done.exit_code == 0, done.output
        note = [x for x in done.stderr.splitlines() if x.startswith("toolkit-vault: note:")]
        assert note == [
            "toolkit-vault: note: imported definitions are unverified (key provider file "
            f"(key file {key_file}): holds no master key (restore it; `toolkit-vault init` "
            "creates one for a new vault only))"
        ]
        lines = done.stdout.splitlines()
        for name in names:
            at = next(i for i, line in enumerate(lines) if line.split()[0] == name)
            assert "(unverified)" in " ".join(lines[at : at + 2])
        assert "(unverified)" not in next(x for x in lines if x.startswith("filesystem "))
        keyless = json.loads(cli("toolkits", "list", "--json").stdout)["toolkits"]
        assert [(t["name"], t["verified"]) for t in keyless] == [
            (t["name"], t["source"] in ("built-in", "entry point secretive")) for t in keyed
        ]
        assert [t["schema_digest"] for t in keyless] == [t["schema_digest"] for t in keyed]
        assert not key_file.exists()
    finally:
        key_file.write_bytes(saved)
        key_file.chmod(0o600)


# -- history -----------------------------------------------------------------------------------


@pytest.fixture
def agent(vault: Vault) -> Principal:
    principal_id, _ = create_token(vault.store, "agent", "build-bot")
    return Principal(principal_id, "agent")


def session_of(vault: Vault, principal: Principal, session_id: str | None = None) -> Any:
    conn = connect(vault, principal)
    hello: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
    if session_id is not None:
        vault.store.create_session(session_id, principal.principal_id)
        hello["session_id"] = session_id
    (answer,) = request(conn, hello)
    assert answer["type"] == "handshake/resp", answer
    return conn, answer["session_id"]


def test_history_reads_well_at_80_columns(vault: Vault, agent: Principal) -> None:
    conn, session = session_of(vault, agent)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    configure(conn, "secretive", {"endpoint": "https://x.test", "api_key": "k1"})
    configure(conn, "secretive", {"endpoint": "https://x.test", "api_key": "k2"})
    done = cli("history")
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines()[-1] == "3 versions"
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["TIME", "(UTC)", "SCOPE", "TOOLKIT", "V", "STATUS", "ACTOR"]
    rows = [line for line in lines[1:] if TIME.match(line)]
    assert len(rows) == 3  # each version's time on one line, at the start of its row
    for row in rows:
        assert row.split()[1] == session[:8] and row.split()[-1] == "build-bot"
        assert agent.principal_id not in row
    assert "1 (current)" in rows[0] and "2 (current)" in rows[2]
    assert lines[-1].startswith("    /api_key ") and lines[-1].endswith("*")
    fits(done.stdout)
    again = cli("history", "--session", session[:8])
    assert again.exit_code == 0 and again.stdout == done.stdout
    wide = cli("history", "--wide").stdout
    assert session in wide and len(re.findall(r"/api_key [0-9a-f]{64}", wide)) == 2


@pytest.mark.key_providers("file")  # master keys `kek-N` (a KMS key's ARN runs on below)
def test_keys_status_keeps_its_layout_after_a_retire(vault: Vault) -> None:
    """The vault key table has the same columns in the same places before and after a key
    is retired (a retirement's time widens only the last column), and a retired key's row,
    both times and all, is one line at 80 columns: no switch to `header: value` lines."""

    def vault_key_table() -> list[str]:
        done = cli("keys", "status")
        assert done.exit_code == 0, done.output
        lines = done.stdout.splitlines()
        table = lines[lines.index("") + 1 :]  # the master key table comes first
        fits("\n".join(table))
        return table

    rotate_vault_key(vault.store, open_provider(load_settings()), vault.ring)
    before = vault_key_table()
    retired = cli("keys", "retire", "vk-1")
    assert retired.exit_code == 0, retired.output
    after = vault_key_table()
    header = "VAULT KEY  ACTIVE  WRAPS  MASTER KEY  CREATED (UTC)         RETIRED (UTC)"
    assert before[0] == after[0] == header
    assert [line.split()[0] for line in before[1:]] == ["vk-1", "vk-2"]
    assert [line.split()[0] for line in after[1:]] == ["vk-1", "vk-2"]  # one line per key
    old, new = after[1:]
    assert len(TIME.findall(old)) == 2 and old.split()[1:4] == ["0", "-", TIME.findall(old)[0]]
    assert len(TIME.findall(new)) == 1 and new.split()[1] == "yes" and new.endswith(" -")
    for line in (*before[1:], new):  # the columns start where they did
        assert line.index(TIME.findall(line)[0]) == header.index("CREATED")
    assert old.rindex(TIME.findall(old)[1]) == header.index("RETIRED")


def test_typed_session_prefixes(vault: Vault, agent: Principal) -> None:
    first, a = session_of(vault, agent, "5e55a0c1-1111-4000-8000-000000000001")
    second, b = session_of(vault, agent, "5e55a0c1-2222-4000-8000-000000000002")
    _, c = session_of(vault, agent)
    for conn in (first, second):
        configure(conn, "filesystem", {"root_dir": "/tmp"})
    listed = cli("history").stdout
    assert "5e55a0c1-1 " in listed and "5e55a0c1-2 " in listed  # as long as it must be
    only = json.loads(cli("history", "--session", "5e55a0c1-1", "--json").stdout)["versions"]
    assert [v["session_id"] for v in only] == [a]
    ambiguous = cli("history", "--session", "5e55a0c1")
    assert ambiguous.exit_code == 1 and ambiguous.stdout == ""
    assert ambiguous.stderr.strip() == (
        "toolkit-vault: error: session id prefix '5e55a0c1' is ambiguous: it matches "
        f"{a}, {b}; type more of it"
    )
    unknown = cli("history", "--session", "ffffffff")
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert "unknown session 'ffffffff'" in unknown.stderr
    wildcard = cli("history", "--session", "5e55a0c1%")  # LIKE wildcards are literal here
    assert wildcard.exit_code == 1 and "unknown session" in wildcard.stderr
    assert cli("history", "--session", c).exit_code == 0  # a whole id, of a session with none

    refused = cli("purge", "--session", "5e55a0c1", "--yes")
    assert refused.exit_code == 1 and "ambiguous" in refused.stderr
    assert {v["status"] for v in json.loads(cli("history", "--json").stdout)["versions"]} == {"ok"}
    purged = cli("purge", "--session", "5e55a0c1-2", "--yes")
    assert purged.exit_code == 0, purged.output
    assert purged.stdout == f"purged 1 version of session {b} (filesystem)\n"
    again = cli("purge", "--session", b[:12], "--yes")
    assert again.stdout == f"purged 0 versions of session {b} (none left to purge)\n"
    statuses = json.loads(cli("history", "--json").stdout)["versions"]
    assert {v["session_id"]: v["status"] for v in statuses} == {a: "ok", b: "purged"}


# -- tokens ------------------------------------------------------------------------------------


def test_tokens_list_and_revoke_by_name_id_or_prefix(vault: Vault) -> None:
    long_name = "a-principal-with-a-name-long-enough-to-need-its-own-line@example.org"
    ids = {
        name: create_token(vault.store, role, name)[0]
        for name, role in (("alice", "auditor"), ("ops", "operator"), (long_name, "agent"))
    }
    done = cli("tokens", "list")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0].split() == [
        "NAME", "ROLE", "TOKEN", "CREATED", "(UTC)", "ENDS", "(UTC)"
    ]  # fmt: skip
    assert long_name in done.stdout.split() and all(i not in done.stdout for i in ids.values())
    assert len(TIME.findall(done.stdout)) == 4 and "+00:00" not in done.stdout
    fits(done.stdout)
    wide = cli("tokens", "list", "--wide").stdout
    assert all(i in wide for i in ids.values())

    alice = ids["alice"]
    others = [i for i in ids.values() if i != alice]
    shared = next((i for i in others if i[0] == alice[0]), None)
    revoked = cli("tokens", "revoke", alice[:8])
    assert revoked.exit_code == 0 and revoked.stdout == f"revoked alice ({alice})\n"
    listed = cli("tokens", "list").stdout
    (row,) = [x for x in listed.splitlines() if x.startswith("alice ")]
    assert row.split()[2] == "revoked" and len(TIME.findall(row)) == 2
    unknown = cli("tokens", "revoke", "nobody")
    assert unknown.exit_code == 1 and "no principal named 'nobody'" in unknown.stderr
    if shared is not None:  # two ids starting alike: one character is ambiguous
        ambiguous = cli("tokens", "revoke", alice[0])
        assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.stderr
    ambiguous = cli("tokens", "revoke", "")
    assert ambiguous.exit_code == 1 and "no principal named ''" in ambiguous.stderr
    assert cli("tokens", "revoke", "ops").stdout == f"revoked ops ({ids['ops']})\n"


def test_an_ambiguous_principal_prefix_names_the_matches() -> None:
    def info(principal_id: str, name: str) -> PrincipalInfo:
        return PrincipalInfo(principal_id, name, "agent", True, 0.0, None)

    known = [info("abc-1", "x"), info("abc-2", "y"), info("abd-3", "abc")]
    assert resolve_principal(known, "abc").name == "abc"  # a name wins over a prefix
    assert resolve_principal(known, "abd").principal_id == "abd-3"
    with pytest.raises(VaultError, match=r"'ab' is ambiguous: it matches abc-1, abc-2, abd-3"):
        resolve_principal(known, "ab")


def test_untrusted_text_is_escaped_where_a_terminal_would_act_on_it() -> None:
    """Escape sequences, line breaks, bidi overrides and C1 controls are shown as their
    escapes; printable text, accented letters included, as itself."""
    from toolkit_vault.terminal import printable

    shown = printable("a\x1b[31mb\n\u202ec\x9bd é")
    assert shown == "a\\x1b[31mb\\n\\u202ec\\x9bd é"
