"""The commit journal: one file per broker that makes a commit round durable with ONE fdatasync.

With ``wal.commit_sync: journal`` a round writes each topic's frames to that topic's segment
file (page cache, no flush) and appends one *record* holding the same frames, tagged with where
they went, to the journal; the round is durable once the journal's fdatasync returns. The
segment files are flushed later, in bulk, by a *checkpoint* (one ``syncfs``, or one fdatasync
per file written since the previous checkpoint), after which the journal files it covers are
deleted. Until then a power loss may leave a segment shorter than what was acknowledged;
:func:`replay` puts the journaled frames back before anything reads the segments.

Layout: ``<data_dir>/.journal/`` (a name no namespace can have) holds ``journal.lock`` (flock:
held by the broker writing the journal for its whole life) and ``<seq:020d>.journal`` files, each
a header (``DNBJRN1\\n``, version) then records::

    body_len u32 | crc32c(body) u32 | body
    body = entries u32, then per entry:
           path_len u16 | segment header (32 bytes) | position u64 | data_len u32 | path | data

``path`` is the segment file relative to the data directory; the 32 bytes are the segment's own
header (first offset, creation time, checksum), so a record never lands in another file of the
same name (a topic deleted and created again, a directory set aside by a takeover). A record
that is torn or fails its checksum ends the file: it was never acknowledged (the round's
fdatasync had not returned).

Replay rules (all idempotent: replaying twice, or after a checkpoint, changes nothing):
- a segment file that is missing is skipped: retention deleted it, or the topic was deleted;
- a segment whose header differs is skipped: the name belongs to a newer file now;
- otherwise the entry's bytes are written at its position unless they are there already;
  later records (and later files) are applied after earlier ones, so they win.

The broker replays at start, holding the lock, before any topic log opens. Another process that
reads a broker's directory (the WAL uploader closing a dead broker's stint) calls
:func:`replay_unless_locked`: a free lock means the broker is gone and its journal must be
applied first; a held lock means a live broker process replayed it when it started (and since
then the page cache holds everything it wrote).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from danube_common.wal.segment import HEADER_BYTES

log = logging.getLogger(__name__)

DIR_NAME = ".journal"
LOCK_NAME = "journal.lock"
SUFFIX = ".journal"
MAGIC = b"DNBJRN1\n"
VERSION = 1

_FILE_HEADER = struct.Struct("<8sI")
FILE_HEADER_BYTES = _FILE_HEADER.size
_RECORD_HEAD = struct.Struct("<II")
_COUNT = struct.Struct("<I")
_ENTRY_HEAD = struct.Struct(f"<H{HEADER_BYTES}sQI")
#: A record bigger than this is taken as garbage (a round is capped far below it).
MAX_RECORD_BYTES = 1 << 30


def journal_dir(data_dir: Path) -> Path:
    return data_dir / DIR_NAME


def journal_name(seq: int) -> str:
    return f"{seq:020d}{SUFFIX}"


def file_header() -> bytes:
    return _FILE_HEADER.pack(MAGIC, VERSION)


@dataclass(frozen=True, slots=True)
class Entry:
    """Frames written at ``position`` of the segment ``path`` (relative to the data directory)
    whose header is ``segment_header``."""

    path: bytes
    segment_header: bytes
    position: int
    data: bytes


def encode_record(entries: Sequence[Entry]) -> bytes:
    parts: list[bytes] = [_COUNT.pack(len(entries))]
    for e in entries:
        if len(e.segment_header) != HEADER_BYTES:
            raise ValueError(f"a segment header is {HEADER_BYTES} bytes, got {len(e.segment_header)}")
        parts.append(_ENTRY_HEAD.pack(len(e.path), e.segment_header, e.position, len(e.data)))
        parts.append(e.path)
        parts.append(e.data)
    body = b"".join(parts)
    return _RECORD_HEAD.pack(len(body), google_crc32c.value(body)) + body


def read_records(buf: bytes, *, source: str = "journal") -> Iterator[list[Entry]]:
    """The intact records of one journal file's contents, in order; stops at the first torn or
    corrupt one (logged: what follows it was never acknowledged)."""
    if len(buf) < FILE_HEADER_BYTES:
        return
    magic, version = _FILE_HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version != VERSION:
        log.error("%s: not a commit journal (magic %r, version %d): ignored", source, magic, version)
        return
    pos = FILE_HEADER_BYTES
    while pos < len(buf):
        if pos + _RECORD_HEAD.size > len(buf):
            log.info("%s: torn record header at byte %d ignored (never acknowledged)", source, pos)
            return
        body_len, crc = _RECORD_HEAD.unpack_from(buf, pos)
        start = pos + _RECORD_HEAD.size
        body = buf[start : start + body_len]
        if body_len == 0 and crc == 0:
            return  # zeros: the end of what was written
        if body_len > MAX_RECORD_BYTES or len(body) < body_len or google_crc32c.value(body) != crc:
            log.info("%s: record at byte %d is torn or corrupt; ignored with what follows", source, pos)
            return
        yield _decode_body(body, source, pos)
        pos = start + body_len


def _decode_body(body: bytes, source: str, at: int) -> list[Entry]:
    (count,) = _COUNT.unpack_from(body, 0)
    pos = _COUNT.size
    out: list[Entry] = []
    for _ in range(count):
        path_len, header, position, data_len = _ENTRY_HEAD.unpack_from(body, pos)
        pos += _ENTRY_HEAD.size
        path = body[pos : pos + path_len]
        pos += path_len
        data = body[pos : pos + data_len]
        pos += data_len
        if len(data) != data_len:  # the checksum matched: only a writer bug gets here
            raise ValueError(f"{source}: record at byte {at} is malformed")
        out.append(Entry(path, header, position, data))
    return out


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    """The journal files of ``directory`` as (sequence, path), oldest first."""
    found: list[tuple[int, Path]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit():
            found.append((int(name[: -len(SUFFIX)]), directory / name))
    return sorted(found)


def lock(data_dir: Path) -> int:
    """Take the journal lock of ``data_dir`` (creating the directory); returns its fd. Raises
    BlockingIOError while another process holds it."""
    d = journal_dir(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(slots=True)
class ReplayReport:
    files: int = 0
    records: int = 0
    written: int = 0  # entries whose bytes were put back
    present: int = 0  # entries found in place already
    missing: int = 0  # entries of a deleted segment
    superseded: int = 0  # entries of a segment name now holding another segment

    def __str__(self) -> str:
        return (
            f"{self.files} journal file(s), {self.records} record(s): {self.written} entries written back, "
            f"{self.present} already in place, {self.missing} of deleted segments, "
            f"{self.superseded} of replaced segments"
        )


def replay(
    data_dir: Path,
    *,
    fsync: Callable[[int], None] = os.fdatasync,
    pwrite: Callable[[int, bytes | memoryview, int], int] = os.pwrite,
) -> ReplayReport:
    """Apply every journal file of ``data_dir`` to its segments, flush them, then delete the
    journal files (blocking; hold the lock). Raises OSError if a segment cannot be written or
    flushed: the journal is then kept for the next attempt."""
    d = journal_dir(data_dir)
    files = journal_files(d)
    report = ReplayReport(files=len(files))
    touched: dict[bytes, int] = {}  # path -> open fd
    headers: dict[bytes, bytes | None] = {}
    try:
        for _, path in files:
            with open(path, "rb") as f:
                buf = f.read()
            for entries in read_records(buf, source=str(path)):
                report.records += 1
                for e in entries:
                    _apply(data_dir, e, touched, headers, report, pwrite)
        for fd in touched.values():
            fsync(fd)
    finally:
        for fd in touched.values():
            os.close(fd)
    for _, path in files:
        path.unlink()
    if files:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fsync(dfd)
        finally:
            os.close(dfd)
        log.info("commit journal of %s replayed: %s", data_dir, report)
    return report


def _apply(
    data_dir: Path,
    e: Entry,
    touched: dict[bytes, int],
    headers: dict[bytes, bytes | None],
    report: ReplayReport,
    pwrite: Callable[[int, bytes | memoryview, int], int],
) -> None:
    if e.path not in headers:
        try:
            fd = os.open(data_dir / os.fsdecode(e.path), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            headers[e.path] = None
        else:
            touched[e.path] = fd
            headers[e.path] = os.pread(fd, HEADER_BYTES, 0)
    header = headers[e.path]
    if header is None:
        report.missing += 1
        return
    if header != e.segment_header:
        report.superseded += 1
        return
    fd = touched[e.path]
    if os.pread(fd, len(e.data), e.position) == e.data:
        report.present += 1
        return
    view = memoryview(e.data)
    done = 0
    while done < len(view):
        n = pwrite(fd, view[done:], e.position + done)
        if n <= 0:
            raise OSError(errno.EIO, f"short write replaying into {os.fsdecode(e.path)}")
        done += n
    report.written += 1


def replay_unless_locked(data_dir: Path) -> ReplayReport | None:
    """Replay ``data_dir``'s journal if no live process holds its lock (then the writer is gone);
    None when one does (it replayed when it started). No journal directory: nothing to do."""
    if not journal_dir(data_dir).is_dir():
        return None
    try:
        fd = lock(data_dir)
    except BlockingIOError:
        return None
    try:
        return replay(data_dir)
    finally:
        os.close(fd)
