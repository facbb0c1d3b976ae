"""A toolkit plugin that sends its decrypted key to stderr every way a careless one could.

Installed only where a test puts this directory on PYTHONPATH (its `.dist-info` declares it
in `toolkit_vault.toolkits`), so no other test's toolkit list changes. Each way ends in a
line the test looks for, with `[REDACTED]` where the key was.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from typing import Any, ClassVar


def _die_in_a_thread(key: str) -> None:
    raise ValueError(f"thread dies holding {key}")


class LeakyLogger:
    definition: ClassVar[dict[str, Any]] = {
        "name": "leaky-logger",
        "description": "Logs its own credential (a test of the host's redaction)",
        "category": "test",
        "tags": ["test"],
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "writeOnly": True}},
            "required": ["api_key"],
            "additionalProperties": False,
        },
        "tools": ["noop"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        key = config["api_key"]
        log = logging.getLogger("tkv_leaky_plugins")
        log.warning("plugin logger: connecting with %s", key)
        log.error(f"f-string: {key!r}")
        logging.warning("root logger: %s", key)
        log.warning("unfit arguments: %d", key)  # a TypeError when the message is made
        try:
            raise RuntimeError(f"login refused for {key}")
        except RuntimeError:
            log.exception("log.exception: login failed")
        own = logging.getLogger("tkv_leaky_plugins.own")
        if not own.handlers:  # a handler of its own on a logger that does not propagate
            own.addHandler(logging.StreamHandler(sys.stderr))
            own.propagate = False
        own.warning("own handler: %s", key)
        warnings.warn(f"warnings.warn: {key}", UserWarning, stacklevel=1)
        thread = threading.Thread(target=_die_in_a_thread, args=(key,), name="leaky")
        thread.start()
        thread.join()
        logging.basicConfig(
            force=True, stream=sys.stderr, level=logging.WARNING, format="%(message)s"
        )
        logging.getLogger("tkv_leaky_plugins").warning("after basicConfig(force=True): %s", key)
