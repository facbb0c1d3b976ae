"""The vault as an MCP client of imported servers: sessions with one upstream server over
stdio (a process launched through `sandbox`) or streamable HTTP (to addresses `addresses`
allows), listing its tools and calling them for the tool engine (`tools`).

Credentials reach it only as arguments, for one call or one session: it never reads them
itself. An import-linter `forbidden` contract keeps it from `store`, `keys`, `crypto` and
`access`, directly or through anything else, so a server the vault did not write can never
be handed more than its caller chose to pass.

Empty until the client arrives: the room exists so that the contract holds from its first
line.

May import: `sandbox` and the shared leaves (`addresses`, `canonical`, `errors`, `logs`,
`files`, `versions`); never `store`, `keys`, `crypto`, `access` or anything above them.
"""
