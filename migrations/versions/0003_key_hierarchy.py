"""key hierarchy: vault keys wrapped by the master key; key ids no longer name master keys

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00

`vault_keys` holds the middle layer (master key -> vault keys -> data keys). The `kek_id`
columns of `config_versions` and `internal_keys` now name a vault key, so their foreign keys
to `master_keys` go. `master_keys` stays, read-only, for vaults made before: moving their
data keys to a vault key needs the provider, so `toolkit-vault init` does it after this
migration (`toolkit_vault.keys.upgrade`), resumably; until it has, the vault refuses to open.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "vault_keys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("retired_at", sa.Float(), nullable=True),
        sa.Column("mac", sa.LargeBinary(length=32), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_vault_keys")),
    )
    with op.batch_alter_table("config_versions", schema=None) as batch_op:
        batch_op.drop_constraint("fk_config_versions_kek_id_master_keys", type_="foreignkey")
    with op.batch_alter_table("internal_keys", schema=None) as batch_op:
        batch_op.drop_constraint("fk_internal_keys_kek_id_master_keys", type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("internal_keys", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_internal_keys_kek_id_master_keys", "master_keys", ["kek_id"], ["kek_id"]
        )
    with op.batch_alter_table("config_versions", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_config_versions_kek_id_master_keys", "master_keys", ["kek_id"], ["kek_id"]
        )
    op.drop_table("vault_keys")
