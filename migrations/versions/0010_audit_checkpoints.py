"""Audit checkpoints: `audit_checkpoints`, the chain's state at an event, authenticated

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 06:30:00

A process that follows the audit chain (every one that believes stored state) walked it
from the first event; it now starts from the newest checkpoint its vault home names and
whose MAC and link at its seq hold (`store/checkpoints.py`), and follows only the events
after it. Derived data: a downgrade drops the table, and processes walk the whole chain.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_checkpoints",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("mac", sa.LargeBinary(length=32), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("checkpoint_mac", sa.LargeBinary(length=32), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_audit_checkpoints")),
    )


def downgrade() -> None:
    op.drop_table("audit_checkpoints")
