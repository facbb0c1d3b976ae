"""Start-up: `init_vault` creates or checks a vault home; `open_vault` refuses a bad one.

The key provider is a plug-in (`providers`), built from the settings `init` recorded. A
missing, unreachable or wrong master key stops start-up with a message naming the provider
and the key; a replacement is never generated in its place. The only time a master key is
created is `init` on a store that has none and a provider that holds none.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from toolkit_vault import crypto
from toolkit_vault.access.principals import Principal
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.keys.providers import KeyProvider, ProviderSettings, load_provider
from toolkit_vault.settings import VaultSettings, load_settings, target_settings, write_record
from toolkit_vault.store.database import migrate, open_engine, require_current
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.reconcile import LOCAL_PRINCIPAL_ID
from toolkit_vault.store.storage import Store
from toolkit_vault.store.witness import WITNESS_NAME, Witness

# The serving side (MCP, OAuth, the protocol's models) and the key hierarchy's upkeep are
# imported where they are used, not here: a read-only command (`tokens list`, `audit list`)
# needs neither, and importing them was most of its start.
if TYPE_CHECKING:
    from toolkit_vault.audit.devices import AuditDevices
    from toolkit_vault.core.auditing import Auditing
    from toolkit_vault.core.vault import Vault
    from toolkit_vault.keys.hierarchy import VaultKeys
    from toolkit_vault.toolkits.listing import ListedToolkit
    from toolkit_vault.toolkits.registry import ToolkitRegistry

__all__ = [
    "LOCAL_PRINCIPAL",
    "InitReport",
    "audit_devices",
    "home_providers",
    "init_vault",
    "list_toolkits",
    "open_auditing",
    "open_provider",
    "open_store",
    "open_vault",
]

LOCAL_PRINCIPAL = Principal(LOCAL_PRINCIPAL_ID, "agent")


@dataclass(frozen=True)
class InitReport:
    home: str
    database_url: str
    key_provider: str
    key_location: str
    created_key: bool
    upgraded: dict[str, Any] | None = None  # what the authenticated-state upgrade signed
    hierarchy: dict[str, Any] | None = None  # what the key-hierarchy upgrade moved


def open_provider(settings: VaultSettings) -> KeyProvider:
    """The key provider the settings name, built with its recorded options (no I/O yet)."""
    options = ProviderSettings(settings.home, settings.vault_id, dict(settings.key_options))
    return load_provider(settings.key_provider, options)


def home_providers(settings: VaultSettings) -> list[KeyProvider]:
    """The providers the home names now: its pin, then a master key move's target while the
    move is under way (`keys.move`). Read when asked, so a running process follows a move
    made by another, as it follows a rotation."""
    now = load_settings(home=settings.home)
    providers = [open_provider(now)]
    if now.key_move is not None:
        provider, options = now.key_move
        providers.append(open_provider(target_settings(now, provider, options)))
    return providers


def init_vault(settings: VaultSettings) -> InitReport:
    """Create the home, migrate the database and set up the key hierarchy; safe to run
    again. On a vault made by an older release it also finishes its upgrades: row MACs
    (`upgrade`) and the move of its data keys to a vault key (`keyupgrade`)."""
    from toolkit_vault.keys.hierarchy import VaultKeys, create_hierarchy
    from toolkit_vault.keys.keystore import read_vault_keys
    from toolkit_vault.keys.upgrade import finish_upgrade, legacy_keys, legacy_pending

    provider = open_provider(settings)
    sink = audit_devices(settings)  # a bad device spec stops init before anything changes
    _private_home(settings.home)
    engine = open_engine(settings.database_url)
    created, upgraded, hierarchy = False, None, None
    try:
        migrate(engine)
        store = Store(
            engine,
            witness=Witness(settings.home / WITNESS_NAME),
            audit_sink=sink,
        )
        store.makes_witness = True  # a vault made before the witness gets one here
        legacy = legacy_keys(store, provider) if legacy_pending(store) else None
        if read_vault_keys(store):
            ring, internal = VaultKeys(store, provider).open(legacy)
        else:
            if legacy is None and provider.status().current is None:
                provider.create_master_key()
                created = True
            ring, internal = create_hierarchy(store, provider, legacy)
        store.ensure_principal(LOCAL_PRINCIPAL.principal_id, "local", LOCAL_PRINCIPAL.role)
        from toolkit_vault.audit.upgrade import authenticate_state  # `init` alone needs it

        report = authenticate_state(store, ring, internal["fingerprint"], internal["audit"])
        upgraded = None if report is None or created else report.as_json()
        if legacy is not None:
            hierarchy = finish_upgrade(store, ring, legacy).as_json()
        VaultKeys(store, provider).open()  # every live key opens, every record is signed
        if (failure := store.state_failure()) is not None:
            raise VaultError(failure)  # a chain that breaks or is behind its witness
        if store.witness is not None:  # on disk before `init` answers: not left to the
            store.witness.flush()  # flusher thread or the exit, which a kill skips
        store.close_watch()
    finally:
        engine.dispose()
    recorded = dataclasses.replace(settings, key_options=provider.recorded_options())
    write_record(recorded)
    return InitReport(
        str(settings.home),
        settings.database_url,
        settings.key_provider,
        provider.where,
        created,
        upgraded,
        hierarchy,
    )


def _private_home(home: Path) -> None:
    """The home holds the database and perhaps the key file: 0700, whatever it was before."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = home.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(home, 0o700)


