"""Fail-closed secrecy for imported configuration inputs: every credential secret, a harmless
setting public.

Few publishers mark secrets, so a missing mark proves nothing, and a false "secret" is not free
either: the field is hidden from history, masked, wiped from forms and warned about in argv.
The rules, in order, each verdict with its reason (``"<rule>"`` or ``"<rule>: <detail>"``; the
detail is a matched word, never a value):

1. Secret by the source's own mark (``isSecret``, ``sensitive``, a password input,
   ``format: password``), by filling a value that is secret, or by sitting in the user-info or
   query of a URL.
2. Secret by a name that names a credential (token, secret, password, key, auth, cookie,
   session, private, bearer, DSN, PAT, connection string, a database URL, ...), unless the
   name is plainly a *setting about* a credential rather than the credential: a path or file
   (``TOKEN_FILE_PATH``), a kind or method (``AUTH_TYPE``), a lifetime, a count
   (``MAX_TOKENS``), a switch (``ENABLE_AUTH``), a header's name.
3. Secret by a value's shape: a URL with user-info or a credential in its query (a client
   config's own value, or the example a publisher put in a description).
4. Secret when it is a header other than a few harmless ones.
5. Public by the publisher's explicit "not secret" (``isSecret: false``, ``sensitive: false``),
   which description words do not overturn (the name still does, rule 2).
6. Public by type or shape: a boolean, a number, a path, a fixed list of choices, a URL host, a
   well-known harmless environment variable (``NO_COLOR``, ``SHELL``, ``PYTHONUNBUFFERED``), a
   harmless name (port, region, log level, timeout, TTL, ...), or an example value that is a
   number, boolean, path or plain URL.
7. Secret when the description names a credential (``"Your API key"``).
8. Public when the name is an identifier or a label (``*_ID``, ``*_NAME``, user, username,
   email, organization, project, team, database, bucket, collection, ...): these say *whose* or
   *which*, a credential says *let me in*.
9. Anything else is secret because nothing shows it is public.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "TOKEN_SHAPE",
    "Evidence",
    "Verdict",
    "classify",
    "credential_word",
    "description_word",
    "words",
]

UrlPart = Literal["userinfo", "query", "host", "path"]

_CREDENTIAL_STEM = re.compile(
    r"token|secret|passw|passphrase|credential|apikey|cookie|bearer|private|session|jwt|dsn"
    r"|webhook|hmac|totp|connstr|connectionstring|oauth|auth(?!or(?!ization|ize$|izer?$))"
    r"|(?:api|access|secret|private|license|signing|encryption|master|client|app|service)keys?$"
)
_CREDENTIAL_WORDS = frozenset(
    {"key", "keys", "pwd", "pass", "pat", "pin", "otp", "cred", "creds", "mfa", "sig", "sk"}
    | {"sks", "psk", "passcode", "apitoken", "authtoken", "ak", "sas", "privkey", "mnemonic"}
    | {"salt", "seedphrase"}
)
_DATABASES = frozenset(
    {"database", "db", "postgres", "postgresql", "pg", "mysql", "mariadb", "mongo", "mongodb"}
    | {"redis", "amqp", "rabbitmq", "sql", "jdbc", "mssql", "sqlserver", "clickhouse", "neo4j"}
    | {"couchbase", "couchbases", "cassandra", "oracle", "couchdb", "duckdb", "surrealdb"}
    | {"cockroachdb", "timescaledb", "tidb", "valkey", "motherduck", "rediss"}
)
# A name ending in one of these is a setting about a credential, not the credential itself.
_SETTING_SUFFIXES = frozenset(
    {"path", "file", "filename", "filepath", "dir", "directory", "folder", "location"}
    | {"type", "types", "mode", "method", "methods", "provider", "strategy", "scheme", "flow"}
    | {"timeout", "ttl", "expiry", "expiration", "expires", "lifetime", "duration", "seconds"}
    | {"minutes", "hours", "ms", "interval", "refresh", "limit", "limits", "count", "length"}
    | {"size", "enabled", "disabled", "required", "header", "prefix", "format"}
    | {"version", "endpoint", "server", "issuer", "audience", "scope", "scopes", "realm", "name"}
    | {"url", "uri", "domain", "host", "hostname", "port", "region"}
    | {"env", "var", "variable", "field", "param", "parameter", "label", "help", "algorithm"}
    | {"algorithms", "alg", "algo", "rotation", "store", "storage", "backend", "cache"}
)
# A name starting with one of these is a switch or a count, not a credential.
_SETTING_PREFIXES = frozenset(
    {"enable", "enabled", "disable", "disabled", "allow", "deny", "skip", "no", "is"}
    | {"has", "show", "require", "requires", "max", "min", "num", "number", "total"}
)
# A key that names a thing rather than opening it: JIRA_PROJECT_KEY, CONFLUENCE_SPACE_KEY.
_KEYED = frozenset(
    {"project", "space", "issue", "partition", "primary", "sort", "cache", "idempotency"}
    | {"routing", "object", "foreign", "dedup", "dedupe", "row", "shard", "board", "table"}
    | {"item", "entity", "group", "locale", "translation", "i18n", "map", "lookup", "index"}
    | {"prefix", "redis", "s3", "storage", "bucket", "namespace", "metric", "label", "tag"}
)
_AUTH_IDENTIFIERS = frozenset(
    {"id", "ids", "user", "username", "email", "login", "tenant", "name", "org"}
    | {"account", "realm", "audience", "issuer"}
)
_COUNTED = frozenset({"max", "min", "num", "count", "limit", "total", "budget", "maximum"})
_URL_SUFFIXES = frozenset({"url", "uri", "urls", "uris", "endpoint", "server", "issuer"})
_URL_CREDENTIALS = frozenset(
    {"webhook", "dsn", "connection string", "secret", "passw", "private", "session"}
)
_HARMLESS_WORDS = frozenset(
    {"port", "host", "hostname", "url", "uri", "endpoint", "path", "dir", "directory", "folder"}
    | {"file", "filename", "root", "workspace", "home", "cwd", "log", "logs", "loglevel"}
    | {"level", "debug", "verbose", "env", "environment", "mode", "timeout", "region", "zone"}
    | {"locale", "lang", "language", "tz", "timezone", "model", "max", "min", "limit", "count"}
    | {"size", "enable", "enabled", "disable", "disabled", "version", "format", "units", "unit"}
    | {"theme", "width", "height", "depth", "interval", "retries", "retry", "delay", "workers"}
    | {"concurrency", "threads", "batch", "temperature", "transport", "protocol", "readonly"}
    | {"ttl", "seconds", "minutes", "hours", "ms", "millis", "days", "encoding", "color"}
    | {"colour", "unbuffered", "shell", "editor", "pager", "term", "telemetry"}
    | {"dialect", "driver", "engine", "style", "voice", "currency", "country", "city"}
    | {"verbosity", "quiet", "silent", "dry", "cache", "headless", "browser", "output"}
    | {"tz", "page", "pages", "top", "k", "threshold", "similarity", "stability", "base"}
    | {"allowed", "blocked", "allowlist", "denylist", "whitelist", "blacklist", "location"}
    | {"deployment", "chunk", "embedding", "embeddings", "ssl", "tls", "insecure", "verify"}
    | {"toolsets", "toolset", "tools", "features", "capabilities", "categories", "modules"}
    | {"budget", "cmd", "command", "args", "arguments", "provider", "schedule", "cron"}
)
_HARMLESS_SUFFIXES = ("path", "dir", "url", "uri", "port", "host", "level", "mode", "timeout")
# Switch-like first words: ALLOW_SHELL_COMMANDS, USE_MEMORY_BANK, NO_COLOR, ENABLE_SSE.
_SWITCH_PREFIXES = frozenset(
    {"enable", "disable", "use", "allow", "deny", "skip", "no", "is", "has", "show", "hide"}
    | {"include", "exclude", "load", "auto", "read", "readonly", "dry", "force"}
)
# Well-known environment variables that configure a runtime, never a credential.
_WELL_KNOWN = frozenset(
    {"NO_COLOR", "FORCE_COLOR", "CLICOLOR", "TERM", "SHELL", "HOME", "USER", "LOGNAME", "LANG"}
    | {"LC_ALL", "TZ", "PATH", "PWD", "TMPDIR", "EDITOR", "VISUAL", "PAGER", "DISPLAY", "CI"}
    | {"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}
    | {"PYTHONWARNINGS", "PYTHONUTF8", "PYTHONHOME", "VIRTUAL_ENV", "NODE_ENV", "NODE_OPTIONS"}
    | {"NODE_PATH", "NODE_NO_WARNINGS", "NODE_TLS_REJECT_UNAUTHORIZED", "DEBUG", "RUST_LOG"}
    | {"RUST_BACKTRACE", "GOPATH", "GOROOT", "JAVA_HOME", "JAVA_OPTS", "KUBECONFIG", "NO_PROXY"}
    | {"DOCKER_HOST", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "LOG_LEVEL", "PORT"}
    | {"HOST", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"}
    | {"UV_PYTHON", "NPM_CONFIG_REGISTRY", "COLUMNS", "LINES", "LC_CTYPE", "USERNAME"}
    | {"PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSSLMODE", "MYSQL_HOST", "MYSQL_TCP_PORT"}
)
# Names that say *which* or *whose*: identifiers and labels.
_LABEL_WORDS = frozenset(
    {"id", "ids", "name", "names", "user", "username", "usernames", "login", "email", "mail"}
    | {"org", "organization", "organisation", "project", "projects", "team", "account", "tenant"}
    | {"workspace", "database", "db", "schema", "bucket", "index", "collection", "table"}
    | {"topic", "channel", "channels", "instance", "site", "domain", "cluster", "namespace"}
    | {"repo", "repository", "owner", "branch", "space", "group", "groups", "folder", "site"}
    | {
        "scope",
        "target",
        "targets",
        "admin",
        "description",
        "title",
        "prompt",
        "query",
        "language",
        "apps",
        "app",
    }
    | {"server", "service", "catalog", "dataset", "warehouse", "role", "queue", "exchange"}
    | {"profile", "locale", "calendar", "board", "list", "label", "labels", "tag", "tags"}
    | {"sender", "recipient", "from", "to", "phone", "number", "sheet", "spreadsheet", "doc"}
    | {"model", "models", "agent", "assistant", "bot", "engine", "container", "image", "vault"}
    | {"sid", "ref", "arn", "alias", "slug", "handle", "address", "wallet", "network", "chain"}
    | {"subdomain", "addr", "cert", "certificate", "ca", "tenant", "region", "locale", "dc"}
)
_HARMLESS_HEADERS = frozenset(
    {"accept", "accept-language", "content-type", "user-agent", "mcp-protocol-version"}
)
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
_PATH = re.compile(
    r"^(~|\.{1,2})?[/\\]|^[A-Za-z]:[/\\]|^\$\{(workspaceFolder|__dirname|HOME)\}"
    r"|^[\w.-]+(/[\w.-]+)+\.(js|mjs|cjs|ts|py|json|ya?ml|toml|db|sqlite|txt|csv)$"
)
_URL = re.compile(
    r"^[a-z][a-z0-9+.-]*://(?P<userinfo>[^/@?#\s]*@)?[^?#\s]*(?P<query>\?\S*)?$", re.I
)
# Well-known token shapes: Slack, GitHub, GitLab, OpenAI/Anthropic, Stripe, AWS, Google, JWT.
TOKEN_SHAPE = re.compile(
    r"^(?:xox[abposr]-|xapp-|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|sk-[A-Za-z0-9_-]{8}"
    r"|sk_live_|rk_live_|pk_live_|whsec_|AKIA[0-9A-Z]{12}|ASIA[0-9A-Z]{12}|AIza[0-9A-Za-z_-]{20}"
    r"|ya29\.|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.|npm_[A-Za-z0-9]{20}|hf_[A-Za-z0-9]{20})"
)
_DOCKER_ENV = re.compile(r"^(?:-e|--env)[ =]?([A-Za-z_][A-Za-z0-9_]*)$")
# Words a description uses for a credential: narrower than a name's ("Username for
# authentication" describes a username, "Pass environment variable X" passes nothing secret).
_DESCRIPTION_CREDENTIAL = re.compile(
    r"\b(?:api[ _-]?keys?|access[ _-]?keys?|secret[ _-]?keys?|private[ _-]?keys?|license[ _-]?key"
    r"|(?:access|auth|api|bearer|bot|personal|refresh|session|security|service account|user)"
    r"[ _-]?tokens?|tokens?\b(?! (?:limit|count|budget|usage))|passwords?|passphrase|secrets?"
    r"|credentials?|bearer|cookies?|jwt|dsn|connection[ _-]?string|pat|signing key"
    r"|client[ _-]?secret|webhook)\b",
    re.I,
)
_DESCRIPTION_NOT = re.compile(
    r"\b(?:max(?:imum)?|min(?:imum)?|number of|count of|limit)\b[^.]{0,20}\btokens\b"
    r"|\b(?:path|file|directory|folder)\b[^.]{0,30}\b(?:to|of|for|containing|with)\b",
    re.I,
)


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
    example: str | None = None  # a publisher's example or default value: public text


def words(text: str) -> list[str]:
    """Lower-case words of a name or text: snake, kebab, dotted, camelCase and spaces."""
    return [w.lower() for part in re.split(r"[^A-Za-z0-9]+", text) for w in _CAMEL.findall(part)]


def _parts(text: str) -> set[str]:
    """Lower-case parts between separators, not split further (``neo4j``, ``influxdb``)."""
    return {p.lower() for p in re.split(r"[^A-Za-z0-9]+", text) if p}


def _credential(found: list[str], text: str) -> str | None:
    for word in found:
        stem = _CREDENTIAL_STEM.search(word)
        if stem is not None:
            return "auth" if stem.group() == "oauth" else stem.group()
        if word in _CREDENTIAL_WORDS:
            return word
    compact = "".join(found)
    stem = _CREDENTIAL_STEM.search(compact)
    if stem is not None:  # "APIKEY", "accesstoken": one word holding two
        return "connection string" if stem.group().startswith("conn") else stem.group()
    names = set(found) | _parts(text)
    database = names & _DATABASES
    if "connection string" in " ".join(found):
        return "connection string"
    if database and found and found[-1] in ("url", "uri", "string", "dsn", "conn"):
        return "connection string"
    return None


def _setting(found: list[str], word: str) -> str | None:
    """The word showing a credential-named ``found`` is a setting about it, or None."""
    if len(found) < 2:
        return None
    last, first = found[-1], found[0]
    if last in _SETTING_SUFFIXES and not (last in _URL_SUFFIXES and word in _URL_CREDENTIALS):
        return last
    if first in _SETTING_PREFIXES and word not in ("private", "secret", "passw"):
        return first
    if word in ("token", "tokens") and set(found) & _COUNTED:
        return next(w for w in found if w in _COUNTED)
    if "tokens" in found and word == "token" and last != "tokens":
        return "tokens"  # TOKENS_PER_MINUTE: a count of model tokens
    if word == "key" and len(found) >= 2 and found[-1] == "key" and found[-2] in _KEYED:
        return f"{found[-2]} key"  # JIRA_PROJECT_KEY: names a project, opens nothing
    if word == "auth" and last in _AUTH_IDENTIFIERS:
        return last  # GOOGLE_OAUTH_CLIENT_ID: which client, not its secret
    return None


def credential_word(text: str) -> str | None:
    """The word of a name (or a value's literal text) naming a credential, or None: also None
    for a setting about a credential (``TOKEN_FILE_PATH``, ``AUTH_TYPE``, ``MAX_TOKENS``)."""
    found = words(text)
    word = _credential(found, text)
    if word is None or _setting(found, word) is not None:
        return None
    return word


def description_word(text: str) -> str | None:
    """The phrase of a description naming a credential, or None."""
    if _DESCRIPTION_NOT.search(text):
        return None
    match = _DESCRIPTION_CREDENTIAL.search(text)
    return match.group().lower() if match else None


def _harmless(name: str, *, anywhere: bool = False) -> str | None:
    """A harmless switch prefix, last word or suffix; with ``anywhere``, any harmless word (a
    weaker sign, weighed after the description)."""
    found = words(name)
    if not found:
        return None
    if anywhere:
        return next((w for w in reversed(found) if w in _HARMLESS_WORDS), None)
    if found[0] in _SWITCH_PREFIXES and len(found) > 1:
        return found[0]
    if found[-1] in _HARMLESS_WORDS:
        return found[-1]
    return next((s for s in _HARMLESS_SUFFIXES if found[-1].endswith(s)), None)


def _well_known(name: str) -> bool:
    return name in _WELL_KNOWN


def _label(name: str) -> str | None:
    found = words(name)
    return found[-1] if found and found[-1] in _LABEL_WORDS else None


def _shape(value: str) -> Verdict | None:
    """A value seen only for its shape: a URL carrying credentials is secret."""
    text = value.strip()
    if TOKEN_SHAPE.match(text):
        return Verdict(True, "a value shaped like a token")
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


def _values(e: Evidence) -> list[str]:
    """Values to look at for their shape: a client config's own, a publisher's example or
    default, and a description that is a bare value (older registry entries put the example
    value there)."""
    bare = e.description.strip()
    bare = bare if bare and not any(c.isspace() for c in bare) else ""
    return [v for v in (e.literal, e.example, bare) if v]


def _secret(e: Evidence) -> Verdict | None:
    if e.marked:
        return Verdict(True, e.marked)
    if e.fills:
        return Verdict(True, f"fills a secret ({e.fills})")
    if e.url_part in ("userinfo", "query"):
        return Verdict(True, f"URL {'user-info' if e.url_part == 'userinfo' else 'query'}")
    if _DOCKER_ENV.match(e.name.strip()):
        return None  # `-e NAME`: the value stays in the environment, only the name is in argv
    if (word := credential_word(e.name)) is not None:
        return Verdict(True, f"credential name: {word}")
    for value in _values(e):
        shaped = _shape(value)
        if shaped is not None and shaped.secret:
            return shaped
    if e.header:
        if e.name.lower() in _HARMLESS_HEADERS:
            return Verdict(False, "harmless header")
        found = words(e.name)
        if found and found[-1] in _LABEL_WORDS | _HARMLESS_WORDS:
            return None  # X-Workspace-Id, X-Region: judged like any other name
        return Verdict(True, "header")
    return None


def _public(e: Evidence) -> Verdict | None:
    if (env := _DOCKER_ENV.match(e.name.strip())) is not None:
        return Verdict(False, f"passes {env.group(1)} by name")
    if e.marked_public:
        return Verdict(False, e.marked_public)
    if e.value_type in ("boolean", "number", "integer"):
        return Verdict(False, e.value_type)
    if e.path:
        return Verdict(False, "path")
    if e.choices:
        return Verdict(False, "choices")
    if e.url_part == "host":
        return Verdict(False, "URL host")
    found = words(e.name)
    word = _credential(found, e.name)
    if word is not None and (setting := _setting(found, word)) is not None:
        return Verdict(False, f"setting of a credential: {setting}")
    if (hit := _harmless(e.name)) is not None:
        return Verdict(False, f"harmless name: {hit}")
    if _well_known(e.name):
        return Verdict(False, f"well-known variable: {e.name}")
    for value in _values(e):
        shaped = _shape(value)
        if shaped is not None:
            return shaped
    return None


_DOCKER_ENV_VALUE = re.compile(r"^(?:-e|--env)[ =]?([A-Za-z_][A-Za-z0-9_]*)=")
_FLAG_VALUE = re.compile(r"^(--?[A-Za-z][A-Za-z0-9_.-]*)[ =](\S.*)$")


def classify(e: Evidence) -> Verdict:
    """Secret marks and names first, then public evidence, then description words, then labels;
    else secret."""
    name = e.name.strip()
    if (env := _DOCKER_ENV_VALUE.match(name)) is not None:  # `-e NAME=value`
        e = replace(e, name=env.group(1))
    elif (
        not _DOCKER_ENV.match(name) and (flag := _FLAG_VALUE.match(name)) is not None
    ):  # `--flag value`: the flag names it
        if flag.group(2).strip().lower() in ("true", "false"):
            return Verdict(False, "boolean value")  # `--flag true`: a switch, whatever its name
        e = replace(e, name=flag.group(1), example=e.example or flag.group(2))
    elif (shaped := _shape(name)) is not None and not _NUMBER.match(name):
        return shaped  # a positional argument named by its value: a URL, a path
    verdict = _secret(e) or _public(e)
    if verdict is not None:
        return verdict
    if (word := description_word(e.description)) is not None:
        return Verdict(True, f"credential description: {word}")
    if (hit := _harmless(e.name, anywhere=True)) is not None:
        return Verdict(False, f"harmless name: {hit}")
    if (label := _label(e.name)) is not None:
        return Verdict(False, f"identifier or label: {label}")
    return Verdict(True, "nothing shows it is public")
