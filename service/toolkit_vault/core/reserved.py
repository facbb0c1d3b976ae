"""The config keys only the vault writes: a submitted config carrying one is refused.

The vault keeps facts of its own beside a toolkit's fields, at the root of a version's
config: when the credential ends (`expiry.EXPIRES_KEY`) and an OAuth connection's token set
(`oauth.TOKEN_SET_KEY`). Taken from an agent's config they would be believed: an expiry
chosen by the agent, a token set it made up. So they are refused where a config comes in
(a configure, an intake form), naming the pointer and never the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkit_vault.core.expiry import EXPIRES_KEY
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.oauth import TOKEN_SET_KEY
from toolkit_vault.schema.values import escape

__all__ = ["RESERVED_KEYS", "refuse_reserved"]

RESERVED_KEYS = frozenset({EXPIRES_KEY, TOKEN_SET_KEY})


def refuse_reserved(config: Mapping[str, Any]) -> None:
    """Raise ConfigInvalid (keyword `x-reserved`) if `config` sets a key the vault keeps."""
    found = sorted(RESERVED_KEYS.intersection(config))
    if found:
        details = [{"pointer": "/" + escape(key), "keyword": "x-reserved"} for key in found]
        raise ConfigInvalid(
            f"{', '.join(d['pointer'] for d in details)}: set by the vault only, never in a config",
            details=details,
        )
