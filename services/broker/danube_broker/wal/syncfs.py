"""One flush for a whole commit round: Linux ``syncfs(2)`` and when it can be trusted.

``syncfs(fd)`` writes back every dirty page of the file system holding ``fd`` and commits its
journal (with a cache flush), so after it returns everything written before the call is on the
disk: one call instead of one fdatasync per topic file. Two conditions make it as safe as the
per-file calls for the WAL:

- **Errors must reach the caller.** Before Linux 5.8 ``syncfs`` returned 0 even when write-back
  failed. Since 5.8 the file system keeps a write-back error sequence and ``syncfs`` reports an
  error that happened after the fd was opened (or after its last report): the commit group keeps
  one fd per file system open for its whole life, so every error after the group started is
  reported to exactly one round, which fails all its appends on that file system (the producers
  re-send them; nothing that was acknowledged depended on the failed flush).
- **The file system must keep that error sequence** and flush its own journal and the disk's
  cache on syncfs: the local disk file systems (ext4, xfs, btrfs; tmpfs holds nothing durable
  either way). A network or stacked file system (NFS, FUSE, overlayfs) may not: a directory on
  one is flushed per file (:func:`trusted_filesystem`, from ``/proc/self/mountinfo``).
- **Its cost is the whole file system's dirty data**, other programs' too. On a volume of its
  own (as the broker's WAL should be) that is the WAL's own writes.

:func:`resolve` turns the ``wal.commit_sync`` setting into the mode a broker actually uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import re
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

#: The first Linux release whose syncfs reports write-back errors (errseq on the super block).
MIN_KERNEL = (5, 8)
#: File systems whose syncfs flushes the data, the journal and the disk cache, and reports
#: write-back errors through the super block (Linux >= 5.8).
TRUSTED_FILESYSTEMS = frozenset({"ext4", "xfs", "btrfs", "tmpfs"})


class CommitSync(StrEnum):
    """How a shared commit round makes its topic files durable (``wal.commit_sync``)."""

    #: ``filesystem`` where the kernel reports syncfs errors (Linux >= 5.8), else ``files``.
    AUTO = "auto"
    #: One fdatasync per topic file, spread over ``commit_fsync_threads`` threads.
    FILES = "files"
    #: One syncfs per file system per round (the topic files written first).
    FILESYSTEM = "filesystem"
    #: One append + fdatasync of the broker's commit journal per round; the topic files are
    #: flushed in bulk by checkpoints (:mod:`danube_broker.wal.journal`).
    JOURNAL = "journal"


def _load_syncfs() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()


def syncfs(fd: int) -> None:
    """Flush the file system holding ``fd`` (blocking: call it in a worker thread; the GIL is
    released during the call). Raises OSError with the kernel's errno."""
    if _SYNCFS is None:
        raise OSError(38, "syncfs is not available on this system")  # ENOSYS
    if _SYNCFS(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}")


def filesystem_type(dev: int, mountinfo: str | None = None) -> str | None:
    """The type of the mounted file system with device number ``dev`` (an ``st_dev``), from
    ``/proc/self/mountinfo`` (or the text given); None when no mount has that device."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8") as f:
                mountinfo = f.read()
        except OSError:
            return None
    want = f"{os.major(dev)}:{os.minor(dev)}"
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == want and "-" in fields:
            rest = fields[fields.index("-") + 1 :]
            return rest[0] if rest else None
    return None


def trusted_filesystem(dev: int, mountinfo: str | None = None) -> bool:
    """May a commit round on the file system ``dev`` be flushed with one syncfs?"""
    kind = filesystem_type(dev, mountinfo)
    if kind in TRUSTED_FILESYSTEMS:
        return True
    log.info(
        "WAL on a %s file system (device %d:%d): its commit rounds are flushed per file, not by syncfs",
        kind or "unknown",
        os.major(dev),
        os.minor(dev),
    )
    return False


def kernel_reports_errors(release: str) -> bool:
    """Does a Linux kernel of this release (``uname -r``) report write-back errors to syncfs?"""
    m = re.match(r"(\d+)\.(\d+)", release)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= MIN_KERNEL


def resolve(mode: CommitSync, *, system: str | None = None, release: str | None = None) -> CommitSync:
    """The mode to run with: ``auto`` becomes ``filesystem`` on Linux >= 5.8 with a syncfs in
    libc, else ``files``; ``filesystem`` asked for where it cannot be trusted falls back to
    ``files`` with a warning (it would not report failed write-back); ``files`` and ``journal``
    are used as given."""
    mode = CommitSync(mode)
    if mode in (CommitSync.FILES, CommitSync.JOURNAL):
        return mode
    system = platform.system() if system is None else system
    release = platform.release() if release is None else release
    why = None
    if system != "Linux":
        why = f"syncfs is Linux-only (this is {system})"
    elif not kernel_reports_errors(release):
        why = f"Linux {release} does not report write-back errors to syncfs (needs >= 5.8)"
    elif _SYNCFS is None:
        why = "the C library has no syncfs"
    if why is None:
        return CommitSync.FILESYSTEM
    if mode is CommitSync.FILESYSTEM:
        log.warning("wal.commit_sync filesystem: %s; using one fdatasync per file instead", why)
    return CommitSync.FILES


def filesystem_flush(directory: Path) -> Callable[[int], None] | None:
    """:func:`syncfs` when it may flush everything written under ``directory`` at once (Linux
    >= 5.8 with a syncfs in libc, on a trusted file system); None: flush file by file. For the
    commit journal's checkpoints (``directory`` is created if missing)."""
    if platform.system() != "Linux" or not kernel_reports_errors(platform.release()) or _SYNCFS is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return syncfs if trusted_filesystem(os.stat(directory).st_dev) else None
