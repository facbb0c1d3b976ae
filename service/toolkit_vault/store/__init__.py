"""State: the only package that reads or writes the database.

Owns the SQLAlchemy models, the Alembic-facing engine setup, the `Store` (`storage`: sessions
and principal scopes, and one facade over its parts, stacked as base classes: `base`,
`marks` for commit marks, `transactions` for reads, writes and group commit, `following`
for the chain followed and the witness, `links` for chain appends, `versions` for config
versions and current pointers), every SQL statement the store sends (`statements`, most on
the driver's own cursor: `driver`), the audit chain as it is written and followed
(`chain`, `ledger`), the witness file, row MACs (`integrity`) and the comparison of rows
with the chain (`reconcile`). Everything above it gets a row only when its MAC holds and
the chain calls it current.

Callers above speak in named operations, never in statements or connections: among them
`principals` (tokens' rows, and who hears of a change), `imports` (imported definitions),
`snapshots` (a backup's consistent read and a restore's bulk load), `sessions` (session ids
as people type them), `urls` (a database URL as shown), `trail_queries`,
`history_queries`, `shredding`, `chain_snapshot`, `backfill`, the chain's checkpoints
(`checkpoints`), each process's chain of tool-call records (`call_chains`, `call_links`,
`call_records`, `call_chain_reads`), and the keys' rows
(`vault_keys`, `data_keys`, `recovery_keys`: wrapped bytes in and out, the crypto left to
`keys`).

May import: `schema`, `crypto`, `protocol`, `canonical`, `errors`, `logs`.
"""
