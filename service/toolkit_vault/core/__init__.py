"""The vault's one service API: every transport and command goes through it.

`service` holds the use cases (list, configure, resume, tools) and the A2E connection;
`intake` the one-time pages that take secrets from a person; `events` the status pushes.

May import: every package below the transports.
"""
