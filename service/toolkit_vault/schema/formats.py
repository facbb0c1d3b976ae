"""The `format`s the vault asserts, each checked the same way on every install.

jsonschema picks a checker for a format only if some optional package happens to be
installed, and treats an unknown format as valid. The vault fails closed instead: the
formats below are checked by the libraries pinned in pyproject.toml (imported here, never
looked up), plus the RFC's own rule where a library is laxer than the RFC (a trailing
newline, a leap second, an embedded IPv4 address, a Bidi domain name). A grammar that is
regular and short (RFC 3339's duration, RFC 6570's URI Template, RFC 9562's UUID) is that
grammar as one regular expression, since the libraries for them accept forms the RFCs
forbid. Any other format is refused when the schema is registered (compiled.py), except
`password`, which marks a secret and asserts nothing.

Every checker takes any JSON value (non-strings pass, as the specification says), returns
a bool, never raises, and runs in linear time on a string as long as a message allows.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import unicodedata
from collections.abc import Callable

import idna
import jsonpointer
import rfc3339_validator
from jsonschema import FormatChecker

from toolkit_vault.schema.patterns import is_regex

__all__ = ["ANNOTATIONS", "FORMATS", "format_checker"]

ANNOTATIONS = frozenset({"password"})  # a secret marker, asserted by nothing

_TIME = re.compile(
    r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})(?:\.[0-9]+)?"
    r"(?:Z|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))",
    re.ASCII | re.IGNORECASE,
)
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DURATION = re.compile(  # RFC 3339 Appendix A
    r"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
    r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)",
    re.ASCII,
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_UCSCHAR = (  # RFC 3987: the non-ASCII characters an IRI may hold anywhere...
    (0xA0, 0xD7FF),
    (0xF900, 0xFDCF),
    (0xFDF0, 0xFFEF),
    *((plane << 16, (plane << 16) + 0xFFFD) for plane in range(1, 14)),
    (0xE1000, 0xEFFFD),
)
_IPRIVATE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))  # ...in a query
_NON_ASCII = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _UCSCHAR + _IPRIVATE)
_PCT = r"%[0-9A-Fa-f]{2}"
_LITERAL = (  # RFC 6570 section 2.1, with errata 6937's "'"
    r"(?:[\x21\x23\x24\x26-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e" + _NON_ASCII + f"]|{_PCT})"
)
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = f"{_VARCHAR}(?:\\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\\*)?"
_URI_TEMPLATE = re.compile(f"(?:{_LITERAL}|\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}})*")
_RELATIVE_POINTER = re.compile(r"(0|[1-9][0-9]*)(#?)", re.ASCII)
_IPV6_LITERAL = re.compile(r"\[([^\]]*)\]")
_IDN_DOTS = ".\u3002\uff0e\uff61"  # the label separators of RFC 3490 section 3.1
_MAX_EMAIL = 1024  # far above RFC 5321's 254-octet path; longer strings are not parsed


def _text(check: Callable[[str], bool]) -> Callable[[object], bool]:
    """Pass non-strings; turn a library's complaint into False, never an exception."""

    def checker(instance: object) -> bool:
        if not isinstance(instance, str):
            return True
        try:
            return bool(check(instance))
        except (ValueError, UnicodeError, IndexError, jsonpointer.JsonPointerException):
            return False

    checker.__doc__ = check.__doc__
    return checker


def _date(value: str) -> bool:
    """RFC 3339 full-date; `fromisoformat` alone also takes ISO 8601's week dates."""
    return bool(_DATE.fullmatch(value)) and bool(datetime.date.fromisoformat(value))


def _rfc3339(value: str) -> bool:
    """A leap second is valid only at 23:59:60 UTC; rfc3339_validator rejects all of them
    and lets a trailing newline through."""
    if not value.isascii() or "\n" in value:
        return False
    match = _TIME.search(value)
    if match and match["s"] == "60":
        minutes = int(match["h"]) * 60 + int(match["m"])
        if match["sign"]:
            offset = int(match["oh"]) * 60 + int(match["om"])
            minutes -= offset if match["sign"] == "+" else -offset
        if minutes % 1440 != 23 * 60 + 59:
            return False
        value = value[: match.start("s")] + "59" + value[match.end("s") :]
    return bool(rfc3339_validator.validate_rfc3339(value.upper()))


def _time(value: str) -> bool:
    return _rfc3339("1970-01-01T" + value)


def _bidi(labels: list[str]) -> bool:
    """RFC 5893: once a label is right-to-left, the Bidi rule holds for every label."""
    rtl = any(unicodedata.bidirectional(c) in ("R", "AL", "AN") for label in labels for c in label)
    return not rtl or all(idna.check_bidi(label, check_ltr=True) for label in labels)


