"""The vault's one service API: every transport and command goes through it.

`vault` holds the use cases (sessions, list, configure, tools, purge, check) and the
toolkit instances this process initialized; `connection` is one A2E connection (handshake,
capability gating, replies) and `spec_plugin` the spec's `ToolkitPlugin` it dispatches
through; `intake` the one-time pages that take secrets from a person; `operators` what an
operator does from the console or `/v1` (tokens, revoke, intake links, purge), each
confirmed and audited as the signed-in operator; `purge` crypto-shredding a scope's
configs; `events` the status pushes; `rates` the token bucket that bounds them and each
principal's requests.

May import: every package below the transports.
"""
