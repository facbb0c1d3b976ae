"""Checking a credential before it is stored: the toolkit's own `verify(config)`, or the
one HTTP request its schema's `x-verify` describes (`schema.verify_spec`).

The request is made by the server, never by the agent, and is built to be SSRF-safe: the
host is resolved once and the connection made to that address (so a second answer of the
name, DNS rebinding, cannot move it), an address that is not globally routable (private,
loopback, link-local, reserved, multicast) is refused unless an operator allows its range
(`TOOLKIT_VAULT_VERIFY_ALLOW`, comma-separated CIDRs), redirects are never followed (a 3xx
fails the check), no proxy from the environment is used, and it reads at most a bounded
number of bytes. One deadline bounds the whole check (resolving, connecting, the head and
the body): the exchange runs on a thread of its own that is waited for no longer, since a
timeout per read lets an answer dripped a byte at a time last for ever. Any agent can start
a check (its `base_url` may name its own slow server), so a process has at most
`MAX_CHECKS` in flight and refuses one more without waiting (`CheckSlots`); `serve` runs the
configures that check on threads of their own, never on those other agents need. What a
failure says names the check, the host and the status or the kind of failure; never the
config, the secret or the URL (its query may hold the secret).

A passing check may also say when the credential ends (`core.expiry`): the plugin's
`verify` returning that time instead of None, or the header or JSON field the `x-verify`
names; `verify_credential` returns it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit_vault.core.expiry import earliest, read_expiry
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.schema.verify_spec import VerifySpec
from toolkit_vault.toolkits.launches import ServerCheckFailed
from toolkit_vault.toolkits.registry import RegisteredToolkit

if TYPE_CHECKING:  # the HTTP client loads at a first credential check, not with the vault
    import httpx

__all__ = [
    "ALLOW_VARIABLE",
    "MAX_CHECKS",
    "CheckLog",
    "CheckResult",
    "CheckSlots",
    "CredentialRejected",
    "PluginChecks",
    "VerifyPolicy",
    "verify_credential",
]

ALLOW_VARIABLE = "TOOLKIT_VAULT_VERIFY_ALLOW"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


MAX_CHECKS = 8  # credential checks in flight in one process; one more is refused, no wait
BUSY = "too many credential checks in flight; nothing was stored, try again in a few seconds"


class CredentialRejected(ConfigInvalid):
    """The credential check failed; the message names what failed, never a value. A config
    error like any other: nothing is stored, and an intake form stays open to correct it."""

    def __init__(self, message: str, pointer: str = "") -> None:
        detail = {"pointer": pointer, "keyword": "x-verify", "message": message}
        super().__init__(message, details=[detail])


@dataclass(frozen=True)
class VerifyPolicy:
    """Where a check may connect and for how long. `allow`: ranges an operator opened
    besides the public internet; `deadline`: seconds for the whole check."""

    allow: tuple[Network, ...] = ()
    deadline: float = 5.0
    max_bytes: int = 64 * 1024

    @classmethod
    def parse(cls, text: str | None) -> VerifyPolicy:
        """From the operator's comma-separated CIDRs (raises VaultError on a bad one)."""
        ranges: list[Network] = []
        for item in (text or "").split(","):
            if item.strip():
                try:
                    ranges.append(ipaddress.ip_network(item.strip(), strict=False))
                except ValueError:
                    raise VaultError(f"{ALLOW_VARIABLE}: {item.strip()!r} is not a CIDR") from None
        return cls(tuple(ranges))

    @classmethod
    def from_environment(cls) -> VerifyPolicy:
        return cls.parse(os.environ.get(ALLOW_VARIABLE))

    def permits(self, address: Address) -> bool:
        """Public, or in an allowed range: judged with every IPv4 address an IPv6 spelling
        carries (NAT64, 6to4, Teredo, IPv4-mapped or -compatible), by `addresses`."""
        from toolkit_vault.addresses import permitted

        return permitted(address, self.allow)


class CheckSlots:
    """At most `limit` credential checks in flight in this process. Each holds a thread and
    an outbound connection for up to its deadline; one more is refused without waiting (a refusal
    like any failed check), not queued behind them."""

    def __init__(self, limit: int = MAX_CHECKS) -> None:
        self._free = threading.BoundedSemaphore(limit)

    @contextlib.contextmanager
    def taken(self) -> Iterator[None]:
        if not self._free.acquire(blocking=False):
            raise CredentialRejected(BUSY)
        try:
            yield
        finally:
            self._free.release()


