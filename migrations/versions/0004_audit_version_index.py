"""audit events indexed by version: `audit verify` finds each version's event in one lookup

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 14:50:00

`audit verify` joins every config version to its `configure` event on (session, toolkit,
version). The index held only (session, toolkit), so each version scanned every event of
its session and toolkit: quadratic in one session's configures (8,000 configures over 50
sessions took 13.7 s to verify, 40,000 over four minutes). With the version in the index
the join is one lookup a version; the index still serves every query by (session, toolkit).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_session")
        batch_op.create_index(
            "ix_audit_events_session", ["session_id", "toolkit_name", "version"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_session")
        batch_op.create_index(
            "ix_audit_events_session", ["session_id", "toolkit_name"], unique=False
        )
