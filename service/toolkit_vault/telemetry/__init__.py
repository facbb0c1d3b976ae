"""What an operator watches: Prometheus metrics (`metrics`, read at scrape time by
`readings`) and OpenTelemetry traces (`traces`, an optional extra, off by default).

A leaf: it imports nothing of the vault, so every layer (the store's statements, the core's
configures, the tool engine's calls, the transports' requests) can report to it. What it
is handed are names and outcomes, never a value: a label or a span attribute is a
transport, a message type, an outcome, or a toolkit or tool name, bounded in number
(`labels.BoundedNames`). A session id, a token name or anything an agent submitted never
becomes a label or an attribute.
"""

from __future__ import annotations

__all__ = ["labels", "metrics", "readings", "traces"]