def _check_home(home: Path) -> None:
    try:
        mode = stat.S_IMODE(home.stat().st_mode)
    except FileNotFoundError:
        raise VaultError(f"no vault in {home}: run `toolkit-vault init` first") from None
    if mode & 0o077:
        raise VaultError(
            f"{home} has mode {mode:04o}; a vault home must be 0700 "
            f"(chmod 700 {home}, or run `toolkit-vault init`)"
        )


def audit_devices(settings: VaultSettings, stream: IO[bytes] | None = None) -> AuditDevices | None:
    """The audit devices the settings name (`audit.devices`), checked now, opened at the
    first event; `stream` is where the `stdout` device writes (default stderr: a command's
    stdout is its output; `serve` passes stdout)."""
    if not settings.audit_devices and not settings.audit_fail_closed:
        return None  # as `open_devices` has it, without importing the devices' side
    from toolkit_vault.audit.devices import open_devices

    return open_devices(
        settings.audit_devices,
        settings.home,
        fail_closed=settings.audit_fail_closed,
        stream=stream,
    )


def open_store(settings: VaultSettings, *, audit_stream: IO[bytes] | None = None) -> Store:
    """The store alone, for read-only auditor commands: no master key, nothing decrypts.
    Its writes go to the settings' audit devices (`audit_devices`)."""
    if not settings.initialized:
        raise VaultError(f"no vault in {settings.home}: run `toolkit-vault init` first")
    _check_home(settings.home)
    sink = audit_devices(settings, audit_stream)
    engine = open_engine(settings.database_url)
    require_current(engine)
    return Store(engine, witness=Witness(settings.home / WITNESS_NAME), audit_sink=sink)


def open_vault(
    settings: VaultSettings,
    registry: ToolkitRegistry | None = None,
    *,
    current: bool = True,
    audit_stream: IO[bytes] | None = None,
    launches: bool = True,
) -> Vault:
    """Open an initialized vault, or refuse with one clear reason. The key provider is
    asked once per live vault key, here, and never again while nothing rotates.

    `current`: also refuse a store whose state cannot be believed (its audit chain breaks,
    or it is behind the home's witness), so a server never starts on it; operators' commands
    (`audit verify`, `audit accept-restore`) open it anyway to say what is wrong.

    `launches`: the vault may launch or reach imported servers, so the MCP SDK
    (`mcp_client.host`) is imported here, with the vault, not at a server's first launch, on
    that launch's clock and beside the threads serving runs. Operators' commands open the
    vault without toolkits (`cli.shell.open_for_operators`) and launch nothing: the SDK's
    import was most of their start (issue 53); `toolkits list` opens the registry alone."""
    from toolkit_vault.core.vault import Vault

    if launches:
        from toolkit_vault.mcp_client import host  # noqa: F401

    opened = _open_registry(settings, registry, current, audit_stream)
    store, keys, (ring, internal), registry, loaded_at = opened
    vault = Vault(
        store,
        ring,
        internal["fingerprint"],
        registry,
        reload_keys=keys.reload,
        audit_key=internal["audit"],
        relay_key=crypto.derive_key(internal["state"], "relay"),
        intake_key=crypto.derive_key(internal["state"], "intake"),
        registry_loaded_at=loaded_at,
    )
    return vault


def open_auditing(settings: VaultSettings) -> Auditing:
    """What `audit verify` and `check` run on: the store and its keys, opened as
    `open_vault(current=False)` opens them (a store whose state cannot be believed opens
    too, so the command says what is wrong), without the toolkits, the imported servers'
    settings or the vault that serves them (`core.auditing`: issue 53)."""
    from toolkit_vault.core.auditing import Auditing
    from toolkit_vault.core.sealing import Sealing

    store, keys = _store_and_keys(settings, None)
    ring, internal = keys.open()
    sealing = Sealing(ring, internal["fingerprint"], keys.reload)
    return Auditing(store, sealing.ring_for, internal["audit"])


