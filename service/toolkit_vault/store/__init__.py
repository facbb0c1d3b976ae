"""State: the only package that reads or writes the database.

Owns the SQLAlchemy models, the Alembic-facing engine setup, the `Store` (config versions,
current pointers, sessions, principals, imported definitions), the keys' rows as named
operations (`vault_keys`, `data_keys`, `recovery_keys`: wrapped bytes in and out, the crypto
left to `keys`), the audit chain as it is
written and followed (`chain`, `ledger`), the witness file, row MACs (`integrity`) and the
comparison of rows with the chain (`reconcile`). Everything above it gets a row only when
its MAC holds and the chain calls it current.

May import: `schema`, `crypto`, `protocol`, `canonical`, `errors`, `logs`.
"""
