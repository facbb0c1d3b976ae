"""Key providers: plug-ins that hold the master key and wrap/unwrap the vault's keys.

Providers are found by entry point in the group `toolkit_vault.key_providers` (this
package's own are registered the same way, in pyproject.toml): the entry point names a
`KeyProvider` subclass whose `name` is the entry point's name. Discovery fails closed: a
provider that is not installed, fails to import, is registered twice with different code,
or is not a `KeyProvider` is refused with a message naming it, and the vault never falls
back to another provider.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from toolkit_vault.installed import group
from toolkit_vault.keys.providers.base import (
    Context,
    KeyProvider,
    ProviderError,
    ProviderSettings,
    ProviderStatus,
    blob_header,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Context",
    "KeyProvider",
    "ProviderError",
    "ProviderSettings",
    "ProviderStatus",
    "blob_header",
    "load_provider",
    "provider_names",
]

ENTRY_POINT_GROUP = "toolkit_vault.key_providers"


def _entries() -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for entry in group(ENTRY_POINT_GROUP):
        same = found.setdefault(entry.name, [])
        if all(other.value != entry.value for other in same):  # one dist seen twice is fine
            same.append(entry)
    return found


def provider_names() -> list[str]:
    """The installed providers' names (not loaded: a listed one may still be refused)."""
    return sorted(_entries())


def provider_class(name: str) -> type[KeyProvider]:
    """The provider registered as `name`, or `ProviderError` (fail closed)."""
    entries = _entries().get(name)
    if not entries:
        known = ", ".join(provider_names()) or "none"
        raise ProviderError(name, f"unknown key provider {name!r} (installed: {known})")
    if len(entries) > 1:
        values = ", ".join(sorted(entry.value for entry in entries))
        raise ProviderError(name, f"key provider {name} is registered twice ({values})")
    try:
        loaded = entries[0].load()
    except Exception as exc:
        raise ProviderError(
            name, f"key provider {name} failed to load ({type(exc).__name__})"
        ) from None
    if not (isinstance(loaded, type) and issubclass(loaded, KeyProvider)):
        raise ProviderError(name, f"key provider {name} is not a KeyProvider ({entries[0].value})")
    if getattr(loaded, "name", None) != name:
        raise ProviderError(name, f"key provider {name} calls itself {loaded.name!r}")
    return loaded


def load_provider(name: str, settings: ProviderSettings) -> KeyProvider:
    """Build the provider `name` from settings; any failure is a `ProviderError` naming it."""
    cls = provider_class(name)
    try:
        return cls(settings)
    except ProviderError:
        raise
    except Exception as exc:
        raise ProviderError(
            name, f"key provider {name} failed to start ({type(exc).__name__})"
        ) from None