def list_toolkits(settings: VaultSettings) -> list[ListedToolkit]:
    """The registered toolkits' lines, the registry opened exactly as `open_vault` opens
    and checks it (imported definitions verified under the vault keys, a store that cannot
    be believed refused), without the rest of the vault: importing `Vault` (the serving
    side: OAuth clients, the tool engine) was most of `toolkits list`'s start. A vault with
    no plugin installed and no imported definition lists its built-in toolkit without
    building the registry (`toolkits.listing`: issue 53)."""
    from toolkit_vault.installed import group
    from toolkit_vault.toolkits.listing import BUILT_IN_LISTED, ListedToolkit
    from toolkit_vault.toolkits.sources import ENTRY_POINT_GROUP

    store, keys, imported = _open_keys(settings, None, listing=True)
    try:
        keys.open()
        if imported or group(ENTRY_POINT_GROUP):
            registry = _load_registry(store, imported)
            listed = [ListedToolkit.of(toolkit) for toolkit in registry.all()]
        else:
            listed = [BUILT_IN_LISTED]
        if (failure := store.state_failure()) is not None:
            raise VaultError(failure)
    finally:
        store.close()
    return listed


def _open_registry(
    settings: VaultSettings,
    registry: ToolkitRegistry | None,
    current: bool,
    audit_stream: IO[bytes] | None,
) -> tuple[
    Store,
    VaultKeys,
    tuple[crypto.KeyRing, dict[str, crypto.SecretBytes]],
    ToolkitRegistry,
    int | None,
]:
    """The store, its keys opened and the registry loaded: what `open_vault` needs."""
    store, keys, _ = _open_keys(settings, audit_stream)
    opened = keys.open()
    loaded_at = None
    if registry is None:
        loaded_at = _registry_changes(store)  # read first: never newer than what loads
        registry = _load_registry(store, True)
    if current and (failure := store.state_failure()) is not None:
        raise VaultError(failure)
    return store, keys, opened, registry, loaded_at


def _open_keys(
    settings: VaultSettings, audit_stream: IO[bytes] | None, *, listing: bool = False
) -> tuple[Store, VaultKeys, bool]:
    """The store and its vault keys (not opened yet), and whether imported
    definitions are to be loaded. `listing`: a vault that stores none is listed without
    importing what runs imported servers (`served`, `imports`: issue 53), which such a
    listing has no use for."""
    from toolkit_vault.store.imports import any_imported

    store, keys = _store_and_keys(settings, audit_stream)
    imported = not listing or any_imported(store)
    if imported:
        from toolkit_vault.toolkits.served import ServerSettings, use_servers

        use_servers(ServerSettings.from_environment(_hidden_from_servers(settings)))
    return store, keys, imported


def _store_and_keys(
    settings: VaultSettings, audit_stream: IO[bytes] | None
) -> tuple[Store, VaultKeys]:
    """The store and its vault keys (not opened yet); a vault whose key hierarchy upgrade
    has not finished is refused."""
    from toolkit_vault.keys.hierarchy import VaultKeys
    from toolkit_vault.keys.upgrade import legacy_pending

    store = open_store(settings, audit_stream=audit_stream)
    if legacy_pending(store):
        raise VaultError(
            "this vault was made before the key hierarchy and its upgrade has not finished: "
            "run `toolkit-vault init`"
        )
    return store, VaultKeys(store, open_provider(settings), partial(home_providers, settings))


def _load_registry(store: Store, imported: bool) -> ToolkitRegistry:
    """The built-in and plugin toolkits, and (`imported`) those `toolkits import` stored."""
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    registry = ToolkitRegistry.default()
    if imported:
        from toolkit_vault.toolkits.imports import stored_toolkits

        registry.load_imported(stored_toolkits(store))
    return registry


def _hidden_from_servers(settings: VaultSettings) -> list[Path]:
    """What no imported server's bind may show: the vault home and a SQLite file's directory."""
    hidden = [settings.home]
    if settings.database_url.startswith("sqlite:///"):
        hidden.append(Path(settings.database_url.removeprefix("sqlite:///")).parent)
    return hidden


def _registry_changes(store: Store) -> int | None:
    """The chain's count of imports and removals (`Vault` loads the imported toolkits
    again when it moves); None when the chain cannot be followed (then the first request
    loads them again)."""
    try:
        return store.chain_state().registry_changes
    except (StateUnknown, StoreError):
        return None
