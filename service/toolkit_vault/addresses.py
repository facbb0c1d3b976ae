"""Which IP addresses the vault's own outgoing requests may reach (`x-verify` checks,
import-time OAuth discovery): the public internet, plus the ranges an operator opened.

The request's target is chosen by someone the vault does not trust (an agent's
`base_url`, a package's remote URL), so a loopback, private or link-local address must not
pass by another spelling. Several IPv6 forms carry an IPv4 address, and the packet ends at
that IPv4 address (a dual-stack socket, a NAT64 translator, a 6to4 or Teredo relay), so each
is judged by the IPv4 address it carries as well as by itself: IPv4-mapped and
IPv4-compatible (`::ffff:a.b.c.d`, `::a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), NAT64
(`64:ff9b::/96`, RFC 6052, and the local-use `64:ff9b:1::/48`, RFC 8215), 6to4
(`2002::/16`, RFC 3056) and Teredo (`2001::/32`, RFC 4380: its server and its client).
Pure: no I/O, no resolution; callers resolve a name and ask about every address.
"""

from __future__ import annotations

import ipaddress

__all__ = ["Address", "Network", "carried_ipv4", "permitted"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Spellings that are the IPv4 address itself (a socket sends the packet over IPv4).
_IPV4_ITSELF = (
    ipaddress.IPv6Network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated, RFC 4291 2.5.5.1)
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (RFC 2765)
)
# Spellings translated to the IPv4 address in its last 32 bits (RFC 6052 2.2, /96).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# A network's own translator: any prefix length may be in use, so it is never public.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def carried_ipv4(address: Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (none for an IPv4 address, or a plain
    IPv6 one)."""
    if isinstance(address, ipaddress.IPv4Address) or int(address) <= 1:
        return ()  # `::` and `::1` are IPv6's own unspecified and loopback addresses
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in (*_IPV4_ITSELF, _NAT64, _LOCAL_NAT64)):
        return (low,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo
    return ()


def _judged(address: Address) -> tuple[Address, ...]:
    """What reaching `address` reaches: the IPv4 address alone for a spelling of it; both
    for a translated or tunnelled one (the relay and what is behind it)."""
    carried = carried_ipv4(address)
    if carried and any(address in network for network in _IPV4_ITSELF):
        return carried
    return (address, *carried)


def _public(address: Address) -> bool:
    return address.is_global and not address.is_multicast and address not in _LOCAL_NAT64


def permitted(address: Address, allow: tuple[Network, ...] = ()) -> bool:
    """Whether a request may connect to `address`: everything it reaches is either in a
    range the operator allowed or public (globally routable, not multicast)."""
    return all(
        _public(each) or any(each in network for network in allow) for each in _judged(address)
    )
