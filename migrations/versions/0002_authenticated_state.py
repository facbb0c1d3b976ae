"""authenticated state: a MAC column on every row whose meaning matters, events by action

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 13:30:00

The columns start NULL: `toolkit-vault init` then runs the keyed backfill
(`toolkit_vault.audit.upgrade`), which needs the master key and so cannot run here. Until it has,
a row without a MAC is not believed (fail closed).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "master_keys",
    "principals",
    "sessions",
    "config_versions",
    "current_configs",
    "imported_toolkits",
)


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("mac", sa.LargeBinary(length=32), nullable=True))
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_action", ["action", "seq"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_action")
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("mac")
