"""The importer on real published metadata (tests/fixtures/mcp, sources in SOURCES.md).

The oracle for "names a credential" here is written apart from the classifier, straight
from the issue's list of words, so the classifier cannot agree with itself by construction.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from corpus import BUNDLES, CLIENTS, CORPUS, REGISTRY, corpus, load, render, table

from toolkit_package.importers import ImportRefused, import_metadata

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_STEMS = ("token", "secret", "passw", "credential", "cookie", "session", "private", "bearer")


def says_credential(text: str) -> bool:
    """The issue's words: token, secret, password, key, credential, auth, cookie, session,
    private, bearer, DSN, connection string."""
    found = [w.lower() for w in _WORD.findall(text.replace("-", " ").replace("_", " "))]
    joined = "".join(found)
    return (
        any(s in joined for s in _STEMS)
        or any(w in ("key", "keys", "dsn", "apikey", "accesskey") for w in found)
        or any(
            (w.startswith("auth") and not w.startswith("author")) or w.startswith("authori")
            for w in found
        )
        or "connection string" in " ".join(found)
    )


def test_the_corpus_is_real_and_sourced() -> None:
    sources = (CORPUS / "SOURCES.md").read_text()
    files = [p for p in CORPUS.rglob("*.json")]
    assert len(files) >= 37 and len(CLIENTS) >= 15
    for path in files:
        assert f"`{path.relative_to(CORPUS)}`" in sources, path
    seed = json.loads((CORPUS / "registry" / "seed_2025_05_16.json").read_text())
    assert len(seed) == 471  # several hundred server.json entries


def test_every_input_that_names_a_credential_is_secret() -> None:
    """Unless the hand labels (tests/fixtures/mcp_labels.json) call it a harmless setting."""
    rows = json.loads((CORPUS.parent / "mcp_labels.json").read_text())["fields"]
    public = {(r["server"], r["location"]) for r in rows if r["label"] == "public"}
    checked = missed = 0
    for path, result in corpus():
        for server in result.servers:
            for item in server.configurable:
                if (server.name, item.location) in public:
                    continue
                if says_credential(item.name) or says_credential(item.description):
                    checked += 1
                    if not item.secret:
                        missed += 1
                        print(f"{path.name}: {server.name}: {item.name} public ({item.reason})")
    assert checked >= 200 and missed == 0


def test_slack_one_placeholder_and_env_var_are_one_secret_field() -> None:
    result = load(CORPUS / "registry" / "seed_2025_05_16.json")
    (slack,) = [s for s in result.servers if s.name == "io.github.korotovsky/slack-mcp-server"]
    (field,) = slack.configurable
    assert (field.name, field.secret, field.in_argv) == ("SLACK_MCP_SSE_API_KEY", True, True)


def test_client_configs_mark_node_env_and_port_public() -> None:
    (server,) = load(CORPUS / "clients/claude/AccelByte__ags-extend-sdk-mcp-server.json").servers
    assert {i.name: (i.secret, i.reason) for i in server.configurable} == {
        "NODE_ENV": (False, "harmless name: env"),
        "PORT": (False, "harmless name: port"),
    }


@pytest.mark.parametrize("path", CLIENTS, ids=lambda p: p.name)
def test_every_client_config_parses_with_every_entry(path: Path) -> None:
    result = load(path)
    assert result.format == "client_config"
    assert result.servers and result.skipped == 0


def test_jsonc_configs_parse_and_a_syntax_error_names_line_and_column() -> None:
    jsonc = [p for p in CLIENTS if _is_jsonc(p)]
    assert len(jsonc) == 3
    assert all(load(p).servers for p in jsonc)
    broken = b'{\n  "servers": {\n    "a": {"command": "x"}\n    "b": {}\n  }\n}'
    with pytest.raises(ImportRefused) as info:
        import_metadata(broken)
    assert info.value.code == "not_json"
    assert info.value.message == "invalid JSON at line 4 column 5: Expecting ',' delimiter"


def _is_jsonc(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_every_published_bundle_imports(path: Path) -> None:
    result = load(path)
    assert result.format == "mcp_bundle_manifest"
    assert len(result.servers) == 1 and result.skipped == 0


def test_uv_bundle_without_mcp_config_imports() -> None:
    doc = json.loads((CORPUS / "bundles/mcpb/hello-world-uv.json").read_text())
    assert doc["server"]["type"] == "uv" and "mcp_config" not in doc["server"]
    (server,) = load(CORPUS / "bundles/mcpb/hello-world-uv.json").servers
    assert server.name == "hello-world-uv"
    doc["user_config"] = {"token": {"type": "string", "title": "T", "description": "d"}}
    (server,) = import_metadata(json.dumps(doc).encode()).servers
    assert [(i.name, i.secret, i.in_argv) for i in server.inputs] == [("token", True, False)]


def test_registry_listing_shapes() -> None:
    seed = json.loads((CORPUS / "registry" / "seed.json").read_text())
    bare = import_metadata(json.dumps(seed).encode())
    listed = import_metadata(json.dumps({"servers": seed, "metadata": {"count": 5}}).encode())
    wrapped = {"servers": [{"server": s, "_meta": {"x": {"isLatest": True}}} for s in seed]}
    api = import_metadata(json.dumps(wrapped).encode())
    assert bare.format == listed.format == api.format == "mcp_registry_list"
    names = [s.name for s in bare.servers]
    assert names == [s.name for s in listed.servers] == [s.name for s in api.servers]
    assert "io.github.domdomegg/airtable-mcp-server#package-0" in names
    superseded = [s for s in bare.skipped_servers if s.code == "superseded"]
    assert len(superseded) == 3  # 1.7.2's three packages, superseded by 1.7.3's


@pytest.mark.parametrize("path", REGISTRY, ids=lambda p: p.name)
def test_registry_seed_imports_in_bulk(path: Path) -> None:
    result = load(path)
    assert result.format == "mcp_registry_list"
    assert result.input_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(result.servers) >= 6
    for skipped in result.skipped_servers:
        assert skipped.code and skipped.scope and skipped.message


def test_vscode_settings_mcp_block() -> None:
    settings = b"""{
      "editor.formatOnSave": true, // a user's own settings around the block
      "mcp": {
        "inputs": [{"type": "promptString", "id": "tok", "password": true}],
        "servers": {
          "gh": {"command": "npx", "args": ["server", "${input:tok}"], "env": {"PORT": "1"}},
        },
      },
    }"""
    result = import_metadata(settings)
    assert result.format == "vscode_settings"
    (server,) = result.servers
    assert [(i.name, i.secret, i.reason) for i in server.inputs] == [
        ("PORT", False, "harmless name: port"),
        ("tok", True, "password input"),
    ]


def test_classification_table(capsys: pytest.CaptureFixture[str]) -> None:
    counts, total = table()
    assert sum(counts.values()) == total >= 400
    assert counts[(True, "credential name")] >= 190
    text = render()
    with capsys.disabled():
        print("\n" + text)
    assert f"{total} configurable fields" in text