class PluginChecks:
    """Which toolkits have a `verify(config)` of their own, looked up once per registered
    toolkit: a configure of a toolkit without one then makes no instance only to look.

    Keyed by name, and believed only for the very `RegisteredToolkit` it was learnt from:
    the live registry replaces a toolkit by a new object when its import changes (and
    keeps the object while it does not), so a re-imported toolkit is looked at again."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[RegisteredToolkit, bool]] = {}

    def instance(self, toolkit: RegisteredToolkit) -> Any | None:
        """A fresh instance whose `verify` to call, or None when the toolkit has none."""
        known = self._known.get(toolkit.definition.name)
        if known is not None and known[0] is toolkit and not known[1]:
            return None
        instance = toolkit.factory()
        verifies = callable(getattr(instance, "verify", None))
        self._known[toolkit.definition.name] = (toolkit, verifies)
        return instance if verifies else None

    def known(self, toolkit: RegisteredToolkit) -> bool | None:
        """Whether the toolkit has a `verify`, if already looked up (None: not yet)."""
        known = self._known.get(toolkit.definition.name)
        return known[1] if known is not None and known[0] is toolkit else None

    def verifies(self, toolkit: RegisteredToolkit) -> bool:
        """Whether the toolkit has a `verify` (an instance made only when not yet known)."""
        known = self._known.get(toolkit.definition.name)
        if known is not None and known[0] is toolkit:
            return known[1]
        return self.instance(toolkit) is not None

    def describe(self, toolkit: RegisteredToolkit) -> str:
        """What checks a toolkit's credential, in words for the console (no value)."""
        spec = toolkit.schema.verify
        found = []
        if self.verifies(toolkit):
            found.append("its plugin's verify(config)")
        if spec is not None:
            found.append(f"x-verify: {spec.method} {spec.url}")
        return "; ".join(found)


@dataclass(frozen=True)
class CheckResult:
    """A check's outcome as the console shows it: when, passed or not, the message the
    agent or person read (never a value), and the credential's end if it told one."""

    at: float
    passed: bool
    message: str
    expires_at: float | None = None


class CheckLog:
    """The last check of each toolkit's credential made by this process (any scope):
    what an operator looks at when a key starts failing. Not kept across restarts: the
    refusals themselves are audit events (`configure_refused`, `intake_refused`)."""

    def __init__(self) -> None:
        self._last: dict[str, CheckResult] = {}

    def note(self, toolkit_name: str, result: CheckResult) -> None:
        self._last[toolkit_name] = result

    def last(self) -> dict[str, CheckResult]:
        return dict(self._last)


def verify_credential(
    toolkit: RegisteredToolkit,
    config: Mapping[str, Any],
    policy: VerifyPolicy,
    plugins: PluginChecks | None = None,
) -> float | None:
    """Run the toolkit's checks on a validated config; raises CredentialRejected. A toolkit
    without a check passes, as before. Returns when the credential ends, if a check said
    (epoch seconds). `plugins`: the vault's lookup of who has a `verify` (None: looked up
    afresh)."""
    until = time.monotonic() + policy.deadline  # one deadline for every check of it
    ends: list[float | None] = []
    instance = (plugins or PluginChecks()).instance(toolkit)
    if instance is not None:
        ends.append(_plugin_check(instance, config, policy.deadline, until))
    spec = toolkit.schema.verify
    if spec is not None:
        ends.append(_http_check(spec, config, policy, until))
    return earliest(ends)


