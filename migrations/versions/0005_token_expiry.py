"""tokens with an expiry: `principals.expires_at`

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 10:00:00

A principal's token may now expire (`tokens create --ttl 30d`): `expires_at` (epoch seconds)
is NULL for a token that never expires, which every row written before this revision is.
The row MAC (`store/integrity.py`) covers the expiry only when there is one, so those rows
verify as they did and nothing needs signing again; a row given an expiry, or one whose
expiry is removed or moved, fails its MAC. A downgrade drops the column: a principal that
had an expiry then fails its MAC and is refused (fail closed), the others keep working.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
