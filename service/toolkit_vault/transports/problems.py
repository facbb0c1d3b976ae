"""The HTTP API's refusals as RFC 9457 problem details (`application/problem+json`).

`/v1`, `/openapi.json`, `/metrics` and `/readyz` answer a refusal with `type`, `title`,
`status` and `detail`, plus two extension members: `code`, the problem's short name (the
same word as the end of its `type`, for clients that switch on a string), and `details`,
the list of pointers, limits or previews the refusal carries (empty when none). A2E
clients (`/a2e`) and MCP clients (`/mcp`) keep their own protocols' error messages: a
`Refused` raised there is answered by those routes themselves.

`type` is a tag URI (RFC 4151): a stable name for the kind of problem, not a page to
fetch. `detail` is the service's own sentence: it names what was missing or which
parameter was wrong, never a value a client submitted (FastAPI's default validation body
echoes the input; `invalid` answers with locations and kinds only).
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from toolkit_vault.transports.refusals import Refused

__all__ = [
    "MEDIA_TYPE",
    "PROBLEM_RESPONSES",
    "TYPE_PREFIX",
    "invalid",
    "problem",
    "problem_body",
    "unrouted",
]

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "tag:toolkit-vault.dev,2026:problem:"

# the kind of problem each status is; a status not here is `about:blank` (its phrase alone)
_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    408: "request_timeout",
    409: "conflict",
    413: "too_large",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
}


def problem_body(
    status: int, detail: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The problem details object of a refusal with `status` and the sentence `detail`."""
    code = _CODES.get(status)
    return {
        "type": TYPE_PREFIX + code if code else "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code or "http_" + str(status),
        "details": details or [],
    }


def _answer(
    status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


async def problem(_request: Request, exc: Refused) -> JSONResponse:
    """A refusal on a route FastAPI serves: problem details, `Retry-After` on a 429."""
    headers = {"Retry-After": "1"} if exc.status == 429 else None
    return _answer(exc.status, problem_body(exc.status, exc.message, exc.details), headers)


async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """Invalid parameters, by locations and kinds only: FastAPI's default body would echo
    the submitted input."""
    details = [
        {"pointer": "/" + "/".join(str(p) for p in err.get("loc", ())), "keyword": err.get("type")}
        for err in exc.errors()
    ]
    return _answer(422, problem_body(422, "request parameters are invalid", details))


_SCHEMA = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri", "description": "the kind of problem"},
        "title": {"type": "string", "description": "the HTTP status phrase"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "why; never a submitted value"},
        "code": {"type": "string", "description": "the end of `type`, as a short name"},
        "details": {"type": "array", "items": {"type": "object"}},
    },
}

# every refusal a `/v1` route can give, for the OpenAPI document (`responses=` of a router)
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {
        "description": f"{HTTPStatus(status).phrase} (RFC 9457 problem details)",
        "content": {MEDIA_TYPE: {"schema": _SCHEMA}},
    }
    for status in (401, 403, 404, 409, 422, 429, 503)
}


async def unrouted(_request: Request, exc: HTTPException) -> Response:
    """Starlette's own refusals (no such route, a method the route does not take) as
    problem details, with their headers (`Allow` on a 405)."""
    if exc.status_code < 400:
        return Response(status_code=exc.status_code, headers=exc.headers)
    return _answer(exc.status_code, problem_body(exc.status_code, str(exc.detail)), exc.headers)
