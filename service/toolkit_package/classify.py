"""Fail-closed secrecy for imported configuration inputs: secret unless plainly not a credential.

Few publishers mark secrets, so a missing mark proves nothing. An input is secret when its
source marks it (``isSecret``, ``sensitive``, a password input, ``format: password``), when it
fills a value that is secret or names a credential, when its name or description names a
credential (token, secret, password, key, auth, cookie, session, private, bearer, DSN, ...),
when it is a header other than a few harmless ones, or when it sits in the user-info or query
of a URL. It is public only when nothing says so *and* something shows it is plainly not a
credential: a boolean or a number, a path, a fixed list of choices, a URL host, a harmless
name (port, region, log level, ...), or a publisher's explicit "not secret". Anything else is
secret because nothing shows it is public. Every verdict carries its reason as
``"<rule>"`` or ``"<rule>: <detail>"``; the detail is a matched word, never a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Evidence", "Verdict", "classify", "credential_word", "words"]

UrlPart = Literal["userinfo", "query", "host", "path"]

_CREDENTIAL_STEM = re.compile(
    r"token|secret|passw|passphrase|credential|apikey|cookie|bearer|private|session|jwt|dsn"
    r"|webhook|hmac|totp|connstr|connectionstring|auth(?!or(?!i))"
    r"|(?:api|access|secret|private|license|signing|encryption|master|client|app|service)keys?$"
)
_CREDENTIAL_WORDS = frozenset(
    {"key", "keys", "pwd", "pass", "pat", "pin", "otp", "cred", "creds", "mfa", "sig"}
)
_DATABASES = frozenset(
    {"database", "db", "postgres", "postgresql", "pg", "mysql", "mariadb", "mongo", "mongodb"}
    | {"redis", "amqp", "rabbitmq", "sql", "jdbc", "mssql", "sqlserver", "neo4j", "clickhouse"}
)
_HARMLESS_WORDS = frozenset(
    {"port", "host", "hostname", "url", "uri", "endpoint", "path", "dir", "directory", "folder"}
    | {"file", "filename", "root", "workspace", "home", "cwd", "log", "logs", "loglevel"}
    | {"level", "debug", "verbose", "env", "environment", "mode", "timeout", "region", "zone"}
    | {"locale", "lang", "language", "tz", "timezone", "model", "max", "min", "limit", "count"}
    | {"size", "enable", "enabled", "disable", "disabled", "version", "format", "units", "unit"}
    | {"theme", "width", "height", "depth", "interval", "retries", "retry", "delay", "workers"}
    | {"concurrency", "threads", "batch", "temperature", "transport", "protocol", "readonly"}
)
_HARMLESS_SUFFIXES = ("path", "dir", "url", "port", "host", "level", "mode", "timeout")
_HARMLESS_HEADERS = frozenset(
    {"accept", "accept-language", "content-type", "user-agent", "mcp-protocol-version"}
)
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
_PATH = re.compile(r"^(~|\.{1,2})?[/\\]|^[A-Za-z]:[/\\]|^\$\{(workspaceFolder|__dirname|HOME)\}")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://(?P<userinfo>[^/@?#]*@)?[^?#]*(?P<query>\?.*)?$", re.I)


@dataclass(frozen=True)
class Verdict:
    secret: bool
    reason: str


@dataclass(frozen=True)
class Evidence:
    """What a source says about one input. ``literal`` is a client config's own value: it is
    only looked at (number? path? URL with credentials?), never kept or reported."""

    name: str
    description: str = ""
    header: bool = False
    marked: str | None = None  # the source's secret mark: "isSecret", "sensitive", ...
    marked_public: str | None = None  # the source's explicit "not secret": "isSecret: false"
    fills: str | None = None  # why the value this input fills is secret, if it is
    value_type: str = "string"
    url_part: UrlPart | None = None
    path: bool = False
    choices: bool = False
    literal: str | None = None


def words(text: str) -> list[str]:
    """Lower-case words of a name or text: snake, kebab, dotted, camelCase and spaces."""
    return [w.lower() for part in re.split(r"[^A-Za-z0-9]+", text) for w in _CAMEL.findall(part)]


def _parts(text: str) -> set[str]:
    """Lower-case parts between separators, not split further (``neo4j``, ``influxdb``)."""
    return {p.lower() for p in re.split(r"[^A-Za-z0-9]+", text) if p}


def credential_word(text: str) -> str | None:
    """The first word of ``text`` that names a credential, or None."""
    found = words(text)
    for word in found:
        stem = _CREDENTIAL_STEM.search(word)
        if stem is not None:
            return stem.group()
        if word in _CREDENTIAL_WORDS:
            return word
    compact = "".join(found)
    stem = _CREDENTIAL_STEM.search(compact)
    if stem is not None:  # "APIKEY", "accesstoken": one word holding two
        return "connection string" if stem.group().startswith("conn") else stem.group()
    names = set(found) | _parts(text)
    database = names & _DATABASES or {n for n in names if n.endswith("db")}
    if "connection string" in " ".join(found) or ({"url", "uri", "string"} & names and database):
        return "connection string"
    return None


def _harmless(name: str) -> str | None:
    found = words(name)
    hit = next((w for w in found if w in _HARMLESS_WORDS), None)
    if hit is None and found:
        hit = next((s for s in _HARMLESS_SUFFIXES if found[-1].endswith(s)), None)
    return hit


def _literal(value: str) -> Verdict | None:
    """A client config value seen only for its shape: a URL carrying credentials is secret."""
    text = value.strip()
    url = _URL.match(text)
    if url is not None and url.group("userinfo"):
        return Verdict(True, "URL user-info")
    if url is not None and url.group("query") and credential_word(url.group("query")):
        return Verdict(True, "URL query")
    if text.lower() in ("true", "false"):
        return Verdict(False, "boolean value")
    if _NUMBER.match(text):
        return Verdict(False, "number value")
    if url is not None:
        return Verdict(False, "URL value")
    if _PATH.match(text):
        return Verdict(False, "path value")
    return None


def _secret(e: Evidence) -> Verdict | None:
    if e.marked:
        return Verdict(True, e.marked)
    if e.fills:
        return Verdict(True, f"fills a secret ({e.fills})")
    if e.url_part in ("userinfo", "query"):
        return Verdict(True, f"URL {'user-info' if e.url_part == 'userinfo' else 'query'}")
    if (word := credential_word(e.name)) is not None:
        return Verdict(True, f"credential name: {word}")
    if (word := credential_word(e.description)) is not None:
        return Verdict(True, f"credential description: {word}")
    if e.header:
        if e.name.lower() in _HARMLESS_HEADERS:
            return Verdict(False, "harmless header")
        return Verdict(True, "header")
    return None


def _public(e: Evidence) -> Verdict | None:
    if e.value_type in ("boolean", "number"):
        return Verdict(False, e.value_type)
    if e.path:
        return Verdict(False, "path")
    if e.choices:
        return Verdict(False, "choices")
    if e.url_part == "host":
        return Verdict(False, "URL host")
    if (word := _harmless(e.name)) is not None:
        return Verdict(False, f"harmless name: {word}")
    if e.marked_public:
        return Verdict(False, e.marked_public)
    return None


def classify(e: Evidence) -> Verdict:
    """Secret marks first, then the shape of a literal value, then public evidence; else secret."""
    verdict = _secret(e)
    if verdict is None and e.literal is not None:
        verdict = _literal(e.literal)
        if verdict is not None and not verdict.secret:
            verdict = _public(e) or verdict
    return verdict or _public(e) or Verdict(True, "nothing shows it is public")
