"""The vault's one service API: every transport and command goes through it.

`vault` holds the use cases (sessions, list, configure, tools, purge, check), in layers
of one idea each (`instance_sync`, `listing`, `configuring`), over parts it makes at
construction: the live instances (`instances`, one table), `sealing`, `registry_follow`
(imports and removals, from the chain), `push` (which connections hear an event), `upkeep`
(purge, audit verify and export, accept-restore, check) and the OAuth token policy
(`oauth_tokens`: `oauth_refresh`, `oauth_revoke`, `oauth_schedule`, sharing
`oauth_specs`); `oauth_connect` is the connect flow the web console runs; `ports` and
`outcomes` the narrow types they share. `connection` is one A2E connection (handshake,
capability gating, replies) and `spec_plugin` the spec's `ToolkitPlugin` it dispatches
through; `intake` the one-time pages that take secrets from a person; `operators` what an
operator does from the console or `/v1` (tokens, revoke, intake links, purge), each
confirmed and audited as the signed-in operator; `purge` crypto-shredding a scope's
configs; `events` the status pushes; `rates` the token bucket that bounds them and each
principal's requests.

May import: every package below the transports.
"""
