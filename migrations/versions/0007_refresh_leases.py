"""OAuth refresh leases: `refresh_leases`, who asks an authorization server and how it went

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 10:30:00

A refresh of an OAuth token set no longer asks the server inside the store's write
transaction (which held every writer of the vault for as long as the server took): one
process takes a lease per (scope, toolkit) by compare-and-set, asks outside any
transaction, then appends the new version only if the one it read is still the last. The
row also counts consecutive failed tries, for the backoff and the stop after repeated
failure (`core/oauth_refresh.py`). Transient state: a downgrade drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "refresh_leases",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("toolkit_name", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "toolkit_name", name=op.f("pk_refresh_leases")),
    )


def downgrade() -> None:
    op.drop_table("refresh_leases")
