"""Audit: what auditors and operators read back: the chain verified end to end (`verify`),
config history without a secret (`history`), the trail filtered, paged and said in words
(`trail`), and the keyed backfill that upgrades a vault made before authenticated state
(`upgrade`); and what receivers outside get: each committed event sent to audit devices
(`devices`: files, stdout; `syslog`: RFC 5424) in one line format, replayed from a cursor
and verified (`export`).

May import: `keys`, `access`, `store` and everything below them.
"""
