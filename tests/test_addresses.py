"""The address policy of the vault's own outgoing requests (issue 48, item 7): an IPv6
spelling that carries an IPv4 address (IPv4-mapped, IPv4-compatible, IPv4-translated,
NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo `2001::/32`) is judged
by the IPv4 address it carries, so loopback, private and link-local cannot pass disguised.
Pure: no socket is opened. Checked through `VerifyPolicy.permits`, which `x-verify`
checks use (import-time discovery uses the same module, `test_import_oauth`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest

from toolkit_vault.core.verification import VerifyPolicy

V4 = ipaddress.IPv4Address


def _low(prefix: str) -> Callable[[V4], str]:
    return lambda v4: str(ipaddress.IPv6Address(int(ipaddress.IPv6Address(prefix)) | int(v4)))


def _sixtofour(v4: V4) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | 1))


def _teredo_client(v4: V4) -> str:
    """RFC 4380 4: 2001:0:<server>:<flags>:<port>:<client>, the client's bits inverted."""
    server = int(V4("65.54.227.120"))
    return str(
        ipaddress.IPv6Address(
            (0x20010000 << 96)
            | (server << 64)
            | (0x8000 << 48)
            | (0x63BF << 32)
            | (~int(v4) & 0xFFFFFFFF)
        )
    )


def _teredo_server(v4: V4) -> str:
    client = ~int(V4("8.8.8.8")) & 0xFFFFFFFF
    return str(ipaddress.IPv6Address((0x20010000 << 96) | (int(v4) << 64) | client))


EMBEDDINGS: dict[str, Callable[[V4], str]] = {
    "IPv4": str,
    "IPv4-mapped ::ffff:a.b.c.d": _low("::ffff:0:0"),
    "IPv4-compatible ::a.b.c.d": _low("::"),
    "IPv4-translated ::ffff:0:a.b.c.d": _low("::ffff:0:0:0"),
    "NAT64 64:ff9b::/96": _low("64:ff9b::"),
    "NAT64 local-use 64:ff9b:1::/48": _low("64:ff9b:1::"),
    "6to4 2002::/16": _sixtofour,
    "Teredo client": _teredo_client,
    "Teredo server": _teredo_server,
}
NOT_PUBLIC = {
    "loopback": "127.0.0.1",
    "loopback, another": "127.1.2.3",
    "private 10/8": "10.1.2.3",
    "private 172.16/12": "172.16.0.1",
    "private 192.168/16": "192.168.1.1",
    "link-local (cloud metadata)": "169.254.169.254",
    "shared 100.64/10": "100.64.0.1",
    "unspecified": "0.0.0.0",  # noqa: S104
}
PUBLIC = "93.184.216.34"


@pytest.mark.parametrize("inner", list(NOT_PUBLIC.values()), ids=list(NOT_PUBLIC))
@pytest.mark.parametrize("embedding", list(EMBEDDINGS), ids=list(EMBEDDINGS))
def test_a_non_public_ipv4_is_refused_in_every_spelling(embedding: str, inner: str) -> None:
    spelled = ipaddress.ip_address(EMBEDDINGS[embedding](V4(inner)))
    assert not VerifyPolicy().permits(spelled), f"{spelled} ({embedding} of {inner})"


@pytest.mark.parametrize(
    "embedding",
    [
        "IPv4",
        "IPv4-mapped ::ffff:a.b.c.d",
        "IPv4-compatible ::a.b.c.d",
        "IPv4-translated ::ffff:0:a.b.c.d",
        "NAT64 64:ff9b::/96",  # an IPv6-only host reaching the IPv4 internet through DNS64
        "6to4 2002::/16",
    ],
)
def test_a_public_ipv4_is_allowed_in_spellings_that_route_to_it(embedding: str) -> None:
    assert VerifyPolicy().permits(ipaddress.ip_address(EMBEDDINGS[embedding](V4(PUBLIC))))


@pytest.mark.parametrize(
    "spelled",
    [
        "64:ff9b:1::5db8:d822",  # local-use NAT64 (RFC 8215): the network's own, never global
        "2001:0:4136:e378:8000:63bf:a247:29dd",  # Teredo: public server and client, still N/A
        "::1",
        "fe80::1",
        "fc00::1",
        "ff02::1",
    ],
)
def test_non_global_ipv6_ranges_are_refused_whatever_they_carry(spelled: str) -> None:
    assert not VerifyPolicy().permits(ipaddress.ip_address(spelled))


def test_a_native_public_ipv6_address_is_allowed() -> None:
    assert VerifyPolicy().permits(ipaddress.ip_address("2606:2800:220:1:248:1893:25c8:1946"))


def test_the_operator_s_allowed_ranges_still_work() -> None:
    """An allowed IPv4 range covers the spellings that reach it; it opens nothing else."""
    private = VerifyPolicy.parse("10.0.0.0/8")
    for embedding in ("IPv4", "IPv4-mapped ::ffff:a.b.c.d", "NAT64 64:ff9b::/96"):
        assert private.permits(ipaddress.ip_address(EMBEDDINGS[embedding](V4("10.1.2.3"))))
    for embedding in EMBEDDINGS:
        assert not private.permits(ipaddress.ip_address(EMBEDDINGS[embedding](V4("127.0.0.1"))))
    loopback = VerifyPolicy.parse("127.0.0.0/8,::1/128")
    assert loopback.permits(ipaddress.ip_address("127.0.0.1"))
    assert loopback.permits(ipaddress.ip_address("::1"))
    assert loopback.permits(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert not loopback.permits(ipaddress.ip_address("169.254.169.254"))
    local_nat64 = VerifyPolicy.parse("64:ff9b:1::/48")  # the operator's own translator
    assert local_nat64.permits(ipaddress.ip_address("64:ff9b:1::5db8:d822"))
