"""recovery keys: `recovery_keys`, the vault keys wrapped by a key split into shares

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 08:00:00

`keys recovery init` wraps each live vault key under a fresh recovery key, whose only
copies are the SLIP-39 shares it shows once; `keys recovery unseal` with enough shares
unwraps them again when the master key is lost. A wrap is AEAD-bound to its vault key id
and share set (`keys/recovery.py`), so the rows need no MAC. A downgrade drops the table
(and with it the way back without the master key).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "recovery_keys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("set_id", sa.String(length=64), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_recovery_keys")),
    )


def downgrade() -> None:
    op.drop_table("recovery_keys")
