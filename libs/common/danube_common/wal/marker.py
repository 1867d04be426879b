"""The incarnation marker of a topic's WAL directory.

A reliable topic's directory holds a small file ``INCARNATION`` with the topic's incarnation (the
``create_revision`` of its metadata key in etcd). A topic deleted and created again under the
same name gets a new incarnation, so a broker or an uploader that finds a directory whose marker
differs from the topic's incarnation knows the data belongs to the deleted topic and must never
be served or uploaded as the new one's. Written atomically (temporary file, rename, fsync).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MARKER_NAME = "INCARNATION"


def read_incarnation(directory: Path) -> int | None:
    """The directory's incarnation (None: no marker, or an unreadable one)."""
    try:
        text = (Path(directory) / MARKER_NAME).read_text(encoding="ascii").strip()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def write_incarnation(directory: Path, incarnation: int) -> None:
    """Record ``incarnation`` in ``directory`` (blocking: call it from a thread)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / MARKER_NAME
    tmp = directory / f".{MARKER_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{incarnation}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            os.fsync(dfd)
    finally:
        os.close(dfd)
