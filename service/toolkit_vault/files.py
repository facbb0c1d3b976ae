"""Files the vault writes whole (the home's record, a key file, a backup): a reader sees the
old bytes or the new ones, never a mix, and once the write returns the new ones survive a
crash.

The witness file is not written here: it is rewritten in place under a lock, on purpose
(`store.witness`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_writer", "write_atomically"]


@contextmanager
def atomic_writer(path: Path, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A handle to write `path`'s new bytes into, streamed: a fresh temporary file beside it
    (random name, `mode` before any byte is written); on a clean exit it is flushed and
    fsynced, renamed over `path`, and the directory fsynced so the rename itself is durable.
    Raises `OSError`; a failed write leaves `path` as it was and no temporary file behind
    (a killed process leaves only the temporary, a dot file)."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            yield handle
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


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` (`atomic_writer`, all at once)."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)
