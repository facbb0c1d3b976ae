"""Audit: what auditors and operators read back: the chain verified end to end (`verify`),
config history without a secret (`history`), the trail filtered and paged (`trail`, its
events `event`) and said in words (`wording`), and the keyed backfill that upgrades a vault
made before authenticated state (`upgrade`); and what receivers outside get: each committed
event sent to audit devices (`devices`, over `targets`: files, stdout; `syslog`: RFC 5424)
in one line format, replayed from a cursor and verified (`export`).

No SQL here: every read and write is a named operation of `store` (`trail_queries`,
`history_queries`, `chain_snapshot`, `backfill`). Purge, an operator's crypto-shredding,
is `core.purge` over `store.shredding`.

May import: `keys`, `access`, `store` and everything below them.
"""
