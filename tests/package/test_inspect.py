"""The toolkit-package-inspect command, run as a real subprocess: bounded input and report,
the three exit codes, no value in any report, and no traceback on hostile input."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from package_builders import EXAMPLES

import toolkit_package
from toolkit_package.importers import ImportRefused
from toolkit_package.inspect_command import MAX_INPUT_BYTES, MAX_REPORT_BYTES, inspect_bytes

SERVICE = str(Path(toolkit_package.__file__).resolve().parents[1])  # the code under test
ENV = {**os.environ, "PYTHONPATH": SERVICE}
COMMAND = [sys.executable, "-m", "toolkit_package.inspect_command"]
VALUE_KEYS = {
    "value",
    "default",
    "identifier",
    "url",
    "runtimeHint",
    "runtime_hint",
    "registryBaseUrl",
    "command",
    "entry_point",
}


def inspect(data: bytes, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        COMMAND, input=data, stderr=subprocess.PIPE, env=ENV, timeout=60, check=False, **kwargs
    )


def assert_refused(proc: subprocess.CompletedProcess[bytes], code: str) -> None:
    assert proc.returncode == 2
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and code in lines[0]
    assert "Traceback" not in proc.stderr.decode()


def values_of(node: Any, key: str = "") -> list[str]:
    """Every configuration/executable value in a vector: what a report must never contain."""
    if isinstance(node, dict):
        found = (
            [v for v in node.values() if isinstance(v, str)] if key in ("env", "headers") else []
        )
        for k, v in node.items():
            if k in VALUE_KEYS and isinstance(v, str):
                found.append(v)
            found += values_of(v, k)
        return found
    if isinstance(node, list):
        found = [v for v in node if isinstance(v, str)] if key == "args" else []
        for v in node:
            found += values_of(v)
        return found
    return []


@pytest.mark.parametrize("name", EXAMPLES)
def test_report_for_each_example_holds_no_value(name: str, vector: Callable[[str], bytes]) -> None:
    data = vector(name)
    proc = inspect(data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    report = json.loads(proc.stdout)
    assert report["input_sha256"] == hashlib.sha256(data).hexdigest()
    assert set(report) == {
        "input_sha256",
        "format",
        "accepted_servers",
        "skipped_servers",
        "skipped",
        "diagnostics",
        "servers",
    }
    assert report["accepted_servers"] == len(report["servers"])
    text = proc.stdout.decode()
    assert "canary" not in text.lower()
    forbidden = [v for v in values_of(json.loads(data)) if len(v) >= 4]
    assert forbidden
    for value in forbidden:
        assert value not in text, value


def test_report_names_secret_fields(vector: Callable[[str], bytes]) -> None:
    report = json.loads(inspect(vector("server-argv-variable-secret.json")).stdout)
    (server,) = report["servers"]
    assert server["roles"] == ["service"]
    assert server["strategy"] == "local_mcp"
    assert server["configuration_fields"][0] == {
        "name": "weather_token",
        "secret": True,
        "required": True,
        "kind": "variable",
        "in_argv": True,
        "reason": "isSecret",
    }


def test_client_config_counts_and_diagnostics(vector: Callable[[str], bytes]) -> None:
    report = json.loads(inspect(vector("client-config.json")).stdout)
    assert (report["accepted_servers"], report["skipped_servers"]) == (2, 1)
    assert report["diagnostics"][0]["scope"] == "/mcpServers/broken/command"


def test_input_of_exactly_one_mib_accepted_and_one_more_byte_refused() -> None:
    doc = b'{"mcpServers": {}}'
    exact = doc + b" " * (MAX_INPUT_BYTES - len(doc))
    assert len(exact) == 1 << 20
    proc = inspect(exact)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["input_sha256"] == hashlib.sha256(exact).hexdigest()
    assert_refused(inspect(exact + b" "), "input_too_large")


def test_report_over_256_kib_refused_not_cut() -> None:
    servers = {f"{i:04d}-" + "n" * 240: {"command": "x"} for i in range(1000)}
    data = json.dumps({"mcpServers": servers}).encode()
    assert len(data) < MAX_INPUT_BYTES
    assert_refused(inspect(data), "report_too_large")
    smaller = {k: v for k, v in list(servers.items())[:500]}
    proc = inspect(json.dumps({"mcpServers": smaller}).encode())
    assert proc.returncode == 0 and len(proc.stdout) <= MAX_REPORT_BYTES


def test_closed_stdout_is_output_failure() -> None:
    proc = subprocess.run(
        COMMAND,
        input=b'{"mcpServers": {}}',
        stderr=subprocess.PIPE,
        env=ENV,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert proc.returncode == 1
    assert "output failure" in proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()


def test_broken_pipe_is_output_failure() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = inspect(b'{"mcpServers": {}}', stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert proc.stderr.decode().count("\n") == 1
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"[" * 100_000, "nesting_too_deep"),
        (b'{"mcpServers": {"a": {"command": "' + b"x" * 70_000 + b'"}}}', "string_too_long"),
        (b'{"mcpServers": {"a": {}, "a": {}}}', "duplicate_key"),
        (b'{"name": "x", "packages": "nope"}', "invalid_server_json"),
        (b"\x00\xff" * 100, "not_utf8"),
        (b"", "not_json"),
        (b"null", "unknown_format"),
        (b'{"servers": {"a": {"command": "x"}}, "mcpServers": {}}', "ambiguous_format"),
    ],
)
def test_hostile_inputs_refused_without_traceback(data: bytes, code: str) -> None:
    assert_refused(inspect(data), code)


def test_wrong_types_are_diagnostics() -> None:
    data = b'{"mcpServers": {"a": {"command": ["x"]}, "b": 5, "c": {"url": 7}, "d": {"url": "u"}}}'
    proc = inspect(data)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert (report["accepted_servers"], report["skipped_servers"]) == (1, 3)
    assert len(report["diagnostics"]) == 3


KEYS = st.sampled_from(
    [
        "mcpServers",
        "servers",
        "packages",
        "remotes",
        "name",
        "server",
        "mcp_config",
        "manifest_version",
        "user_config",
        "environmentVariables",
        "environment_variables",
        "runtimeArguments",
        "packageArguments",
        "isSecret",
        "is_secret",
        "variables",
        "value",
        "headers",
        "command",
        "args",
        "env",
        "url",
        "type",
        "inputs",
        "sensitive",
        "tools",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["named", "positional", "stdio", "sse", "{x}", "${user_config.k}"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(), inner, max_size=5)
    ),
    max_leaves=40,
)
DOCS = st.dictionaries(KEYS, JSON, max_size=5) | JSON


def check(data: bytes) -> None:
    try:
        report = inspect_bytes(data)
    except ImportRefused as exc:
        assert exc.code and exc.message
        return
    assert len(report) <= MAX_REPORT_BYTES
    parsed = json.loads(report)
    assert parsed["accepted_servers"] == len(parsed["servers"])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(DOCS)
def test_random_json_gives_a_report_or_the_documented_refusal(doc: Any) -> None:
    check(json.dumps(doc).encode())


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_random_bytes_give_a_report_or_the_documented_refusal(data: bytes) -> None:
    check(data)


@settings(max_examples=8, deadline=None)
@given(DOCS)
def test_random_json_through_the_command(doc: Any) -> None:
    proc = inspect(json.dumps(doc).encode())
    assert proc.returncode in (0, 2)
    assert "Traceback" not in proc.stderr.decode()
    if proc.returncode == 0:
        json.loads(proc.stdout)
    else:
        assert proc.stdout == b""
