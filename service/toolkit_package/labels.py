"""A raw input name made into a label a person reads: `SSL_MODE` -> "SSL mode", `--host` ->
"Host", `apiKey` -> "API key".

An imported field's name is what its publisher's command takes (an environment variable, a
flag, a placeholder), not a title: the import writes this as the field's `title` when the
publisher gave none, and the intake form makes a schema's untitled property readable the
same way (`toolkit_vault.transports.web.forms`).
"""

from __future__ import annotations

import re

__all__ = ["readable"]

_ACRONYMS = {
    "api", "aws", "cpu", "db", "dns", "gcp", "gpu", "http", "https", "id", "ip", "json",
    "jwt", "llm", "mcp", "oauth", "sql", "ssh", "ssl", "tls", "ttl", "ui", "uri", "url",
    "uuid", "smtp", "imap", "s3", "sso", "pat",
}  # fmt: skip
_SPELLED = {"oauth": "OAuth"}
_WORD = re.compile(r"[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+")


def readable(name: str) -> str:
    """A name made readable: its words (split at `_`, `-`, case changes), the first one
    capitalized, acronyms in capitals; a name with no letters or digits stays as it is."""
    words = _WORD.findall(name)
    if not words:
        return name
    shown = []
    for index, word in enumerate(words):
        low = word.lower()
        if low in _ACRONYMS:
            shown.append(_SPELLED.get(low, low.upper()))
        else:
            shown.append(low.capitalize() if index == 0 else low)
    return " ".join(shown)
