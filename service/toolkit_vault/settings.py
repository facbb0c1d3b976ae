"""Settings: read once from the environment and the home's record, then frozen.

`init` writes `vault.json` in the home (database URL, key provider and its options, vault
id, audit devices), so every later command run with the same home needs no flag. The
environment overrides the record. Provider options say where the master key is (a KMS key
id, a PKCS#11 token); never a credential: each provider reads those from its own standard
configuration.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.files import PrivateFileError, open_private, write_atomically
from toolkit_vault.keys.providers import provider_names

__all__ = [
    "RECORD_NAME",
    "EnvSettings",
    "OidcSettings",
    "VaultSettings",
    "load_settings",
    "oidc_settings",
    "target_settings",
    "write_record",
]

RECORD_NAME = "vault.json"


ENV_PREFIX = "TOOLKIT_VAULT_"
# the words a boolean setting takes, in any case (what pydantic-settings took before)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


@dataclass(frozen=True)
class EnvSettings:
    """The `TOOLKIT_VAULT_*` environment variables the design names (`from_environment`).

    Read by hand, not by pydantic-settings: every command reads them, and importing that
    library (and pydantic with it) cost a listing more than the listing's own work. A
    variable's name matches in any case; a value that does not parse is a `VaultError`
    naming the variable and what it takes, never the value (it may be a misplaced secret)."""

    home: Path = Path("./var")
    database_url: str | None = None
    key_provider: str | None = None
    audit_devices: str | None = None  # comma-separated specs; "none" for none
    audit_fail_closed: bool | None = None
    # the identity provider people sign in to the console through (`oidc_settings`)
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: SecretBytes | None = None  # hidden in every repr
    oidc_client_secret_file: Path | None = None
    oidc_scopes: str | None = None  # space-separated; `openid` is always asked for
    oidc_session_minutes: float | None = None
    # `serve`'s telemetry (issue 54): /metrics counted (on by default); also served, without a
    # token, on a loopback HOST:PORT of its own; OpenTelemetry traces (the `otel` extra).
    metrics: bool = True
    metrics_listen: str | None = None
    otel_traces: bool = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EnvSettings:
        """The settings `environ` (default `os.environ`) sets; the defaults for the rest."""
        prefix = ENV_PREFIX.lower()
        found = {
            name.lower()[len(prefix) :]: value
            for name, value in (os.environ if environ is None else environ).items()
            if name.lower().startswith(prefix)
        }
        values: dict[str, Any] = {}
        for each in dataclasses.fields(cls):
            if each.name in found:
                values[each.name] = _parse(each.name, each.type, found[each.name])
        return cls(**values)


def _parse(name: str, kind: Any, text: str) -> Any:
    """One variable's value as its field's type (the annotation, a string here)."""
    variable = ENV_PREFIX + name.upper()
    if kind.startswith("bool"):
        word = text.lower()
        if word not in _TRUE | _FALSE:
            raise VaultError(f"{variable} must be true or false (or on/off, yes/no, 1/0)")
        return word in _TRUE
    if kind.startswith("float"):
        try:
            return float(text)
        except ValueError:
            raise VaultError(f"{variable} must be a number") from None
    if kind.startswith("Path"):
        return Path(text)
    if kind.startswith("SecretBytes"):
        return SecretBytes(text.encode())
    return text


@dataclass(frozen=True)
class VaultSettings:
    home: Path
    database_url: str
    key_provider: str
    vault_id: str
    initialized: bool
    key_options: Mapping[str, str] = field(default_factory=dict)
    audit_devices: tuple[str, ...] = ()  # `audit.devices.parse_device` specs
    audit_fail_closed: bool = False  # a write no audit device accepted is refused
    # A master key move under way (`keys move`): the target's provider and options, recorded
    # beside the pin until every vault key is under the target (`keys.move`).
    key_move: tuple[str, Mapping[str, str]] | None = None

    @property
    def record_path(self) -> Path:
        return self.home / RECORD_NAME


def default_database_url(home: Path) -> str:
    return f"sqlite:///{home / 'vault.db'}"


def load_settings(
    key_provider: str | None = None,
    key_options: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
) -> VaultSettings:
    """Resolve settings: flag, then environment, then the home's record, then defaults.
    The recorded provider options apply to the recorded provider; `key_options` (flags)
    are added to them, and may not change one the record holds. `home`: read that home's
    record now (a running process following a master key move), not the environment's."""
    env = EnvSettings.from_environment()
    home = home or env.home.expanduser().absolute()
    record: dict[str, Any] = {}
    path = home / RECORD_NAME
    if path.exists():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise VaultError(f"{path} is not valid JSON; restore it or remove the home") from None
    provider = key_provider or env.key_provider or record.get("key_provider") or "keyring"
    if provider not in provider_names():
        known = ", ".join(provider_names())
        raise VaultError(f"unknown key provider {provider!r}; installed: {known}")
    recorded = record.get("key_options") if provider == record.get("key_provider") else None
    options = {str(k): str(v) for k, v in (recorded or {}).items()}
    for name, value in (key_options or {}).items():
        if options.get(name, value) != value:
            raise VaultError(
                f"{home} records {name} = {options[name]!r} for the {provider} key provider; "
                "init cannot move the master key"
            )
        options[name] = value
    return VaultSettings(
        home=home,
        database_url=env.database_url or record.get("database_url") or default_database_url(home),
        key_provider=provider,
        vault_id=record.get("vault_id") or str(uuid.uuid4()),
        initialized=bool(record),
        key_options=options,
        audit_devices=_audit_devices(env.audit_devices, record.get("audit_devices")),
        audit_fail_closed=bool(
            record.get("audit_fail_closed", False)
            if env.audit_fail_closed is None
            else env.audit_fail_closed
        ),
        key_move=_key_move(record.get("key_move")),
    )


