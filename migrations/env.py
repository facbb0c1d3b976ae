"""Alembic environment, in the shape of alembic's generic template.

The vault passes its own engine in `config.attributes["engine"]` (see
`toolkit_vault.store.database`); the `alembic` command line uses `TOOLKIT_VAULT_DATABASE_URL`.
"""

import os

from alembic import context
from sqlalchemy import Engine

from toolkit_vault.store.database import open_engine
from toolkit_vault.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=os.environ["TOOLKIT_VAULT_DATABASE_URL"],
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine: Engine | None = config.attributes.get("engine")
    if engine is None:
        engine = open_engine(os.environ["TOOLKIT_VAULT_DATABASE_URL"])
    with engine.connect().execution_options(vault_write=True) as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
