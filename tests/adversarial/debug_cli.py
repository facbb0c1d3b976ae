"""`toolkit-vault` with every logger at DEBUG and SQL echo on, for the leak tests.

The command line itself logs at WARNING; this runs the very same `main` after routing every
log record, SQLAlchemy's statements with their parameters and result rows included, to
stderr, so a leak test can read everything the process could ever have logged.
"""

from __future__ import annotations

import logging
import sys

from toolkit_vault.cli import main

if __name__ == "__main__":
    logging.basicConfig(
        level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    for name in ("sqlalchemy.engine", "sqlalchemy.pool"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    main()
