"""Leak canaries: no secret in any byte the vault writes, on any path, with debug logging on.

Each path gets its own canary (so a hit names the path): the service API, a connection
(ok, partial, a plugin that fails with the api_key in its exception, invalid and refused
configs, malformed messages, a number no store can carry), a resume in a new process, the
stdio shell in process and as a real `toolkit-vault stdio` process, an imported MCP package
configured, and the operators' and auditors' commands (rotation, check, history, audit
verify, purge, key status), and a real `toolkit-vault serve` over HTTP and WebSocket. Every
logger runs at DEBUG with SQLAlchemy echoing statements, parameters and rows, and no
redaction filter. Then every byte is scanned (database files and WAL, a logical dump of
every table, the log, every response and event, HTTP responses and WebSocket frames, stdout
and stderr, exception tracebacks) for each canary raw, base64 (standard and URL-safe, at
each alignment), hex (both cases), URL-encoded and JSON-escaped: zero hits. The master keys
are looked for too, everywhere but in their own key file, and the vault keys everywhere
(the store holds them only wrapped).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from adversarial_support import (
    AGENT,
    HERE,
    HttpChannel,
    ServeProcess,
    StdioChannel,
    WebSocketChannel,
    files_under,
    line,
    scan,
)
from click.testing import CliRunner
from sqlalchemy import select

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.protocol import MAX_MESSAGE_BYTES, ToolkitConfigureRequest
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import Base
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.toolkits.registry import ToolkitRegistry
from toolkit_vault.transports.stdio import serve_stdio

pytestmark = pytest.mark.key_providers("file")  # scans the key file's keys too

PACKAGE = HERE.parent / "vectors" / "package" / "server-secret-env.json"
PACKAGE_DEFAULT_SECRET = "canary-default-webhook-secret"  # an isSecret default in the package
SECRET_NUMBER = 98_765_432_109_876_543_210
LOGGERS = ("", "sqlalchemy.engine", "sqlalchemy.pool")


@pytest.fixture
def debug_log(tmp_path: Path) -> Iterator[Path]:
    """Every log record of this process, at DEBUG, SQL echo included, into one file."""
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


class Canaries:
    """Secret values, one per path, and everything the interfaces gave back."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.seen: list[tuple[str, bytes]] = []

    def __call__(self, label: str) -> str:
        self.values[label] = value = f"tkv-canary {label}/9c+1e=5b&2d"
        return value

    def saw(self, where: str, data: str | bytes) -> None:
        self.seen.append((where, data if isinstance(data, bytes) else data.encode()))

    def raised(self, where: str, exc: BaseException) -> None:
        self.saw(where, "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args))


def secret_config(api_key: str, **extra: Any) -> dict[str, Any]:
    return {
        "endpoint": "https://api.example.test",
        "api_key": api_key,
        "auth": {"user": "alice", "password": api_key + "-pw"},
        "tokens": ["public-looking", api_key + "-tok"],
        "headers": {"X-Api": api_key + "-hdr"},
        **extra,
    }


def configure(toolkit: str, config: Any, **extra: Any) -> bytes:
    return line(
        {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config} | extra
    )


HANDSHAKE = line({"type": "handshake/req", "capabilities": ["toolkits"]})


def bad_messages(canary: Callable[[str], str]) -> list[bytes]:
    """Malformed and refused messages, each carrying a canary where a value would be."""
    deep: Any = canary("too-deep")
    for _ in range(70):
        deep = {"k": deep}
    again = json.dumps(canary("duplicate-2")).encode()
    duplicate = configure("secretive", secret_config(canary("duplicate")))
    duplicate = duplicate[:-2] + b', "api_key": ' + again + b"}}"  # a key twice in config
    oversized = configure("secretive", secret_config(canary("oversized")))
    return [
        configure("secretive", {"endpoint": 5, "api_key": canary("wrong-type")}),
        configure("secretive", {"endpoint": "e", "api_key": [canary("nested-wrong-type")]}),
        configure("secretive", {"endpoint": "e", "api_key": "k", "extra": canary("extra")}),
        configure("secretive", {"endpoint": "e", "api_key": "k", "mode": canary("enum")}),
        configure("secretive", {"endpoint": {"u": canary("endpoint-object")}, "api_key": "k"}),
        configure("secretive", {"endpoint": "e", "api_key": "k", "auth": {"x": deep}}),
        configure("nope", secret_config(canary("unknown-toolkit"))),
        configure("secretive", canary("config-not-object")),
        configure("secretive", secret_config(canary("version")), version="2.0"),
        duplicate,
        oversized[:-1] + b', "pad": "' + b"p" * MAX_MESSAGE_BYTES + b'"}',
        configure("secretive", {"endpoint": "e", "api_key": "k", "auth": {"pin": SECRET_NUMBER}}),
    ]


def database_dump(vault: Vault) -> bytes:
    """Every value of every table, as a reader of a dump or backup would see it."""
    out = bytearray()
    with vault.store.engine.connect() as db:
        for table in Base.metadata.sorted_tables:
            for row in db.execute(select(table)):
                for value in row:
                    out += (
                        bytes(value)
                        if isinstance(value, bytes | memoryview)
                        else str(value).encode()
                    )
                    out += b"\n"
    return bytes(out)


def test_no_secret_in_any_byte_written(
    debug_log: Path, vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    canary = Canaries()
    pushed: list[Any] = []

    # The service API, called directly.
    session, _ = vault.open_session(AGENT, None)
    request = ToolkitConfigureRequest(toolkit_name="secretive", config=secret_config(canary("api")))
    canary.saw("api", vault.configure(AGENT, session, request).model_dump_json())
    invalid = {"endpoint": 5, "api_key": canary("api-invalid")}
    with pytest.raises(ConfigInvalid) as caught:
        vault.configure(
            AGENT, session, ToolkitConfigureRequest(toolkit_name="secretive", config=invalid)
        )
    canary.raised("api-invalid", caught.value)

    # A connection: each status, each refusal, malformed messages.
    conn = connect(vault, AGENT, pushed.append)
    resumable = ""
    for raw in (
        HANDSHAKE,
        configure("secretive", secret_config(canary("ok"))),
        configure("secretive", secret_config(canary("partial"), mode="partial")),
        configure("secretive", secret_config(canary("plugin-fails"), mode="fail")),
        *bad_messages(canary),
    ):
        for out in conn.handle_raw(raw):
            canary.saw("connection", out)
            resumable = resumable or json.loads(out).get("session_id", "")
    canary.values["number"] = str(SECRET_NUMBER)

    # A resume in a new process: every stored config decrypted and initialized again.
    restarted = open_vault(home)
    try:
        again = connect(restarted, AGENT, pushed.append)
        hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": resumable}
        for out in again.handle_raw(line(hello)) + again.handle_raw(
            line({"type": "toolkit/list/req"})
        ):
            canary.saw("resume", out)
    finally:
        restarted.store.engine.dispose()

    # The stdio shell, in this process.
    stdin = io.BytesIO(
        b"\n".join(
            [
                HANDSHAKE,
                configure("secretive", secret_config(canary("serve-stdio"))),
                configure("secretive", secret_config(canary("serve-stdio-fail"), mode="fail")),
                configure("secretive", {"endpoint": 1, "api_key": canary("serve-stdio-bad")}),
            ]
        )
        + b"\n"
    )
    stdout = io.StringIO()
    serve_stdio(vault, AGENT, stdin, stdout)
    canary.saw("serve_stdio", stdout.getvalue())

    # A real `toolkit-vault stdio` process, everything logged at DEBUG to its stderr.
    debug = [sys.executable, str(HERE / "debug_cli.py"), "stdio"]
    process = StdioChannel(cli_env, argv=debug)
    for raw in (
        configure("secretive", secret_config(canary("stdio"))),
        configure("secretive", secret_config(canary("stdio-fail"), mode="fail")),
        configure("secretive", {"endpoint": "e", "api_key": [canary("stdio-invalid")]}),
        configure("secretive", canary("stdio-malformed")),
    ):
        for out in process.exchange(raw):
            canary.saw("stdio", json.dumps(out))
    stderr = process.close()
    assert "DEBUG sqlalchemy.engine" in stderr and "INSERT INTO config_versions" in stderr
    canary.saw("stdio stdout", bytes(process.raw_stdout))
    canary.saw("stdio stderr", stderr)

    # An imported MCP package, configured.
    report = import_package(vault.store, vault.registry, PACKAGE.read_bytes(), "local")
    canary.saw("import", json.dumps(report.as_json()))
    canary.values["package-default"] = PACKAGE_DEFAULT_SECRET
    tracker = {
        "tracker_api_token": canary("import-token"),
        "tracker_webhook_secret": canary("import-webhook"),
        "tracker_base_url": "https://tracker.example.test",
    }
    for out in conn.handle_raw(configure("io.github.example/issue-tracker", tracker)):
        canary.saw("import configure", out)

    # A session to purge.
    doomed = connect(vault, AGENT)
    doomed_session = json.loads(doomed.handle_raw(HANDSHAKE)[0])["session_id"]
    doomed.handle_raw(configure("secretive", secret_config(canary("purged"))))

    # Operators and auditors on the command line (in this process: its logs are captured).
    for args in (
        ["keys", "rotate", "--json"],
        ["keys", "rotate", "--vault-key", "--json"],
        ["keys", "rotate", "--vault-key", "--dry-run"],
        ["check", "--json"],
        ["check"],
        ["history", "--json"],
        ["history"],
        ["audit", "verify", "--json"],
        ["audit", "verify"],
        ["purge", "--session", doomed_session, "--yes", "--json"],
        ["keys", "status", "--json"],
        ["toolkits", "list", "--json"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        canary.saw(" ".join(args), result.stdout + result.stderr)
    for message in pushed:
        canary.saw("pushed", message.model_dump_json())

    key_doc = json.loads((home.home / "master-keys.json").read_text())
    masters: dict[str, str | bytes] = {
        kek_id: base64.b64decode(key) for kek_id, key in key_doc["keys"].items()
    }
    assert sorted(masters) == ["kek-1", "kek-2"]  # the rotation ran
    masters |= vault_keys()
    assert sorted(masters)[-2:] == ["vk-1", "vk-2"]

    blobs = [
        *canary.seen,
        ("database dump", database_dump(vault)),
        *[(f"home/{name}", data) for name, data in files_under(home.home)],
    ]
    vault.store.engine.dispose()  # SQLite: the WAL is checkpointed into the file
    blobs += [(f"home (closed)/{name}", data) for name, data in files_under(home.home)]
    blobs.append(("debug log", debug_log.read_bytes()))
    assert len(canary.values) >= 25
    assert b"sqlalchemy.engine" in debug_log.read_bytes()
    assert scan(blobs, dict(canary.values)) == []
    assert scan([b for b in blobs if not b[0].endswith("master-keys.json")], masters) == []


def vault_keys() -> dict[str, str | bytes]:
    """Every live vault key, unwrapped as a process at start unwraps them."""
    opened = open_vault(load_settings(), registry=ToolkitRegistry())
    try:
        return {key_id: key.reveal() for key_id, key in opened.ring._keys.items()}
    finally:
        opened.store.engine.dispose()


def through_a_transport(canary: Canaries, prefix: str) -> list[bytes]:
    """Each configure path once, each canary named after the transport that carried it."""

    def named(label: str) -> str:
        return canary(prefix + label)

    return [
        configure("secretive", secret_config(named("ok"))),
        configure("secretive", secret_config(named("partial"), mode="partial")),
        configure("secretive", secret_config(named("plugin-fails"), mode="fail")),
        configure("secretive", {"endpoint": "e", "api_key": [named("invalid")]}),
        *bad_messages(named),
    ]


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """The server's log records (its stderr also holds the start-up banner, in plain text)."""
    return [json.loads(text) for text in stderr.splitlines() if text.startswith("{")]


def test_no_secret_through_http_and_websocket(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """A real `toolkit-vault serve`, logging JSON lines at DEBUG with SQL echo and no
    redaction: canaries configured over a WebSocket (then resumed on another) and over HTTP
    POST (ok, partial, a plugin failing with the api_key in its exception, invalid, refused,
    malformed, oversized), and where a header or the URL would carry one. The server's
    stderr and stdout, every HTTP response (status line, headers, body), every WebSocket
    frame, the database files and WAL (server running, then stopped) and a dump: no canary,
    no bearer token, no master key."""
    canary = Canaries()
    debug = [sys.executable, str(HERE / "debug_cli.py"), "serve"]
    server = ServeProcess(vault, cli_env, argv=debug)
    canary.values["bearer token"] = server.token
    seen: list[tuple[str, bytes]] = []
    try:
        socket = WebSocketChannel(server)
        answers = [socket.exchange(raw)[0] for raw in through_a_transport(canary, "websocket-")]
        resumed = WebSocketChannel(server, socket.session_id)  # initialized again, from the store
        http = HttpChannel(server)
        answers += [http.exchange(raw)[0] for raw in through_a_transport(canary, "http-")]
        outcomes = [answer.get("status", answer.get("code")) for answer in answers]
        assert outcomes[:4] == outcomes[16:20] == ["ok", "partial", "error", "RUNTIME_ERROR"]
        assert all(answer["type"] == "error" for answer in answers[4:16] + answers[20:])
        listing = line({"type": "toolkit/list/req"})
        # A session id is no secret (SQL echo shows the lookup), but no answer repeats it.
        # Its marker holds letters no hex id (message ids, request ids) can contain.
        status, body = http.post(listing, headers={"A2E-Session": "tkv-no-such-session zq9x"})
        assert status == 200 and json.loads(body)["message"] == "unknown session"
        assert b"zq9x" not in body
        query = "/a2e?api_key=" + urllib.parse.quote(canary("query"), safe="")
        assert http.post(listing, path=query)[0] == 200
        bearer = {"Authorization": "Bearer " + canary("bad-token")}
        assert http.post(listing, headers=bearer)[0] == 401
        seen += [(f"home (serving)/{name}", data) for name, data in files_under(home.home)]
        for channel in (socket, resumed, http):
            channel.close()
    finally:
        stderr = server.stop()
    canary.values["number"] = str(SECRET_NUMBER)

    records = json_lines(stderr)
    assert any(
        r["logger"].startswith("sqlalchemy.engine") and r["level"] == "debug" for r in records
    )
    assert "INSERT INTO config_versions" in stderr and "Traceback" not in stderr
    logged = [r for r in records if r["message"] == "request" and r.get("path") == "/a2e"]
    assert len(logged) == len(http.responses)  # every POST, the refused ones too
    key_doc = json.loads((home.home / "master-keys.json").read_text())
    masters: dict[str, str | bytes] = {
        kek_id: base64.b64decode(key) for kek_id, key in key_doc["keys"].items()
    }
    masters |= vault_keys()
    seen += [
        ("serve stderr", stderr.encode()),
        ("serve stdout", bytes(server.stdout)),
        *[(f"websocket frame {n}", frame) for n, frame in enumerate(socket.frames)],
        *[(f"resumed frame {n}", frame) for n, frame in enumerate(resumed.frames)],
        *[(f"http response {n}", response) for n, response in enumerate(http.responses)],
        ("database dump", database_dump(vault)),
    ]
    vault.store.engine.dispose()  # SQLite: the WAL is checkpointed into the file
    seen += [(f"home (stopped)/{name}", data) for name, data in files_under(home.home)]
    assert len(canary.values) >= 30
    assert scan(seen, dict(canary.values)) == []
    assert scan([b for b in seen if not b[0].endswith("master-keys.json")], masters) == []


def test_the_scan_finds_every_spelling() -> None:
    secret = "tkv-canary scan/9c+1e=5b&2d"
    raw = secret.encode()
    spelled = [
        raw,
        base64.b64encode(b"x" + raw + b"yz"),
        base64.urlsafe_b64encode(b"xy" + raw),
        raw.hex().encode(),
        raw.hex().upper().encode(),
        b"q=" + urllib.parse.quote(raw).encode(),
        urllib.parse.quote_plus(raw).encode(),
    ]
    for n, data in enumerate(spelled):
        assert scan([(f"blob {n}", b"<" + data + b">")], {"s": secret}), data
    assert scan([("clean", b"tkv-canary scan/9c+1e=5b&2e")], {"s": secret}) == []


LEAKY_PLUGINS = HERE / "leaky_plugins"
# What the leaky plugin writes, each with its key redacted (see tkv_leaky_plugins).
LEAKY_LINES = (
    "plugin logger: connecting with [REDACTED]",
    "f-string: '[REDACTED]'",
    "root logger: [REDACTED]",
    "(a log message whose arguments do not fit it: not shown)",
    "log.exception: login failed",
    "RuntimeError: login refused for [REDACTED]",
    "own handler: [REDACTED]",
    "UserWarning: warnings.warn: [REDACTED]",
    "uncaught exception in thread leaky",
    "ValueError: thread dies holding [REDACTED]",
    "after basicConfig(force=True): [REDACTED]",
)


def test_a_plugin_logging_its_key_under_stdio_shows_none(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A real `toolkit-vault stdio`, as an operator runs it (no debug logging), with a plugin
    that sends its decrypted key to stderr every way it can: its own logger, the root logger,
    the key in the message itself, arguments that do not fit the message, `log.exception`
    with the key in the exception, a handler of its own on a logger that does not propagate,
    `warnings.warn`, a thread that dies with it, and the root logger's handlers replaced
    (`basicConfig(force=True)`). Configured, then resumed in a second process (initialized
    again from the store): each line is there, redacted; stdout is protocol only; the key
    appears in no spelling on either."""
    canary = Canaries()
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(LEAKY_PLUGINS), cli_env["PYTHONPATH"]])}
    config = {"api_key": canary("stdio-plugin-logs")}
    seen: list[tuple[str, bytes]] = []
    session = None
    for run in ("configure", "resume"):
        with (tmp_path / f"{run}.stderr").open("wb") as sink:
            process = StdioChannel(env, session, stderr=sink)
            session = process.session_id
            if run == "configure":
                (answer, event) = process.exchange(configure("leaky-logger", config))
                assert (answer["status"], event["configured"]) == ("ok", True)
            process.close()
        stderr = (tmp_path / f"{run}.stderr").read_text()
        for expected in LEAKY_LINES:
            assert stderr.count(expected) == 1, (run, expected, stderr)
        assert all(json.loads(out) for out in process.raw_stdout.splitlines())
        seen += [(f"{run} stderr", stderr.encode()), (f"{run} stdout", bytes(process.raw_stdout))]
    assert scan(seen, dict(canary.values)) == []


def test_a_plugin_logging_its_key_under_serve_shows_none(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    """The same plugin under a real `toolkit-vault serve`: the server's redaction was a
    filter on its own log handler, which a plugin's own handler (or the root handlers it
    replaces) never passes through; every record is redacted as it is made there too."""
    canary = Canaries()
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(LEAKY_PLUGINS), cli_env["PYTHONPATH"]])}
    server = ServeProcess(vault, env)
    try:
        channel = HttpChannel(server)
        (answer,) = channel.exchange(configure("leaky-logger", {"api_key": canary("serve-logs")}))
        assert answer["status"] == "ok", answer
        channel.close()
    finally:  # not `stop()`: the plugin replaced the root handlers, uvicorn's last line too
        server.proc.terminate()
        server.proc.wait(timeout=30)
        for pump in server._pumps:
            pump.join(timeout=30)
    assert b"own handler: [REDACTED]" in server.stderr
    seen = [("serve stderr", bytes(server.stderr)), ("serve stdout", bytes(server.stdout))]
    assert scan(seen, dict(canary.values)) == []
