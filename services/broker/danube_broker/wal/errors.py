"""Errors of the WAL: the classes live in the one catalogue (danube_common.errors); this module
maps OS errors onto them."""

from __future__ import annotations

import errno

from danube_common.errors import DiskFull, LogClosed, StorageError, StorageFailed

__all__ = ["DiskFull", "LogClosed", "StorageError", "StorageFailed", "storage_error"]

_FULL = {errno.ENOSPC, errno.EDQUOT}


def storage_error(exc: OSError, what: str) -> StorageError:
    """The WAL error for an OS error raised while doing ``what``."""
    reason = exc.strerror or str(exc)
    if exc.errno in _FULL:
        return DiskFull(f"{what}: disk full ({reason})")
    return StorageFailed(f"{what}: {reason}")
