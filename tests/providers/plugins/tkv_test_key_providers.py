"""Key provider plug-ins for the discovery tests: one good, the rest broken in one way each.
Installed only while a test puts this directory on sys.path (its dist-info makes the entry
points real)."""

from __future__ import annotations

from toolkit_vault.keys.providers import ProviderSettings
from toolkit_vault.keys.providers.file import FileProvider


class NotAProvider:
    name = "tkv-test-not-a-provider"


class Good(FileProvider):
    """A third-party provider: the file provider under another name."""

    name = "tkv-test-good"


class Misnamed(FileProvider):
    name = "file"


class CrashesAtStart(FileProvider):
    name = "tkv-test-crashes"

    def __init__(self, settings: ProviderSettings) -> None:
        raise RuntimeError("secret-canary-in-a-crash")


class Twice(FileProvider):
    name = "tkv-test-twice"


class OtherTwice(FileProvider):
    name = "tkv-test-twice"
