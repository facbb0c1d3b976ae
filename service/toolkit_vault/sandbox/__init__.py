"""The sandbox: launching an untrusted process (an imported MCP server, a toolkit's
command) with only the filesystem binds, resource limits and clean environment it is
given, and nothing else of the vault's. A leaf: it knows nothing of keys, the store,
sessions or toolkits; whatever a process may see (a credential in its environment, a
directory) is passed in by its caller, and the process gets nothing by inheritance.

Empty until the sandbox arrives: the room exists, at the bottom of the layers, so that
nothing it could leak is in reach when it does.

May import: nothing of `toolkit_vault` (the standard library, and the packages that
confine a process); everything above may import it.
"""
