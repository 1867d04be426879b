"""The tail cache: the most recent durable records of a topic, in memory, oldest evicted first.

It holds the records (the very bytes objects appended) and their publish times in two lists,
with a prefix sum of record bytes next to them: a read is a slice plus a bisect, eviction just
moves a head index, and the lists are compacted once the evicted head is at least half of them
(amortised O(1) per record).

LogEntry objects are built when read, not when appended: a cache of long-lived small objects
would cost every garbage collection a walk over all of them (measured: appends 2x slower with
a full cache). The entries of the most recent read window (at most 2,048) are kept, so
subscriptions reading the same tail (fan-out) share one set of objects instead of building
their own.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from danube_broker.wal.model import LogEntry

#: Estimated bytes of memory per cached record besides its payload (the bytes object's header,
#: list slots, the publish time); counted against the cap.
ENTRY_OVERHEAD_BYTES = 64
_COMPACT_MIN = 4096
#: Most entries kept built for fan-out reads. The collector walks every one of them (they are
#: objects it tracks): at 16,384 per topic, 16 busy partitions kept 262,144, and one collection
#: walking them and the rest took 0.38 s (w2's p99.9: 466-530 ms; with 2,048, no such pause).
_WINDOW_MAX = 2048


class CacheBudget:
    """A cap on the bytes many tail caches hold together (a broker's: every topic's cache is
    also capped on its own). Over it, the largest caches give back their oldest records first,
    down to 90% of the cap (so trims are rare and amortised)."""

    def __init__(self, total_bytes: int) -> None:
        if total_bytes <= 0:
            raise ValueError("a cache budget must be positive")
        self.total_bytes = total_bytes
        self.used = 0
        #: Times the caches were trimmed to the budget.
        self.trims = 0
        self._held: dict[TailCache, int] = {}
        self._trimming = False

    def update(self, cache: TailCache, held: int) -> None:
        """``cache`` now holds ``held`` bytes (0: none, or it is gone)."""
        old = self._held.pop(cache, 0)
        if held:
            self._held[cache] = held
        self.used += held - old
        if self.used > self.total_bytes and not self._trimming:
            self._trim()

    def _trim(self) -> None:
        self._trimming = True
        self.trims += 1
        target = self.total_bytes * 9 // 10
        try:
            for cache in sorted(self._held, key=self._held.__getitem__, reverse=True):
                if self.used <= target:
                    break
                cache.shrink_to(max(0, self._held[cache] - (self.used - target)))
        finally:
            self._trimming = False


class TailCache:
    def __init__(self, cap_bytes: int, start_offset: int, budget: CacheBudget | None = None) -> None:
        self.cap_bytes = cap_bytes
        self._budget = budget
        self._recs: list[bytes] = []
        self._pts: list[int] = []
        # _cum[i] = record bytes of _recs[:i]; len(_cum) == len(_recs) + 1.
        self._cum: list[int] = [0]
        self._base = start_offset  # offset of _recs[0]
        self._head = 0  # index of the oldest live record
        self._win: list[LogEntry] = []  # built entries of offsets [_win_start, _win_start + len)
        self._win_start = start_offset

    @property
    def start_offset(self) -> int:
        """Oldest offset held (== end_offset when empty)."""
        return self._base + self._head

    @property
    def end_offset(self) -> int:
        """One past the newest offset held."""
        return self._base + len(self._recs)

    def __len__(self) -> int:
        return len(self._recs) - self._head

    @property
    def record_bytes(self) -> int:
        return self._cum[-1] - self._cum[self._head]

    @property
    def held(self) -> int:
        """Bytes counted against the caps: the records plus ENTRY_OVERHEAD_BYTES each."""
        return self.record_bytes + ENTRY_OVERHEAD_BYTES * len(self)

    def _account(self) -> None:
        if self._budget is not None:
            self._budget.update(self, self.held)

    def release(self) -> None:
        """Forget everything and leave the budget (the log is closed)."""
        self.reset(self.end_offset)
        self._budget = None

    def shrink_to(self, held_bytes: int) -> None:
        """Evict the oldest records until at most ``held_bytes`` are held (the budget's trim)."""
        self._evict(held_bytes)
        self._account()

    def reset(self, start_offset: int) -> None:
        self._recs = []
        self._pts = []
        self._cum = [0]
        self._base = start_offset
        self._head = 0
        self._win = []
        self._win_start = start_offset
        self._account()

    def extend(
        self, first_offset: int, records: Sequence[bytes], pts: Sequence[int], sizes: Sequence[int]
    ) -> None:
        """Add records at consecutive offsets from ``first_offset`` (``sizes`` = their lengths)."""
        if self.cap_bytes == 0:
            self.reset(first_offset + len(records))
            return
        if first_offset != self.end_offset:
            self.reset(first_offset)
        self._recs.extend(records)
        self._pts.extend(pts)
        cum = self._cum
        cum.extend(accumulate(sizes, initial=cum[-1]))
        del cum[len(cum) - len(sizes) - 1]  # accumulate repeats the initial value
        self._evict(self.cap_bytes)
        self._account()

    def _evict(self, cap: int) -> None:
        n = len(self._recs)
        cum, head = self._cum, self._head
        if cum[n] - cum[head] + ENTRY_OVERHEAD_BYTES * (n - head) <= cap:
            return
        # Smallest head h with bytes(h..n) <= cap; the cost falls as h grows.
        lo, hi = head + 1, n
        while lo < hi:
            mid = (lo + hi) // 2
            if cum[n] - cum[mid] + ENTRY_OVERHEAD_BYTES * (n - mid) <= cap:
                hi = mid
            else:
                lo = mid + 1
        if lo == n:  # nothing left: free the records now, not at a later compaction
            self.reset(self._base + n)
            return
        self._head = lo
        self._compact()

    def _compact(self) -> None:
        head = self._head
        if head >= _COMPACT_MIN and head * 2 >= len(self._recs):
            del self._recs[:head]
            del self._pts[:head]
            del self._cum[:head]
            self._base += head
            self._head = 0

    def drop_before(self, offset: int) -> None:
        """Forget records below ``offset`` (retention moved the log's first offset)."""
        if offset <= self.start_offset:
            return
        if offset >= self.end_offset:
            self.reset(self.end_offset)
            return
        self._head = offset - self._base
        self._compact()
        self._account()

    def read(self, from_offset: int, max_entries: int, max_bytes: int) -> list[LogEntry] | None:
        """Entries from ``from_offset``: at most ``max_entries``, and at most ``max_bytes`` of
        records (but always at least one). None when ``from_offset`` is older than the cache; []
        when there is nothing at or after it."""
        if from_offset < self.start_offset:
            return None
        if from_offset >= self.end_offset or max_entries <= 0:
            return []
        base = self._base
        i = from_offset - base
        j = min(i + max_entries, len(self._recs))
        cum = self._cum
        k = max(bisect_right(cum, cum[i] + max_bytes, i + 1, j + 1) - 1, i + 1)
        end = base + k
        w0 = self._win_start
        w1 = w0 + len(self._win)
        if not (w0 <= from_offset <= w1):
            built = list(map(LogEntry, range(from_offset, end), self._pts[i:k], self._recs[i:k]))
            self._win, self._win_start = built, from_offset
            return built[:]
        if end > w1:
            m = w1 - base
            self._win.extend(map(LogEntry, range(w1, end), self._pts[m:k], self._recs[m:k]))
        out = self._win[from_offset - w0 : end - w0]
        excess = len(self._win) - _WINDOW_MAX
        if excess > 0:
            excess = min(excess, from_offset - w0)
            del self._win[:excess]
            self._win_start += excess
        return out