def _plugin_check(
    instance: Any, config: Mapping[str, Any], deadline: float, until: float
) -> float | None:
    """The plugin's `verify(config)`, on a thread with a deadline (it cannot be killed when
    late, only no longer waited for). False or raising fails; its own words are not kept.
    A time returned (a datetime, epoch seconds, `{"expires_at": ...}`) is the expiry."""
    check: Callable[[dict[str, Any]], Any] = instance.verify
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(check(dict(config)))
        except Exception as exc:
            result.append(exc)

    worker = threading.Thread(target=run, name="toolkit-verify", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    if not result:
        raise CredentialRejected(f"the credential check did not answer within {deadline:g} s")
    if isinstance(result[0], ServerCheckFailed):  # the vault's own words: it says why
        raise CredentialRejected(f"the credential check failed: {result[0].message}")
    if isinstance(result[0], Exception):
        kind = type(result[0]).__name__
        raise CredentialRejected(f"the credential check failed ({kind})")
    if result[0] is False:
        raise CredentialRejected("the credential check failed: the toolkit refused it")
    answer = result[0]
    if isinstance(answer, Mapping):
        answer = answer.get("expires_at")
    return read_expiry(answer)


def _url(spec: VerifySpec, config: Mapping[str, Any]) -> urllib.parse.SplitResult:
    """The URL from public fields: a leading `{field}` as written (a base URL), any other
    placeholder percent-encoded whole, so a value cannot add a path, query or host."""
    values: dict[str, str] = {}
    for index, name in enumerate(spec.url_fields):
        value = config.get(name)
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise CredentialRejected(f"the credential check needs the field {name}", f"/{name}")
        text = str(value)
        leading = index == 0 and spec.url.startswith("{")
        values[name] = text.rstrip("/") if leading else urllib.parse.quote(text, safe="")
    parts = urllib.parse.urlsplit(spec.url.format(**values))
    if parts.scheme not in ("https", "http") or not parts.hostname or "@" in parts.netloc:
        raise CredentialRejected("the credential check's URL is not an http(s) URL")
    return parts


def _resolve(host: str, port: int, policy: VerifyPolicy) -> Address:
    """The one address the check connects to: resolved once, every answer allowed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise CredentialRejected(f"the credential check could not resolve {host}") from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not addresses or not all(policy.permits(a) for a in addresses):
        raise CredentialRejected(
            f"the credential check may not reach {host}: its address is not public "
            f"(an operator may allow it with {ALLOW_VARIABLE})"
        )
    return addresses[0]


def _http_check(
    spec: VerifySpec, config: Mapping[str, Any], policy: VerifyPolicy, until: float
) -> float | None:
    """`_exchange` on a thread of its own, waited for until `until` and no longer: a late
    one has its client closed (its next read fails, so the thread ends) and fails."""
    parts = _url(spec, config)
    outcome: list[Any] = []
    clients: list[httpx.Client] = []

    def run() -> None:
        try:
            outcome.append(_exchange(spec, config, policy, parts, until, clients))
        except BaseException as exc:  # handed to the waiting caller
            outcome.append(exc)

    worker = threading.Thread(target=run, name="toolkit-verify-http", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    if not outcome:
        for client in list(clients):
            with contextlib.suppress(Exception):
                client.close()
        raise CredentialRejected(
            f"the credential check did not answer within {policy.deadline:g} s ({parts.hostname})"
        )
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    found: float | None = outcome[0]
    return found


def _exchange(
    spec: VerifySpec,
    config: Mapping[str, Any],
    policy: VerifyPolicy,
    parts: urllib.parse.SplitResult,
    until: float,
    clients: list[httpx.Client],
) -> float | None:
    """The check's request and its answer (raises CredentialRejected); each step's timeout
    is what is left of the deadline, and `_http_check` bounds them all together."""
    host = parts.hostname or ""
    secret = config.get(spec.secret)
    if not isinstance(secret, str | int) or isinstance(secret, bool):
        raise CredentialRejected(f"the credential check needs the field {spec.secret}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = _resolve(host, port, policy)
    literal = f"[{address}]" if address.version == 6 else str(address)
    target = parts._replace(netloc=f"{literal}:{port}").geturl()
    headers = {
        "Host": parts.netloc.rsplit("@", 1)[-1],
        "User-Agent": "toolkit-vault-verify",
        "Accept-Encoding": "identity",  # the bound counts the bytes read, not inflated ones
    }
    params: dict[str, str] = {}
    if spec.header is not None:
        headers[spec.header] = spec.value.format(secret=str(secret))
    else:
        params[spec.query or ""] = str(secret)
    import httpx

    remaining = max(0.05, until - time.monotonic())
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    try:
        with httpx.Client(
            follow_redirects=False, trust_env=False, timeout=httpx.Timeout(remaining)
        ) as client:
            clients.append(client)
            request = client.build_request(
                spec.method, target, headers=headers, params=params, extensions=extensions
            )
            response = client.send(request, stream=True)
            body = bytearray()
            try:
                for chunk in response.iter_raw():
                    body += chunk
                    late = time.monotonic() > until
                    if len(body) > policy.max_bytes or late:
                        body.clear()  # cut short: the status is all the check has
                        break
            finally:
                response.close()
    except httpx.TimeoutException:
        raise CredentialRejected(
            f"the credential check did not answer within {policy.deadline:g} s ({host})"
        ) from None
    except httpx.HTTPError as exc:
        kind = type(exc).__name__
        raise CredentialRejected(f"the credential check could not reach {host} ({kind})") from None
    status = response.status_code
    if 300 <= status < 400:
        raise CredentialRejected(
            f"the credential check failed: HTTP {status} from {host} (redirects are not followed)"
        )
    if status not in spec.expect:
        raise CredentialRejected(f"the credential check failed: HTTP {status} from {host}")
    if spec.expires_header is not None:
        return read_expiry(response.headers.get(spec.expires_header))
    if spec.expires_pointer is not None:
        return read_expiry(_at_pointer(bytes(body), spec.expires_pointer))
    return None


def _at_pointer(body: bytes, pointer: str) -> Any:
    """The JSON value at `pointer` in a response body; None when there is none."""
    try:
        found: Any = json.loads(body)
        for token in pointer_tokens(pointer):
            found = found[int(token)] if isinstance(found, list) else found[token]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    return found
