"""Audit lines as syslog messages (RFC 5424), over UDP (RFC 5426) or TCP (RFC 6587).

Each event is one message: `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID - MSG`, the
timestamp the event's own (UTC, milliseconds), MSGID its action, no structured data, and
MSG the event's JSON line (`export.event_line`, ASCII, so no BOM). Over TCP each message is
framed by octet counting (`LEN SP MSG`), so a receiver never guesses where one ends. A UDP
datagram is one message; one that does not fit (64 KiB) fails on that device.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import socket
import struct
import termios
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from toolkit_vault.errors import VaultError

__all__ = ["FACILITIES", "SyslogTarget", "frame", "message", "parse_target"]

_NAMES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron")
FACILITIES = {name: number for number, name in enumerate((*_NAMES, "authpriv", "ftp"))} | {
    f"local{n}": 16 + n for n in range(8)
}
SEVERITY_INFO = 6
RETRY_MIN_S, RETRY_MAX_S = 0.5, 30.0
BUFFER_BYTES = 65536  # a TCP device's SO_SNDBUF (the kernel doubles it), unless `buffer=`
_NAME = re.compile(r"[!-~]{1,48}")  # RFC 5424 APP-NAME: printable ASCII, no space


class SyslogTarget:
    """One syslog receiver (`transport` "udp" or "tcp"). `send` raises `OSError` when the
    messages were not handed to the network; after a failure it waits (0.5 s, doubling
    to 30 s) before connecting again, failing at once meanwhile, so a dead receiver costs
    a send at most one connect timeout per wait.

    TCP: a send is taken once its bytes are written to the socket within `timeout`
    (`buffer`, SO_SNDBUF, bounds what the kernel holds for a receiver that lags: bytes
    there are not delivered, and TCP says no more). A send that ran out of time keeps its
    connection, and the unwritten rest of the message it cut (`_pending`, written first
    next time, so the framing holds); until the receiver's TCP has acknowledged every
    byte written before, every send fails at once. It is never retried on a new
    connection: a receiver that accepts and never reads would take a new connection's
    first bytes into fresh buffers and hide that it reads nothing. A new connection is
    made only once the receiver closed the old one (restarted) or it broke."""

    def __init__(
        self,
        transport: str,
        host: str,
        port: int,
        *,
        facility: int = FACILITIES["auth"],
        app: str = "toolkit-vault",
        timeout: float = 2.0,
        buffer: int = BUFFER_BYTES,
    ) -> None:
        self.transport, self.host, self.port = transport, host, port
        self.facility, self.app, self.timeout = facility, app, timeout
        self.buffer = buffer  # SO_SNDBUF: what the kernel may hold for a receiver that lags
        self.hostname = _hostname()
        self._sock: socket.socket | None = None
        self._retry_at = 0.0
        self._wait = RETRY_MIN_S
        self._pending = b""  # the rest of a message a send that timed out cut
        self._stuck = False  # the last send timed out: the next one does not wait

    @property
    def name(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"syslog+{self.transport}://{host}:{self.port}"

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None:
        messages = [message(self, e, line) for e, line in zip(events, lines, strict=True)]
        sock = self._connected()
        try:
            if self.transport == "tcp":
                self._stream(sock, [frame(m) for m in messages])
            else:
                for m in messages:
                    sock.send(m)
        except TimeoutError:
            raise  # (TCP) the connection stays, stuck: see the class
        except OSError:
            self.close()
            self._back_off()
            raise
        self._wait = RETRY_MIN_S

    def _stream(self, sock: socket.socket, frames: list[bytes]) -> None:
        """(TCP) The rest of a cut message, then `frames`, within one deadline. Raises
        TimeoutError when not all were written; after that, fails at once until the
        receiver's TCP acknowledged every byte written before (`_in_flight`)."""
        if self._stuck:
            held = _in_flight(sock)
            if held:
                raise TimeoutError(errno.ETIMEDOUT, "the receiver has not taken what it was sent")
            self._stuck = held is None  # (where it cannot tell: tried without waiting)
        pending = self._pending
        data = pending + b"".join(frames)
        sent = _written(sock, memoryview(data), 0.0 if self._stuck else self.timeout)
        if sent == len(data):
            self._pending, self._stuck = b"", False
            return
        self._stuck = True
        if sent < len(pending):
            self._pending = data[sent : len(pending)]
        else:  # the frame it stopped in keeps its rest; the frames after it are dropped
            end = len(pending)
            for piece in frames:
                start, end = end, end + len(piece)
                if sent < end:
                    self._pending = data[sent:end] if sent > start else b""
                    break
        raise TimeoutError(errno.ETIMEDOUT, "the receiver is not reading")

    def _connected(self) -> socket.socket:
        sock = self._sock
        if sock is not None and self.transport == "tcp" and _peer_closed(sock):
            self.close()  # the receiver went away (restarted): a send would vanish into it
            sock = None
        if sock is None:
            now = time.monotonic()
            if now < self._retry_at:
                raise ConnectionError(f"waiting {self._retry_at - now:.1f} s to connect again")
            try:
                sock = self._connect()
            except OSError:
                self._back_off()
                raise
            self._sock = sock
        return sock

    def _back_off(self) -> None:
        self._retry_at = time.monotonic() + self._wait
        self._wait = min(self._wait * 2, RETRY_MAX_S)

    def _connect(self) -> socket.socket:
        if self.transport == "tcp":
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer)
            return sock
        family, kind, proto, _, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_DGRAM
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.settimeout(self.timeout)
        sock.connect(address)  # so an ICMP "port unreachable" fails the next send
        return sock

    def close(self) -> None:
        self._pending, self._stuck = b"", False  # a new connection starts on a message
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _in_flight(sock: socket.socket) -> int | None:
    """Bytes written to the socket that the receiver's TCP has not acknowledged (Linux's
    SIOCOUTQ); None where that cannot be read."""
    try:
        held = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (AttributeError, OSError):
        return None
    return int(struct.unpack("i", held)[0])


