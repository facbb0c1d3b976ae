"""Call chains: `call_records` and `call_chains`, each process's tool call records

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 06:30:00

A tool call changes no state, and calls outnumber every other write by orders of
magnitude; appended to the one audit chain, each batch of call records waited on its lock,
so replicas did not add up. Each process now appends its calls' records to a chain of its
own (`store/call_chains.py`), anchored from time to time in the main chain by a
`calls_anchored` event. The records written before this revision stay in `audit_events`,
where they were verified; the downgrade drops the new tables and what they hold.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "call_records",
        sa.Column("id", _BIG, autoincrement=True, nullable=False),
        sa.Column("chain", sa.String(length=64), nullable=False),
        sa.Column("seq", _BIG, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("toolkit_name", sa.String(length=200), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("mac", sa.LargeBinary(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_call_records")),
        sa.UniqueConstraint("chain", "seq", name=op.f("uq_call_records_chain")),
    )
    op.create_table(
        "call_chains",
        sa.Column("chain", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("seq", _BIG, nullable=False),
        sa.Column("mac", sa.LargeBinary(length=32), nullable=False),
        sa.Column("head_mac", sa.LargeBinary(length=32), nullable=False),
        sa.PrimaryKeyConstraint("chain", name=op.f("pk_call_chains")),
    )


def downgrade() -> None:
    op.drop_table("call_chains")
    op.drop_table("call_records")
