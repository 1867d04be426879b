"""Builders shared by the WAL tests (unit and fault): records, configs, counting/faulty OS calls."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from danube_broker.wal import DiskOps, Durability, LogEntry, TopicLog, WalConfig
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.wal.segment import HEADER_BYTES, parse_name


def message(producer: str, seq: int, payload: bytes = b"x") -> bytes:
    """An encoded StreamMessage, as the broker stores it."""
    return pb.StreamMessage(producer_name=producer, sequence_id=seq, payload=payload).SerializeToString()


def records(n: int, *, start: int = 0, size: int = 8) -> list[bytes]:
    return [f"r{i}-".encode() + b"x" * size for i in range(start, start + n)]


def cfg(**overrides: object) -> WalConfig:
    return WalConfig.model_validate(overrides)


async def append_all(
    log: TopicLog, recs: Sequence[bytes], *, batch: int = 1, t0: int = 1000
) -> list[LogEntry]:
    """Append ``recs`` in sequential batches; returns the entries as the log should hold them."""
    out: list[LogEntry] = []
    for i in range(0, len(recs), batch):
        chunk = list(recs[i : i + batch])
        pts = [t0 + i + k for k in range(len(chunk))]
        first = await log.append(chunk, pts)
        out += [LogEntry(first + k, pts[k], r) for k, r in enumerate(chunk)]
    return out


async def read_all(log: TopicLog, start: int = 0) -> list[LogEntry]:
    out: list[LogEntry] = []
    offset = start
    while True:
        got = await log.read_async(offset, 1000)
        if not got:
            return out
        out += got
        offset = got[-1].offset + 1


def cut_to_headers(data_dir: Path, pattern: str) -> int:
    """A power loss that took every frame not flushed, when none was: cut every segment file
    matching ``pattern`` under ``data_dir`` back to its header. Returns the files cut."""
    cut = 0
    for seg in data_dir.glob(pattern):
        if seg.stat().st_size > HEADER_BYTES:
            os.truncate(seg, HEADER_BYTES)
            cut += 1
    return cut


def segment_files(directory: Path, kind: str = "wal") -> list[Path]:
    found = [(p[0], e) for e in directory.iterdir() if (p := parse_name(e.name)) and p[1] == kind]
    return [e for _, e in sorted(found)]


def files_bytes(directory: Path, *, below: int) -> int:
    """Bytes of the segment and index files of segments starting below offset ``below``."""
    return sum(e.stat().st_size for e in directory.iterdir() if (p := parse_name(e.name)) and p[0] < below)


class Ops:
    """OS calls with counters and switchable faults, for DiskOps.

    - ``write_error`` / ``fsync_error`` / ``truncate_error``: an errno to raise (None: work).
    - ``partial``: a failing write first writes half its bytes (as a full disk does).
    - ``gate``: when set, writes block until it is set again from the test (a commit in flight).
    - ``clock_ms``: the WAL's wall clock.
    """

    def __init__(self) -> None:
        self.writes = 0
        self.fsyncs = 0
        self.write_error: int | None = None
        self.fsync_error: int | None = None
        self.truncate_error: int | None = None
        #: fsync call numbers (1-based, counting every call so far) that fail with EIO.
        self.fail_fsync_numbers: set[int] = set()
        self.partial = True
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.clock_ms = 1_700_000_000_000
        #: The threads (idents) the writes and fsyncs ran on, in call order.
        self.write_threads: list[int] = []
        self.fsync_threads: list[int] = []

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        self.writes += 1
        self.write_threads.append(threading.get_ident())
        if self.gate is not None:
            self.entered.set()
            self.gate.wait(10)
        if self.write_error is not None:
            if self.partial and len(data) > 1:
                os.pwrite(fd, bytes(data[: len(data) // 2]), pos)
            raise OSError(self.write_error, os.strerror(self.write_error))
        return os.pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        self.fsync_threads.append(threading.get_ident())
        if self.fsyncs in self.fail_fsync_numbers:
            raise OSError(errno.EIO, "injected fsync failure")
        if self.fsync_error is not None:
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        if self.truncate_error is not None:
            raise OSError(self.truncate_error, os.strerror(self.truncate_error))
        os.ftruncate(fd, length)

    def now_ms(self) -> int:
        return self.clock_ms

    def disk_ops(self) -> DiskOps:
        return DiskOps(pwrite=self.pwrite, fsync=self.fsync, ftruncate=self.ftruncate, now_ms=self.now_ms)


ENOSPC = errno.ENOSPC
EIO = errno.EIO

__all__ = [
    "EIO",
    "ENOSPC",
    "Durability",
    "Ops",
    "append_all",
    "cfg",
    "files_bytes",
    "message",
    "read_all",
    "records",
    "segment_files",
]
