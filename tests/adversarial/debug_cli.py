"""`toolkit-vault` with every logger at DEBUG and SQL echo on, for the leak tests.

The command line itself logs at WARNING; this runs the very same `main` after routing every
log record, SQLAlchemy's statements with their parameters and result rows included, to
stderr, so a leak test can read everything the process could ever have logged.

`serve` installs its own handler (JSON lines on stderr, INFO, the redaction filter): here it
keeps that handler and format, at DEBUG, with the redaction filter passing everything
through (it is the second line of defence; the leak tests check the first). The one logger
kept at INFO is uvicorn's: at DEBUG it traces every WebSocket handshake header and frame,
which hold whatever the client sent (bearer token, config) by definition, and `serve`
offers no way to turn it on. The HTTP client loggers stay where `serve` and `stdio` hold
them (`logs.hold_library_loggers`, WARNING): they are part of what is tested.

Under the test session's log copy (`TOOLKIT_VAULT_LOG_COPY`) these processes write their
unredacted records there too: the leak tests assert no canary reaches them, so the
suite's scan agrees with those tests and needs no directory of its own for them.
"""

from __future__ import annotations

import logging
import sys

from toolkit_vault import logs
from toolkit_vault.cli import main, serving

_configure_logging = logs.configure_logging


def _debug_logging(level: str = "INFO", json_lines: bool = True) -> None:
    _configure_logging("DEBUG", json_lines)
    logging.getLogger("uvicorn").setLevel(logging.INFO)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    for name in ("sqlalchemy.engine", "sqlalchemy.pool"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    serving.configure_logging = _debug_logging
    logs.redact = lambda text: text
    main()
