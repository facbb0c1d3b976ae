"""A2E over HTTP: `POST /a2e` (`over_http`, one message in, one out) and the WebSocket
(`over_websocket`, with its ordered `outbox` of answers and push events). Both are plain
ASGI apps that `http_api` mounts before FastAPI's stack, both pass the app's guards
(`http_guards`) and run messages on the threads `lanes` picks. A2E over stdio, which has
no guards to pass, is `transports.stdio`; MCP transports live beside this, in
`transports.mcp`.

May import: `core` and everything below it, and the transports' shared pieces
(`http_guards`, `http_access`, `refusals`, `workers`, `web`'s origin and disconnect
helpers); never `http_api`, which assembles these.
"""