def _hostname(value: str) -> bool:
    """RFC 1123 names, and A-labels that are valid IDNA2008 (checked by idna)."""
    if not value.isascii() or len(value) > 253 or value.endswith("."):
        return False
    labels = value.split(".")
    if not all(0 < len(label) <= 63 for label in labels):
        return False
    return _bidi([idna.ulabel(label) for label in labels])


def _idn_hostname(value: str) -> bool:
    if len(value) > 1024 or value.endswith(tuple(_IDN_DOTS)) or not value:
        return False
    encoded = idna.encode(value).decode("ascii")
    return _hostname(encoded)


def _email(value: str) -> bool:
    return value.isascii() and _idn_email(value, smtputf8=False)


def _idn_email(value: str, smtputf8: bool = True) -> bool:
    if len(value) > _MAX_EMAIL:
        return False
    import email_validator  # here, not at the top: every CLI command would pay its import

    email_validator.validate_email(  # RFC 5321 syntax only: no DNS, no network
        value,
        allow_smtputf8=smtputf8,
        allow_quoted_local=True,
        allow_domain_literal=True,
        check_deliverability=False,
        globally_deliverable=False,
        test_environment=True,  # RFC 2606's `.test` is valid syntax (and common in test configs)
    )
    return True


def _ipv4(value: str) -> bool:
    return value.isascii() and bool(ipaddress.IPv4Address(value))


def _ipv6(value: str) -> bool:
    return value.isascii() and not ipaddress.IPv6Address(value).scope_id


def _literal_hosts(value: str) -> bool:
    """rfc3986_validator's IPv6 rule lets a leading zero into an embedded IPv4 address.
    (In a valid URI, brackets only ever enclose the host.)"""
    match = _IPV6_LITERAL.search(value)
    return not match or match[1][:1] == "v" or _ipv6(match[1])


def _uri(value: str, rule: str = "URI") -> bool:
    import rfc3986_validator  # here, not at the top: every CLI command would pay its import

    value = value.replace("[V", "[v")  # IPvFuture's "v" is case-insensitive, as ABNF is
    if "\n" in value or not rfc3986_validator.validate_rfc3986(value, rule=rule):
        return False
    return _literal_hosts(value)


def _uri_reference(value: str) -> bool:
    return _uri(value, "URI_reference")


def _within(ranges: tuple[tuple[int, int], ...], code: int) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _iri_as_uri(value: str) -> str | None:
    """RFC 3987 section 3.1: an IRI is a URI with ucschar (and iprivate, in the query
    only) percent-encoded. None if a character is neither."""
    query, fragment = value.find("?"), value.find("#")
    out = []
    for index, char in enumerate(value):
        code = ord(char)
        if code < 0x80:
            out.append(char)
            continue
        in_query = -1 < query < index and (fragment < 0 or index < fragment)
        if not (_within(_UCSCHAR, code) or (in_query and _within(_IPRIVATE, code))):
            return None
        out.append("".join(f"%{byte:02X}" for byte in char.encode()))
    return "".join(out)


def _iri(value: str, rule: str = "URI") -> bool:
    mapped = _iri_as_uri(value)
    return mapped is not None and _uri(mapped, rule)


def _iri_reference(value: str) -> bool:
    return _iri(value, "URI_reference")


def _json_pointer(value: str) -> bool:
    return bool(jsonpointer.JsonPointer(value))


def _relative_json_pointer(value: str) -> bool:
    """draft-handrews-relative-json-pointer-01: a non-negative integer, then '#' or a
    JSON pointer."""
    match = _RELATIVE_POINTER.match(value)
    if not match:
        return False
    rest = value[match.end() :]
    return rest == "" if match[2] else rest == "" or _json_pointer(rest)


FORMATS: dict[str, Callable[[object], bool]] = {
    "date": _text(_date),
    "date-time": _text(_rfc3339),
    "time": _text(_time),
    "duration": _text(lambda value: bool(_DURATION.fullmatch(value))),
    "email": _text(_email),
    "idn-email": _text(_idn_email),
    "hostname": _text(_hostname),
    "idn-hostname": _text(_idn_hostname),
    "ipv4": _text(_ipv4),
    "ipv6": _text(_ipv6),
    "uri": _text(_uri),
    "uri-reference": _text(_uri_reference),
    "iri": _text(_iri),
    "iri-reference": _text(_iri_reference),
    "uri-template": _text(lambda value: bool(_URI_TEMPLATE.fullmatch(value))),
    "uuid": _text(lambda value: bool(_UUID.fullmatch(value))),
    "json-pointer": _text(_json_pointer),
    "relative-json-pointer": _text(_relative_json_pointer),
    "regex": is_regex,
}


def format_checker(*, regex: bool = True) -> FormatChecker:
    """A checker for exactly FORMATS (without `regex` for the meta-schema check, where
    compiled.py checks each pattern itself and names it)."""
    checker = FormatChecker(formats=())
    for name, check in FORMATS.items():
        if regex or name != "regex":
            checker.checks(name)(check)
    return checker