def _written(sock: socket.socket, data: memoryview, wait: float) -> int:
    """How much of `data` the socket took within `wait` seconds (0: without waiting)."""
    sent = 0
    deadline = time.monotonic() + wait
    while sent < len(data):
        sock.settimeout(max(deadline - time.monotonic(), 0.0))  # 0.0: non-blocking
        try:
            sent += sock.send(data[sent:])
        except (TimeoutError, BlockingIOError):
            break
    return sent


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the receiver closed its end (readable with nothing to read); anything it
    sent is discarded (a syslog receiver sends nothing)."""
    try:
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(4096, socket.MSG_DONTWAIT):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


def message(target: SyslogTarget, event: Mapping[str, Any], line: bytes) -> bytes:
    """One RFC 5424 message for `event`, whose JSON line is `line`."""
    pri = target.facility * 8 + SEVERITY_INFO
    stamp = datetime.fromtimestamp(event["ts"], UTC).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    msgid = str(event["action"])[:32] or "-"
    header = f"<{pri}>1 {stamp} {target.hostname} {target.app} {os.getpid()} {msgid} - "
    return header.encode("ascii") + line.rstrip(b"\n")


def frame(msg: bytes) -> bytes:
    """RFC 6587 octet counting: the message's length in bytes, a space, the message."""
    return b"%d %s" % (len(msg), msg)


def _hostname() -> str:
    name = "".join(c for c in socket.gethostname() if "!" <= c <= "~")[:255]
    return name or "-"


def parse_target(spec: str) -> SyslogTarget:
    """`syslog+udp://HOST[:PORT][?facility=F&tag=NAME&timeout=S&buffer=BYTES]` (or
    `syslog+tcp://`), port 514 by default; VaultError naming what is wrong (never a user
    or password)."""
    url = urlsplit(spec)
    transport = url.scheme.removeprefix("syslog+")
    shown = f"{url.scheme}://{url.hostname or ''}"
    try:
        port = url.port or 514
    except ValueError:
        raise VaultError(f"audit device {shown}: the port is not a number 1-65535") from None
    if url.username is not None or url.password is not None:
        raise VaultError(f"audit device {url.scheme}: a syslog URL takes no user or password")
    if transport not in ("udp", "tcp") or not url.hostname or url.path not in ("", "/"):
        raise VaultError(f"audit device {shown}: expected syslog+udp:// or syslog+tcp://HOST:PORT")
    options: dict[str, Any] = {}
    for key, value in parse_qsl(url.query, keep_blank_values=True):
        if key == "facility" and value in FACILITIES:
            options["facility"] = FACILITIES[value]
        elif key == "tag" and _NAME.fullmatch(value):
            options["app"] = value
        elif key == "timeout" and _seconds(value):
            options["timeout"] = float(value)
        elif key == "buffer" and value.isdigit() and 4096 <= int(value) <= 16 << 20:
            options["buffer"] = int(value)  # (TCP only: a datagram is sent whole or not)
        else:
            raise VaultError(
                f"audit device {shown}: option {key!r} takes facility=auth|authpriv|daemon|"
                "local0..local7|..., tag=NAME (printable, up to 48), timeout=SECONDS or "
                "buffer=BYTES (4096 to 16 MiB)"
            )
    return SyslogTarget(transport, url.hostname, port, **options)


def _seconds(text: str) -> bool:
    try:
        return 0 < float(text) <= 60
    except ValueError:
        return False
