"""Audit: what auditors and operators read back: the chain verified end to end (`verify`),
config history without a secret (`history`), and the keyed backfill that upgrades a vault
made before authenticated state (`upgrade`).

May import: `keys`, `access`, `store` and everything below them.
"""
