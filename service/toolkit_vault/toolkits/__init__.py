"""Toolkits: where definitions come from and how they are initialized.

The registry (entry points, the built-in `filesystem` toolkit, imported packages; where each
comes from: `sources`; what `toolkits list` shows of each: `listing`), imports
of toolkit packages into stored definitions (`imports`, `import_names`, `import_report`,
`package_sources`), and imported MCP servers run with their configs: a local server's
command or a package's recipe (`launches`) started through the sandbox (`served`), one
process per scope, toolkit and version (`server_processes`, `server_limits`,
`server_status`), a remote server reached with its headers or token (`remote_served`,
`remote_oauth`), and their tools pinned against a rug pull (`tool_pins`).

May import: `audit`, `access`, `keys`, `store` and everything below them.
"""
