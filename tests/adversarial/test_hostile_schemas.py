"""Hostile schemas at registration, hostile configs at validation: a clear refusal, in time.

tests/test_schema.py refuses each hostile schema vector at `compile_schema` and times the
validator on catastrophic patterns. This takes them through the places a schema really
arrives: `ToolkitRegistry.register`, and a third-party plugin discovered through the entry
point group (tests/adversarial/plugins), in process and through the command line. Every
hostile plugin is left out with one log line and the vault still opens; nothing is fetched
from the network. Then hostile configs go through a live connection: each is refused (or
validated) within a time bound, nothing is stored, and no value comes back.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest
from adversarial_support import (
    CLI,
    HERE,
    ConnectionChannel,
    assert_error,
    config_rows,
    counts,
    line,
)

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import SchemaRefused, VaultError
from toolkit_vault.schema import MAX_SECRETS
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitRegistry, ToolkitSource

PLUGINS = HERE / "plugins"
VECTORS = json.loads((HERE.parent / "vectors" / "schemas_hostile.json").read_text())
SECONDS = 3.0  # the bound for anything a hostile schema or config can make the vault do
HOSTILE = {
    "hostile_remote_ref": "not local",
    "hostile_ref_cycle": "cycle",
    "hostile_enum": "enum longer than",
    "hostile_properties": "more than 2000 properties",
    "hostile_backreference": "'/properties/a/pattern'",
    "hostile_deep": "deeper than 64 levels",
    "hostile_definition": "does not match the spec's fields",
}


@contextmanager
def within(seconds: float = SECONDS) -> Iterator[None]:
    started = time.perf_counter()
    yield
    elapsed = time.perf_counter() - started
    assert elapsed < seconds, f"took {elapsed:.2f} s"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (and refuse) every attempt to open a network connection, except while
    `network_allowed` holds (a key provider that is a network service, opening the vault)."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network access from a schema")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


@contextmanager
def network_allowed() -> Iterator[None]:
    refused = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect, socket.socket.connect_ex = _CONNECT, _CONNECT_EX  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = refused  # type: ignore[method-assign]


_CONNECT, _CONNECT_EX = socket.socket.connect, socket.socket.connect_ex


def _factory(name: str, schema: Any) -> Any:
    class Plugin:
        definition: ClassVar[dict[str, Any]] = {"name": name, "schema": schema, "tools": ["t"]}

        def initialize(self, config: dict[str, Any]) -> None:
            return None

    return Plugin


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"child": schema}}
    return schema


REGISTRATION = [
    *[(v["name"], v["schema"], v["refusal"]) for v in VECTORS["refused"]],
    ("remote $ref over https", {"type": "object", "$ref": "https://example.test/s.json"}, "local"),
    (
        "$ref cycle through the root",
        {"type": "object", "anyOf": [{"$ref": "#"}], "properties": {"a": {"type": "string"}}},
        "cycle",
    ),
    ("enormous enum", {"type": "object", "properties": {"a": {"enum": [0] * 50_000}}}, "enum"),
    (
        "10,000 properties",
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}},
        "properties",
    ),
    ("50,000 levels deep", _nested(50_000), "deeper"),
    ("not JSON", {"type": "object", "default": float("nan")}, "plain JSON"),
]


def test_registration_refuses_hostile_schemas_in_time(no_network: list[Any]) -> None:
    registry = ToolkitRegistry()
    for n, (name, schema, refusal) in enumerate(REGISTRATION):
        with within(), pytest.raises(SchemaRefused) as caught:
            registry.register(
                _factory(f"t{n}", schema), ToolkitSource(SourceKind.ENTRY_POINT, "test")
            )
        assert refusal in caught.value.message, name
        assert f"t{n}" not in registry
    assert registry.all() == []
    assert no_network == []


def test_hostile_entry_points_are_left_out_and_the_vault_opens(
    home: VaultSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    no_network: list[Any],
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    with within(2 * SECONDS):
        registry = ToolkitRegistry.default()
    names = {t.definition.name for t in registry.all()}
    assert names == {"filesystem", "secretive", "hostile_slow_regex"}
    refused = {
        r.getMessage().split()[3]: r.getMessage()
        for r in caplog.records
        if r.name == "toolkit_vault.toolkits.registry"
    }
    for name, reason in HOSTILE.items():
        assert reason in refused.pop(name), name
    assert list(refused) == ["broken"]  # tests/plugins' own broken plugin, nothing else
    assert no_network == []

    with network_allowed():  # the master key may be in AWS KMS (moto on loopback)
        vault = open_vault(home, registry)
    try:
        channel = ConnectionChannel(vault)
        configure = {"type": "toolkit/configure/req", "toolkit_name": "hostile_slow_regex"}
        attack = "a" * 200_000 + "!"
        with within():
            config = {"a": attack, "b" * 50_000 + "c": "x"}
            (error,) = channel.exchange(line({**configure, "config": config}))
        assert_error(error, "RUNTIME_ERROR")
        assert error["details"] == [  # the property's value, and the name of the other
            {"pointer": "", "keyword": "pattern"},
            {"pointer": "/a", "keyword": "pattern"},
        ]
        ok = channel.exchange(line({**configure, "config": {"a": "a" * 100_000, "bbbb": "x"}}))
        assert ok[0]["status"] == "ok"
        assert no_network == []
    finally:
        vault.store.engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_hostile_entry_points_through_the_command_line(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(PLUGINS), cli_env["PYTHONPATH"]])}
    done = subprocess.run(
        [CLI, "toolkits", "list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = {t["name"] for t in json.loads(done.stdout)["toolkits"]}
    assert listed == {"filesystem", "secretive", "hostile_slow_regex"}
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == len(HOSTILE) + 1 and "Traceback" not in done.stderr
    for name, reason in HOSTILE.items():
        prefix = f"WARNING toolkit entry point {name} "
        assert any(w.startswith(prefix) and reason in w for w in warnings), name


def test_hostile_configs_are_refused_in_time(vault: Vault) -> None:
    """Configs a 1 MiB message can carry that would cost seconds to validate or seal."""
    channel = ConnectionChannel(vault)
    before = config_rows(vault), counts(vault)["config_versions"]
    secretive = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
    base = {"endpoint": "https://x.test", "api_key": "tkv-canary-hostile-config"}
    cases = {
        # 60,000 headers: every one a secret (fail closed), each to seal and fingerprint
        "many secret headers": (
            {**base, "headers": {f"h{i}": "" for i in range(60_000)}},
            "maxSecrets",
        ),
        # more values than a config may hold, in an array and in an object
        "many tokens": ({**base, "tokens": [""] * 200_000}, "maxValues"),
        "many values": ({**base, "auth": {"x": [0] * 150_000}}, "maxValues"),
    }
    for name, (config, keyword) in cases.items():
        raw = line({**secretive, "id": name, "config": config})
        with within():
            (error,) = channel.exchange(raw)
        assert_error(error, "RUNTIME_ERROR", name)
        assert [d["keyword"] for d in error["details"]] == [keyword], name
        assert "tkv-canary-hostile-config" not in json.dumps(error)
    assert (config_rows(vault), counts(vault)["config_versions"]) == before
    most = {f"h{i}": "v" for i in range(MAX_SECRETS - 1)}  # with the api_key: the most allowed
    many = {**base, "headers": most}
    with within(4 * SECONDS):  # accepted, so really sealed: 1,000 envelopes and fingerprints
        (ok, _) = channel.exchange(line({**secretive, "config": many}))
    assert ok["status"] == "ok"


def test_registry_refusal_messages_name_no_plugin_value() -> None:
    """A refusal names pointers and keywords; a schema's own strings never reach the log."""
    secret_looking = "tkv-canary-in-a-schema-default"
    schema = {"type": "object", "properties": {"a": {"default": secret_looking, "minLength": -1}}}
    with pytest.raises(VaultError) as caught:
        ToolkitRegistry().register(
            _factory("leaky", schema), ToolkitSource(SourceKind.ENTRY_POINT, "test")
        )
    assert secret_looking not in str(caught.value)