def _key_move(recorded: Any) -> tuple[str, Mapping[str, str]] | None:
    """A recorded move's target, as (provider, options); None when no move is under way."""
    if recorded is None:
        return None
    if (
        not isinstance(recorded, dict)
        or not isinstance(recorded.get("key_provider"), str)
        or not isinstance(recorded.get("key_options"), dict)
    ):
        raise VaultError(f"{RECORD_NAME}: key_move must name a key_provider and key_options")
    options = {str(k): str(v) for k, v in recorded["key_options"].items()}
    return recorded["key_provider"], options


def target_settings(
    settings: VaultSettings, key_provider: str, key_options: Mapping[str, str]
) -> VaultSettings:
    """The settings of a master key the vault moves to (`keys move`, `keys recovery
    unseal`): the same provider keeps its recorded options, the flags changing any of them
    (another KMS key id, another key file); another provider takes the flags' alone."""
    if key_provider not in provider_names():
        known = ", ".join(provider_names())
        raise VaultError(f"unknown key provider {key_provider!r}; installed: {known}")
    same = key_provider == settings.key_provider
    options = {**(settings.key_options if same else {}), **key_options}
    return dataclasses.replace(
        settings, key_provider=key_provider, key_options=options, key_move=None
    )


def _audit_devices(env: str | None, recorded: Any) -> tuple[str, ...]:
    """The environment's comma-separated specs ("none": none), else the record's list."""
    if env and env.strip():
        specs = [spec.strip() for spec in env.split(",")]
        return () if specs == ["none"] else tuple(spec for spec in specs if spec)
    if recorded is None:
        return ()
    if isinstance(recorded, list) and all(isinstance(spec, str) for spec in recorded):
        return tuple(recorded)
    raise VaultError(f"{RECORD_NAME}: audit_devices must be a list of device specs")


def write_record(settings: VaultSettings) -> None:
    """Record the chosen database, key provider and its options in the home (0600,
    atomically)."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {
        "format": 1,
        "vault_id": settings.vault_id,
        "database_url": settings.database_url,
        "key_provider": settings.key_provider,
        "key_options": dict(settings.key_options),
        "audit_devices": list(settings.audit_devices),
        "audit_fail_closed": settings.audit_fail_closed,
    }
    if settings.key_move is not None:
        provider, options = settings.key_move
        record["key_move"] = {"key_provider": provider, "key_options": dict(options)}
    write_atomically(settings.record_path, json.dumps(record, indent=2).encode())


# -- console sign-in through an identity provider (OpenID Connect) -----------------------------

OIDC_SESSION_MINUTES = 15.0  # a person removed from a group at the provider keeps no more
MAX_SECRET_FILE = 4096


@dataclass(frozen=True)
class OidcSettings:
    """The provider, the vault's client there, and how long a person's console session lives
    (their role is decided again at the next sign-in). The client secret, for a confidential
    client, is read from a private file or the environment, never from vault.json, and is
    held in a value whose repr hides it."""

    issuer: str
    client_id: str
    client_secret: SecretBytes | None
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    session_lifetime: float = OIDC_SESSION_MINUTES * 60


def _secret_file(path: Path) -> SecretBytes:
    """A client secret file: private (0600, this user's, not a symlink), its one line."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        raise VaultError(f"the OIDC client secret file {path} does not exist") from None
    except PrivateFileError as exc:
        raise VaultError(f"the OIDC client secret file {path} {exc}") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_SECRET_FILE + 1)
    secret = data.strip()
    if not secret or len(data) > MAX_SECRET_FILE or b"\n" in secret:
        raise VaultError(f"the OIDC client secret file {path} must hold the secret on one line")
    return SecretBytes(secret)


def oidc_settings(
    issuer: str | None = None,
    client_id: str | None = None,
    client_secret_file: Path | None = None,
    scopes: str | None = None,
    session_minutes: float | None = None,
) -> OidcSettings | None:
    """Flags, then the environment (`TOOLKIT_VAULT_OIDC_ISSUER`, ...); None when no issuer
    is set (bearer tokens only)."""
    env = EnvSettings.from_environment()
    issuer = issuer or env.oidc_issuer
    if not issuer:
        return None
    client_id = client_id or env.oidc_client_id
    if not client_id:
        raise VaultError("an OIDC issuer needs a client id (TOOLKIT_VAULT_OIDC_CLIENT_ID)")
    secret_file = client_secret_file or env.oidc_client_secret_file
    if secret_file is not None:
        secret: SecretBytes | None = _secret_file(secret_file)
    elif env.oidc_client_secret is not None and len(env.oidc_client_secret):
        secret = env.oidc_client_secret
    else:
        secret = None  # a public client: PKCE alone
    words = tuple((scopes or env.oidc_scopes or "openid profile email").split())
    minutes = session_minutes or env.oidc_session_minutes or OIDC_SESSION_MINUTES
    if not 1 <= minutes <= 24 * 60:
        raise VaultError("an OIDC console session lasts from 1 to 1440 minutes")
    return OidcSettings(issuer, client_id, secret, words, minutes * 60)
