"""The no-op baseline of the `http` scenario: `python -m benchmarks.noop --port P`.

A FastAPI app with the vault's two A2E routes doing nothing but what any JSON endpoint
does: `POST /a2e` reads the body, parses it as JSON and answers a small JSON object; the
WebSocket `/a2e` echoes every text message after parsing it. It is served by
`toolkit_vault.transports.http_server.run`, the very function `toolkit-vault serve` runs, so the
server, its protocol and its settings are the same (the per-address cap lifted, as for the
bench's `serve`); only the application differs.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from toolkit_vault.transports.http_server import run

# As the bench's `serve` is started (`servers.vault_server`): wrk's 64 connections come from
# one address, and the default per-address cap (32) turned half of them away.
SLOW_CONNECTIONS_PER_IP = 256

app = FastAPI()


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/a2e")
async def a2e(request: Request) -> JSONResponse:
    message: dict[str, Any] = json.loads(await request.body())
    return JSONResponse({"type": "noop", "req_id": message.get("id", ""), "ok": True})


@app.websocket("/a2e")
async def a2e_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            message = json.loads(await websocket.receive_text())
            await websocket.send_text(json.dumps({"type": "noop", "echo": message.get("type")}))
    except WebSocketDisconnect:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    run(app, "127.0.0.1", args.port, slow_connections_per_ip=SLOW_CONNECTIONS_PER_IP)


if __name__ == "__main__":
    main()
