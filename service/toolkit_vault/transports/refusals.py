"""An HTTP refusal with an A2E `error` body, raised by any route and answered by the app."""

from __future__ import annotations

from typing import Any

from toolkit_vault.protocol import ErrorCode, ErrorMessage

__all__ = ["Refused", "error_body"]


class Refused(Exception):
    """An HTTP refusal with an A2E error body."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        req_id: str = "",
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.req_id = status, code, message, req_id
        self.details = details or []


def error_body(code: ErrorCode, message: str, req_id: str = "") -> dict[str, Any]:
    return ErrorMessage(req_id=req_id, code=code, message=message).model_dump(by_alias=True)
