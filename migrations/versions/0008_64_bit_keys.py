"""64-bit chain positions and version ids on PostgreSQL: `audit_events.seq`, `audit_head.seq`,
`config_versions.id` and its sequence

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 17:10:00

Every write appends an audit event, and every configure a version row. PostgreSQL's
`integer` ends at 2,147,483,647: a vault writing a thousand events a second would reach it
in under 25 days, and then refuse every write. SQLite's INTEGER is 64-bit already, so this
revision changes nothing there. On PostgreSQL, changing a column's type rewrites its table
under an exclusive lock: upgrade a large vault in a maintenance window (the capacity plan
in BENCHMARKS.md has the sizes). The downgrade fails, changing nothing, once a value is
past the 32-bit range.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("audit_events", "seq"), ("audit_head", "seq"), ("config_versions", "id"))


def upgrade() -> None:
    _retype(sa.Integer(), sa.BigInteger(), "bigint")


def downgrade() -> None:
    _retype(sa.BigInteger(), sa.Integer(), "integer")


def _retype(before: sa.types.TypeEngine[int], after: sa.types.TypeEngine[int], name: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, existing_type=before, type_=after)
    # the column's type leaves its sequence's alone, and a sequence `AS integer` stops there
    sequence = bind.execute(sa.text("SELECT pg_get_serial_sequence('config_versions', 'id')"))
    op.execute(f"ALTER SEQUENCE {sequence.scalar_one()} AS {name}")
