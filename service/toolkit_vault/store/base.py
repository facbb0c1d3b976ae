"""What every part of the `Store` reads: its engine, its keys, its witness and ledger,
declared once (`Store.__init__` sets them), and the row MACs written with the state key.
"""

from __future__ import annotations

from sqlalchemy import Engine

from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import Signer
from toolkit_vault.store.integrity import Row as StoredRow
from toolkit_vault.store.integrity import RowAuthenticator
from toolkit_vault.store.ledger import Ledger
from toolkit_vault.store.witness import Witness


class StoreBase:
    """The state the `Store`'s parts share, and its row MACs (`integrity` says what they
    cover). Each part declares the rest of what it reads."""

    engine: Engine
    witness: Witness | None
    _sign: Signer | None  # computes audit chain links
    _rows: RowAuthenticator | None  # computes row MACs
    _ledger: Ledger | None  # the verified chain, followed (`ledger`)
    _accepting_restore: bool  # `accepting_restore`: the witness is not consulted

    @property
    def on_postgres(self) -> bool:
        """Whether the database is PostgreSQL (its relay, its notices), not SQLite."""
        return self.engine.dialect.name == "postgresql"

    def libpq_conninfo(self) -> str:
        """The database URL as libpq takes it (the PostgreSQL relay's own connection)."""
        url = self.engine.url.set(drivername="postgresql")
        return url.render_as_string(hide_password=False)

    def close(self) -> None:
        """Close every pooled connection (a command that is done with the database)."""
        self.engine.dispose()

    def mac(self, table: str, row: StoredRow) -> bytes:
        """The MAC a row of `table` is written with (`integrity` says what it covers)."""
        if self._rows is None:
            raise StoreError("the state key is not loaded: run `toolkit-vault init`")
        return self._rows.mac(table, row)

    def authentic(self, table: str, row: StoredRow) -> bool:
        """Whether a row read back is exactly as the vault wrote it (never raises)."""
        return self._rows is not None and self._rows.verify(table, row)
