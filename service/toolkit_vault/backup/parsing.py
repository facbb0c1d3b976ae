"""`backup verify`'s lines read, hashed, parsed and decoded in a child process, while this
one inserts the rows it hands back into the scratch database (issue 53).

The load was one core's work: parsing a line and inserting its row took about as long as
each other, and the second core waited for the keys, which only the loaded rows give. The
child (`serve`, started with the interpreter that runs this, never forked from it) is
handed the backup's open file (its descriptor, which it opens again on a description of
its own). While it starts, this process parses the first lines itself; then it tells the
child where it stopped (after a whole line) and the SHA-256 of the bytes before that. The
child hashes those bytes again from the file (refusing it when they differ: the file
changed), then runs the same reading this process would on the lines after them
(`archive.Reader.rows`, `in_process`: every line hashed, parsed and decoded, every refusal
in the same words), and sends back batches of decoded rows, then the trailer, its row
counts and the whole digest (marshalled: plain values, a third of pickle's cost), which
`Reader.check` then holds to the MAC as before. Nothing of the file is believed before
that check, wherever it was parsed; the child holds no key.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import stat
import struct
import sys
from collections.abc import Generator, Iterator
from typing import IO, Any

from toolkit_vault.backup.archive import BackupError, Reader, decode_row
from toolkit_vault.children import end_child, python_child, spare_cores, widen_pipe
from toolkit_vault.store.snapshots import TABLES

__all__ = ["PARALLEL_BYTES", "decoded_rows", "in_process", "serve"]

PARALLEL_BYTES = 8 << 20  # a smaller file is parsed in this process (a child takes time to start)
BATCH = 500  # rows a message
_PIPE_BYTES = 1 << 20  # a few batches ahead: the child seldom waits for this process
READY, ROWS, END, REFUSED = "ready", "rows", "end", "refused"
HERE_BETWEEN_ASKS = 200  # rows this process parses between asking whether the child is up
# the child's program: `python -m` this module would run it twice (the package imports it)
_SERVE = "import sys; from toolkit_vault.backup.parsing import serve; serve(int(sys.argv[1]))"
_SIZE = struct.Struct(">I")  # a message's length, before it (`marshal`: plain values, fast)


def decoded_rows(reader: Reader) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The backup's rows, (table name, values as `TABLES` orders the columns), as `reader`
    reads them, parsed by a child when the file is large and a core is spare (this process
    parses the first ones while the child starts); either way `reader`'s trailer, counts
    and digest are set once the last row is given."""
    fd = _file_of(reader)
    if fd is None:
        yield from in_process(reader)
        return
    child = python_child("-c", _SERVE, str(fd), pass_fds=(fd,))
    assert child.stdin is not None and child.stdout is not None
    widen_pipe(child.stdout.fileno(), _PIPE_BYTES)
    try:
        here = in_process(reader)
        for count, found in enumerate(here, 1):
            yield found
            if count % HERE_BETWEEN_ASKS == 0 and _ready(child.stdout):
                break
        else:
            return  # every row read here, the trailer too: the child is not needed
        here.close()  # after a whole line: the child reads on from the next
        if _receive(child.stdout)[0] != READY:
            raise BackupError("the backup's reader ended early")
        counts, hashed = dict(reader.counts), reader.digest.copy().digest()
        with contextlib.suppress(BrokenPipeError):  # then it ended: said below
            child.stdin.write(marshal.dumps((reader.handle.tell(), hashed)))
            child.stdin.close()
        while True:
            kind, *found = _receive(child.stdout)
            if kind == ROWS:
                name, rows = found
                for row in rows:
                    yield name, row
            elif kind == END:
                trailer, theirs, digest = found
                for name, number in theirs.items():
                    counts[name] = counts.get(name, 0) + number
                reader.finished(trailer, counts, digest)
                return
            else:
                raise BackupError(str(found[0]))
    finally:
        end_child(child)


def _ready(stream: IO[bytes]) -> bool:
    """Whether the child said something (nothing of it is read before: no buffer holds it)."""
    return bool(select.select([stream], [], [], 0)[0])


def _receive(stream: IO[bytes]) -> Any:
    """One message of the child: its length in 4 bytes, then its marshalled value."""
    head = stream.read(_SIZE.size)
    data = stream.read(_SIZE.unpack(head)[0]) if len(head) == _SIZE.size else b""
    try:
        return marshal.loads(data)  # noqa: S302 (our own child's pipe: plain values only)
    except (EOFError, ValueError, TypeError):
        raise BackupError("the backup's reader ended early") from None


def _send(stream: IO[bytes], message: tuple[Any, ...]) -> None:
    data = marshal.dumps(message)
    stream.write(_SIZE.pack(len(data)) + data)


def in_process(reader: Reader) -> Generator[tuple[str, tuple[Any, ...]], None, None]:
    """The rows as `reader` reads them, here."""
    for name, values in reader.rows():
        if name not in TABLES:
            raise BackupError(f"this release has no table {name!r}")
        yield name, decode_row(name, values)


def _file_of(reader: Reader) -> int | None:
    """The descriptor of the regular file `reader` reads, when it is worth a child."""
    if spare_cores(1) < 1:
        return None
    try:
        fd = reader.handle.fileno()
        status = os.fstat(fd)
    except (AttributeError, OSError, ValueError):
        return None  # not a file (a test's BytesIO)
    if not stat.S_ISREG(status.st_mode) or status.st_size < PARALLEL_BYTES:
        return None
    if not os.path.exists(f"/proc/self/fd/{fd}"):
        return None  # the child opens the file again there (Linux)
    return fd


def serve(fd: int) -> None:
    """The child: says it is ready, is told where its parent stopped reading (an offset
    after a whole line) and the digest of the bytes before it, then reads the file at `fd`
    on a description of its own from its first byte, hashing those bytes again (refusing
    the file when they differ: it changed) and parsing the lines after them; the rows,
    then the end (or the refusal) on stdout."""
    out = sys.stdout.buffer
    _send(out, (READY,))
    out.flush()
    offset, hashed = marshal.loads(sys.stdin.buffer.read())  # noqa: S302 (its parent's pipe)
    with open(f"/proc/self/fd/{fd}", "rb") as handle:
        try:
            reader = Reader(handle)
            left = offset - len(reader.first)
            while left > 0 and (data := handle.read(min(left, 1 << 20))):
                reader.digest.update(data)
                left -= len(data)
            if reader.digest.copy().digest() != hashed:
                raise BackupError("the backup changed while it was being read")
            name: str | None = None
            rows: list[tuple[Any, ...]] = []
            for table, row in in_process(reader):
                if table != name or len(rows) >= BATCH:
                    if rows:
                        _send(out, (ROWS, name, rows))
                    name, rows = table, []
                rows.append(row)
            if rows:
                _send(out, (ROWS, name, rows))
            _send(out, (END, reader.trailer, reader.counts, reader.digest.digest()))
        except BackupError as exc:
            _send(out, (REFUSED, exc.message))
        except Exception:  # a line this reading did not foresee: refused, never shown
            _send(out, (REFUSED, "the backup holds a line that cannot be read"))
    out.flush()
