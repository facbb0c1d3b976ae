"""Slow clients against a real `toolkit-vault serve` (issue 35): a request body sent a byte
at a time, and one address opening more connections than the server has descriptors.

- `--body-timeout`: a body not in within the deadline after its head gets a 408 (an A2E
  error body) and the connection is closed; after an early answer (a refusal that did not
  wait for the body) the connection is closed without one; a later request on a kept-alive
  connection has the same deadline; a body that arrives in time, in pieces, is served.
- `--slow-connections-per-ip`: with 256 descriptors, 300 connections from one address that
  never finish their head leave the server serving everyone else at once (without the cap,
  the server runs out of descriptors and nothing is served until the header deadline).

Transport-level only, so SQLite alone.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from adversarial_support import CLI, ServeProcess

from test_http import _closed
from toolkit_vault.core.vault import Vault

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

HELLO = b'{"type":"handshake/req","capabilities":["toolkits"]}'


@contextlib.contextmanager
def serving(vault: Vault, env: dict[str, str], *argv: str) -> Iterator[ServeProcess]:
    server = ServeProcess(vault, env, list(argv))
    try:
        yield server
    finally:
        log = server.stop()
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


def _head(length: int, token: str | None = None, path: str = "/a2e") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    kind = "application/json" if path == "/a2e" else "application/x-www-form-urlencoded"
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: {kind}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _response(sock: socket.socket) -> bytes:
    """One whole response (head and `content-length` body): a single `recv` may return the
    head alone, leaving the body to be read as the next response's start."""
    got = bytearray()
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _drip_until_closed(
    socks: dict[str, socket.socket], within: float
) -> dict[str, tuple[float, bytes]]:
    """Send each socket a byte every 0.2 s until the server closes it; when it did (seconds
    from now) and what it answered before."""
    started = time.monotonic()
    got = {name: bytearray() for name in socks}
    closed: dict[str, tuple[float, bytes]] = {}
    for sock in socks.values():
        sock.setblocking(False)
    while len(closed) < len(socks) and time.monotonic() - started < within:
        for name, sock in socks.items():
            if name in closed:
                continue
            with contextlib.suppress(OSError):
                sock.send(b" ")
            try:
                while chunk := sock.recv(65536):
                    got[name] += chunk
                closed[name] = (time.monotonic() - started, bytes(got[name]))
            except BlockingIOError:
                pass
            except OSError:  # reset: closed too
                closed[name] = (time.monotonic() - started, bytes(got[name]))
        time.sleep(0.2)
    return closed


def test_a_body_sent_too_slowly_gets_408_and_the_connection_is_closed(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    with serving(vault, cli_env, CLI, "serve", "--body-timeout", "1") as server:
        address = ("127.0.0.1", server.port)
        names = ("a", "b", "c", "form")
        socks = {name: socket.create_connection(address, timeout=5) for name in names}
        socks["a"].sendall(_head(200, server.token) + b"{")  # read by the app: 408
        socks["b"].sendall(_head(200) + b"{")  # refused (401) before its body is read
        socks["form"].sendall(_head(200, path="/console/intake") + b"a")  # a FastAPI route
        kept = socks["c"]  # a first request served, then a second one dripped
        kept.sendall(_head(len(HELLO), server.token) + HELLO)
        first = _response(kept)
        assert first.startswith(b"HTTP/1.1 200"), first
        kept.sendall(_head(200, server.token) + b"{")
        with socket.create_connection(address, timeout=5) as prompt:  # in pieces, in time
            prompt.sendall(_head(len(HELLO), server.token) + HELLO[:10])
            time.sleep(0.5)
            prompt.sendall(HELLO[10:])
            assert prompt.recv(65536).startswith(b"HTTP/1.1 200")
        closed = _drip_until_closed(socks, within=6)
        for sock in socks.values():
            sock.close()
    assert set(closed) == set(names), f"still open after 6 s: {set(names) - set(closed)}"
    assert all(0.3 < after < 2.5 for after, _ in closed.values()), closed
    for name in ("a", "c", "form"):
        answer = closed[name][1]
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"connection: close" in answer.lower()
        error = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert (error["type"], error["code"]) == ("error", "INVALID_MESSAGE")
        assert error["details"] == [{"limit": "body_timeout", "max": 1.0}]
    assert closed["b"][1].startswith(b"HTTP/1.1 401"), closed["b"]
    assert closed["b"][1].count(b"HTTP/1.1 ") == 1  # no 408 after it ("408" may be in a time)


def test_one_address_cannot_hold_every_descriptor(vault: Vault, cli_env: dict[str, str]) -> None:
    """The attack of issue 35, with heads instead of bodies (both count): 300 connections
    from 127.0.0.1 against a server limited to 256 descriptors and a 30-second header
    deadline. All but 32 are closed at once, and a client on 127.0.0.2 is served."""
    argv = ["prlimit", "--nofile=256:256", CLI, "serve", "--header-timeout", "30"]
    with serving(vault, cli_env, *argv) as server:
        address = ("127.0.0.1", server.port)
        slow = [socket.create_connection(address, timeout=5) for _ in range(300)]
        for sock in slow:
            with contextlib.suppress(OSError):
                sock.sendall(b"POST /a2e HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with other:
            started = time.monotonic()
            health = other.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
            assert health.status_code == 200 and time.monotonic() - started < 2
        time.sleep(0.5)
        for sock in slow:
            sock.setblocking(False)
        held = [sock for sock in slow if not _closed(sock)]
        assert len(held) == 32, f"{len(held)} of 300 slow connections held"
        for sock in slow:
            sock.close()
        time.sleep(0.3)  # the server hears them go: 127.0.0.1 counts nothing again
        assert httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status_code == 200
