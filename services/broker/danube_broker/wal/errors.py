"""Errors of the WAL: the classes live in the one catalogue (danube_common.errors); this module
maps OS errors onto them."""

from __future__ import annotations

import errno

from danube_common.errors import DataLoss, DiskFull, LogClosed, StorageError, StorageFailed

__all__ = ["DiskFull", "HistoryGap", "LogClosed", "StorageError", "StorageFailed", "storage_error"]


class HistoryGap(DataLoss):
    """An offset of a reliable topic is neither in object storage (no segment descriptor holds
    it) nor in the local log. Never skipped silently: the reader stalls at it, logs it (WARNING for a
    grace period, as after a takeover the previous owner's uploader may still be uploading it;
    then ERROR) and shows it in the subscription's stats until the offset becomes readable (an uploader that
    was behind catches up) or an operator acts (seek past it)."""

    code = "HISTORY_GAP"


_FULL = {errno.ENOSPC, errno.EDQUOT}


def storage_error(exc: OSError, what: str) -> StorageError:
    """The WAL error for an OS error raised while doing ``what``."""
    reason = exc.strerror or str(exc)
    if exc.errno in _FULL:
        return DiskFull(f"{what}: disk full ({reason})")
    return StorageFailed(f"{what}: {reason}")
