"""State: the only package that reads or writes the database.

Owns the SQLAlchemy models, the Alembic-facing engine setup, the `Store` (config versions,
current pointers, sessions, principals, imported definitions), the audit chain as it is
written and followed (`chain`, `ledger`), the witness file, row MACs (`integrity`) and the
comparison of rows with the chain (`reconcile`). Everything above it gets a row only when
its MAC holds and the chain calls it current.

Callers above speak in named operations, never in statements or connections: among them
`principals` (tokens' rows, and who hears of a change), `imports` (imported definitions),
`snapshots` (a backup's consistent read and a restore's bulk load), `sessions` (session ids
as people type them) and `urls` (a database URL as shown).

May import: `schema`, `crypto`, `protocol`, `canonical`, `errors`, `logs`.
"""
