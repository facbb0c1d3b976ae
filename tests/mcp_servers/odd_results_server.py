"""A stdio MCP server written by hand (no SDK), for tests/test_mcp_client_results.py: it
speaks 2025-11-25 through `initialize` (or, with `--modern`, 2026-07-28 through
`server/discover`) and answers `tools/call` with results an imported server may send that
a client must not take as they are: structured content its own output schema refuses, or
none where the schema asks for it; a result of no revision's shape; a request for input
(2026-07-28); a line longer than the client's bound; and an output schema whose `pattern`
backtracks for seconds on Python's `re` (`backtracks`: 27 a's and a "!" against
`^(a+)+$`). `fits` and `failing` answer as a server should.

Run: python odd_results_server.py [--modern]
"""

from __future__ import annotations

import json
import sys

MODERN = "--modern" in sys.argv[1:]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object"}, "outputSchema": SCHEMA}
    for name in ("fits", "mismatch", "missing", "failing", "bad_schema")
] + [
    {"name": name, "description": name, "inputSchema": {"type": "object"}}
    for name in ("asks_for_input", "not_a_result", "huge_line")
]
TOOLS[4]["outputSchema"] = {"type": "object", "properties": {"n": {"type": 12}}}
CATASTROPHIC = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
TOOLS.append(
    {
        "name": "backtracks",
        "description": "x",
        "inputSchema": {"type": "object"},
        "outputSchema": CATASTROPHIC,
    }
)
RESULTS = {
    "fits": {"content": [{"type": "text", "text": "1"}], "structuredContent": {"n": 1}},
    "mismatch": {"content": [{"type": "text", "text": "one"}], "structuredContent": {"n": "one"}},
    "missing": {"content": [{"type": "text", "text": "1"}]},
    "failing": {"content": [{"type": "text", "text": "it failed"}], "isError": True},
    "bad_schema": {"content": [{"type": "text", "text": "1"}], "structuredContent": {"n": 1}},
    "asks_for_input": {"resultType": "input_required", "requestState": "opaque"},
    "not_a_result": {"content": "sk-odd-canary: not a list of blocks"},
    "backtracks": {"content": [], "structuredContent": {"s": "a" * 27 + "!"}},
}
# what 2026-07-28's results of lists carry
CACHE = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}


def answer(message: dict[str, object]) -> dict[str, object] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification
    params = message.get("params")
    if method == "server/discover" and MODERN:
        result = {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            **CACHE,
        }
    elif method == "initialize":
        result: object = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd-results", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS, **(CACHE if MODERN else {})}
    elif method == "tools/call" and isinstance(params, dict) and params.get("name") in RESULTS:
        result = {"resultType": "complete", **RESULTS[str(params["name"])]}
    elif method == "tools/call":
        sys.stdout.write('{"jsonrpc": "2.0", "pad": "' + "x" * (9 * 1024 * 1024))
        sys.stdout.flush()
        return None
    else:
        error = {"code": -32601, "message": "method not found"}
        return {"jsonrpc": "2.0", "id": ident, "error": error}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            reply = answer(json.loads(line))
            if reply is not None:
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
