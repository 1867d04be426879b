"""The broker's open-file limit: raised to the hard limit at start.

A reliable topic holds file descriptors while it is loaded: its WAL directory's lock, and its
active segment while it is written to (closed when idle: ``wal.idle_fd_close_s``, and beyond
``wal.max_open_segment_files`` open at once). So 10,000 topics need over 10,000 descriptors,
more than the usual soft limit (often 1,024). At start the broker raises its soft ``RLIMIT_NOFILE`` to the
hard limit (no privilege needed) and logs both, so an operator sees how many topics fit.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

log = logging.getLogger(__name__)

#: File descriptors an idle reliable topic holds (its WAL directory's lock).
FDS_PER_IDLE_TOPIC = 1

Limits = tuple[int, int]


def raised(soft: int, hard: int) -> int:
    """The soft limit to ask for: the hard one. An unlimited hard limit leaves the soft one as
    it is (the kernel refuses an unlimited open-file limit)."""
    if soft == resource.RLIM_INFINITY or hard == resource.RLIM_INFINITY:
        return soft
    return max(soft, hard)


def segment_files_budget(soft: int) -> int:
    """How many active segment files the WAL may keep open under the soft limit ``soft``: a
    quarter of it (the rest: one lock per topic, sockets, everything else); 0 (no bound) when
    the limit is unlimited."""
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 0
    return max(1, soft // 4)


def raise_fd_limit(
    get: Callable[[int], Limits] = resource.getrlimit,
    set_: Callable[[int, Limits], None] = resource.setrlimit,
) -> Limits:
    """Raise the soft open-file limit to the hard one; returns (soft, hard) in force after."""
    soft, hard = get(resource.RLIMIT_NOFILE)
    want = raised(soft, hard)
    if want != soft:
        try:
            set_(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, want, exc)
    log.info(
        "open-file limit %d (hard %d): room for about %d idle reliable topics",
        soft,
        hard,
        soft // FDS_PER_IDLE_TOPIC,
    )
    return soft, hard
