"""Thin shells over `core`: HTTP and WebSocket (`http_api`, `http_server`, `asgi`), the admin
API under `/v1/` (`http_admin`; the audit trail, `http_audit`; a refusal's A2E error body in
`refusals`), the console and intake pages (`web`), A2E over stdio (`stdio`), and the
PostgreSQL relay that carries status events between processes (`relay`). No logic of their
own.

May import: `core` and everything below it; never `cli` or `bootstrap`.
"""
