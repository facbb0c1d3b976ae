"""What this build speaks: the database schema revision, the A2E protocol version and the
capabilities a handshake can grant.

They live here, apart from the models, messages and service that use them, so that
`toolkit-vault version` reads them without importing SQLAlchemy, pydantic or the service
(which would make it start as slowly as `serve`). Standard library only.
"""

from __future__ import annotations

__all__ = ["CAPABILITIES", "PROTOCOL_VERSION", "SCHEMA_REVISION"]

SCHEMA_REVISION = "0010"  # the Alembic head the models match (tests/test_storage.py checks)
PROTOCOL_VERSION = "1.0"
CAPABILITIES = ("toolkits", "tools")
