"""Files the vault writes whole (the home's record, a key file): a reader sees the old bytes
or the new ones, never a mix, and once the write returns the new ones survive a crash.

The witness file is not written here: it is rewritten in place under a lock, on purpose
(`store.witness`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data`: a fresh temporary file beside it (random name, `mode`
    before any byte is written), flushed and fsynced, renamed over `path`, and then the
    directory fsynced so the rename itself is durable. Raises `OSError`; a failed write
    leaves `path` as it was and no temporary file behind."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
