"""Thin shells over `core`: the HTTP app (`http_api` assembles it; `http_server`, `asgi`),
the guards every HTTP route passes (`http_guards`: token, role, rate, size; tokens cached
in `http_access`), A2E over HTTP and WebSocket (`a2e`), MCP transports (`mcp`, beside
A2E), the admin API under `/v1/` (`http_admin`; the audit trail, `http_audit`; a refusal's
A2E error body in `refusals`), the console and intake pages (`web`), A2E over stdio
(`stdio`), and the PostgreSQL relay that carries status events between processes
(`relay`). No logic of their own.

May import: `core` and everything below it; never `cli` or `bootstrap`.
"""
