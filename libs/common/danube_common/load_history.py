"""Load history: broker load reports kept in object storage, for the planner to look back over.

Object stores cannot append, so a writer batches a few reports and writes one object per flush,
as JSON lines (one ``LoadReport.to_json()`` per line, the same shape as ``/{cluster}/load/{id}``),
partitioned by the UTC hour of the reports it holds::

    load-history/date=2025-01-31/hour=07/{broker_id}-{at_ms}.jsonl

``at_ms`` is the time of the first report in the object; one object never spans two hours (a
batch that crosses an hour is split), so listing the hour partitions that overlap a window finds
every report of that window. Keys are deterministic: re-writing a batch after a failed attempt
replaces the same object, so a retried flush never duplicates reports.

- :class:`LoadHistoryWriter` buffers ``add(report)`` (sync, never blocks) and writes a batch when
  ``max_batch`` reports of one broker are waiting, every ``flush_interval_s`` (once
  :meth:`~LoadHistoryWriter.start` ed), on :meth:`~LoadHistoryWriter.flush`, and at
  :meth:`~LoadHistoryWriter.aclose`. The buffer is bounded (``max_pending``): when the store is
  down long enough to fill it, the oldest reports are dropped (counted in ``dropped``).
- :class:`LoadHistoryReader` lists the objects of a window ``[from_ms, to_ms)``, reads them back
  (as :class:`LoadReport` or as raw JSON lines) and prunes whole hour partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from danube_common.aio import cancel_and_wait
from danube_common.load import LoadReport
from danube_common.objstore.base import ObjectStore
from danube_common.objstore.errors import ObjectNotFound, ObjectStoreError

log = logging.getLogger(__name__)

#: Root of every load history object in the store.
HISTORY_ROOT = "load-history/"
HOUR_MS = 3_600_000
_NAME = re.compile(r"^(?P<broker>.+)-(?P<at>[0-9]+)\.jsonl$")
_PARTITION = re.compile(r"^date=(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})/hour=(?P<hour>[0-9]{2})$")


# ---------------------------------------------------------------- keys (pure)
def hour_start_ms(at_ms: int) -> int:
    """The start of the UTC hour holding ``at_ms``."""
    return at_ms - at_ms % HOUR_MS


def partition_prefix(at_ms: int) -> str:
    """``load-history/date=YYYY-MM-DD/hour=HH/`` of the UTC hour holding ``at_ms``."""
    t = datetime.fromtimestamp(hour_start_ms(at_ms) / 1000, tz=UTC)
    return f"{HISTORY_ROOT}date={t:%Y-%m-%d}/hour={t:%H}/"


def object_key(broker_id: str, at_ms: int) -> str:
    """The key of a batch of ``broker_id``'s reports whose first report was taken at ``at_ms``."""
    if not broker_id or "/" in broker_id:
        raise ValueError(f"invalid broker id {broker_id!r} for a load history key: no '/' and not empty")
    return f"{partition_prefix(at_ms)}{broker_id}-{at_ms}.jsonl"


@dataclass(frozen=True, slots=True)
class HistoryObject:
    """What a load history key says: partition hour, broker and first report time."""

    key: str
    hour_ms: int
    broker_id: str
    at_ms: int


def parse_key(key: str) -> HistoryObject | None:
    """A load history key -> its parts; None for any other key."""
    if not key.startswith(HISTORY_ROOT):
        return None
    rest = key[len(HISTORY_ROOT) :]
    partition, _, name = rest.rpartition("/")
    pm, nm = _PARTITION.match(partition), _NAME.match(name)
    if pm is None or nm is None:
        return None
    try:
        start = datetime.strptime(f"{pm['date']} {pm['hour']}", "%Y-%m-%d %H").replace(tzinfo=UTC)
    except ValueError:
        return None
    return HistoryObject(key, int(start.timestamp() * 1000), nm["broker"], int(nm["at"]))


def hours_between(from_ms: int, to_ms: int) -> list[int]:
    """Start of every UTC hour overlapping ``[from_ms, to_ms)``, oldest first."""
    if to_ms <= from_ms:
        return []
    return list(range(hour_start_ms(from_ms), to_ms, HOUR_MS))


def encode_batch(reports: Iterable[LoadReport]) -> bytes:
    """JSON lines, one report per line."""
    return b"".join(
        json.dumps(r.to_json(), separators=(",", ":"), sort_keys=True).encode() + b"\n" for r in reports
    )


def decode_lines(data: bytes) -> list[str]:
    """The non-empty lines of an object (a torn last line cannot happen: writes are atomic)."""
    return [line for line in data.decode("utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------- writer
class LoadHistoryWriter:
    """Batches broker load reports into load history objects (see the module docstring).

    Owns one flusher task once :meth:`start` ed; :meth:`aclose` stops it after a last flush.
    A failed write keeps its batch for the next flush (the error is logged, not raised, from the
    background task; :meth:`flush` raises it to a caller that wants to know).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        flush_interval_s: float = 60.0,
        max_batch: int = 12,
        max_pending: int = 10_000,
    ) -> None:
        if flush_interval_s <= 0 or max_batch < 1 or max_pending < max_batch:
            raise ValueError(
                "LoadHistoryWriter needs flush_interval_s > 0, max_batch >= 1 and max_pending >= max_batch, "
                f"got {flush_interval_s}, {max_batch}, {max_pending}"
            )
        self._store = store
        self.flush_interval_s = flush_interval_s
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._pending: deque[LoadReport] = deque()
        #: Reports waiting per broker (to wake the flusher when one has a full batch).
        self._counts: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: Reports dropped because the buffer was full (the store was failing).
        self.dropped = 0
        #: Objects written so far.
        self.objects_written = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> LoadHistoryWriter:
        """Start the periodic flusher (needs a running event loop)."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="load-history-writer")
        return self

    def add(self, report: LoadReport) -> None:
        """Queue one report; never blocks. A full buffer drops its oldest report."""
        if self._closed:
            raise RuntimeError("the load history writer is closed")
        if len(self._pending) >= self.max_pending:
            self._forget(self._pending.popleft())
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "load history buffer full (%d reports): dropped %d oldest so far; is the object store up?",
                    self.max_pending,
                    self.dropped,
                )
        self._pending.append(report)
        self._counts[report.broker_id] = n = self._counts.get(report.broker_id, 0) + 1
        if n >= self.max_batch:
            self._wake.set()

    def _forget(self, report: LoadReport) -> None:
        n = self._counts.get(report.broker_id, 0) - 1
        if n > 0:
            self._counts[report.broker_id] = n
        else:
            self._counts.pop(report.broker_id, None)

    async def flush(self) -> int:
        """Write everything buffered now; return how many objects were written.

        On a store error the unwritten reports go back to the buffer (ahead of newer ones) and
        the error is raised.
        """
        async with self._lock:
            taken = list(self._pending)
            self._pending.clear()
            self._counts.clear()
            batches = _batches(taken, self.max_batch)
            written = 0
            for i, (key, reports) in enumerate(batches):
                try:
                    await self._store.put(key, encode_batch(reports))
                except ObjectStoreError:
                    rest = [r for _, batch in batches[i:] for r in batch]
                    self._pending.extendleft(reversed(rest))
                    while len(self._pending) > self.max_pending:
                        self._pending.popleft()
                        self.dropped += 1
                    self._counts.clear()
                    for r in self._pending:
                        self._counts[r.broker_id] = self._counts.get(r.broker_id, 0) + 1
                    raise
                written += 1
                self.objects_written += 1
            return written

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.flush_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_at - loop.time())):
                    await self._wake.wait()
            self._wake.clear()
            if loop.time() >= next_at:
                next_at = loop.time() + self.flush_interval_s
            try:
                await self.flush()
            except ObjectStoreError as exc:
                log.warning(
                    "load history flush failed (%s); %d reports kept for the next try", exc, self.pending
                )

    async def aclose(self) -> None:
        """Stop the flusher and write what is buffered (a failure is logged, not raised)."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        err = await cancel_and_wait(task)
        if err is not None:
            log.warning("load history: the flusher had failed (%r); writing what is buffered", err)
        try:
            await self.flush()
        except ObjectStoreError as exc:
            log.warning("load history: last flush failed (%s); %d reports lost", exc, self.pending)


def _batches(reports: Sequence[LoadReport], max_batch: int) -> list[tuple[str, list[LoadReport]]]:
    """Group by broker and UTC hour (in report time order), then cut into ``max_batch`` chunks."""
    groups: dict[tuple[str, int], list[LoadReport]] = {}
    for r in sorted(reports, key=lambda r: (r.broker_id, r.at_ms)):
        groups.setdefault((r.broker_id, hour_start_ms(r.at_ms)), []).append(r)
    out: list[tuple[str, list[LoadReport]]] = []
    for (broker_id, _), group in sorted(groups.items()):
        for i in range(0, len(group), max_batch):
            chunk = group[i : i + max_batch]
            out.append((object_key(broker_id, chunk[0].at_ms), chunk))
    return out


# ---------------------------------------------------------------- reader
class LoadHistoryReader:
    """Lists, reads and prunes load history objects."""

    def __init__(self, store: ObjectStore, *, read_concurrency: int = 16) -> None:
        if read_concurrency < 1:
            raise ValueError(f"read_concurrency must be >= 1, got {read_concurrency}")
        self._store = store
        self._sem = asyncio.Semaphore(read_concurrency)

    async def list_window(self, from_ms: int, to_ms: int) -> list[str]:
        """Keys of the objects that may hold reports taken in ``[from_ms, to_ms)``, in key order.

        An object's first report time is in its name, so objects starting at or after ``to_ms``
        are left out; one starting before ``from_ms`` in an overlapping hour may still hold later
        reports and is kept (the reading side filters reports by ``at_ms``).
        """
        keys: list[str] = []
        for hour in hours_between(from_ms, to_ms):
            for info in await self._store.list(partition_prefix(hour)):
                parsed = parse_key(info.key)
                if parsed is not None and parsed.at_ms < to_ms:
                    keys.append(info.key)
        return keys

    async def read_lines(self, key: str) -> list[str]:
        """The JSON lines of one object ([] if it was pruned meanwhile)."""
        async with self._sem:
            try:
                data = await self._store.get(key)
            except ObjectNotFound:
                return []
        return decode_lines(data)

    async def read(self, key: str) -> list[LoadReport]:
        """The reports of one object."""
        return [LoadReport.from_json(json.loads(line)) for line in await self.read_lines(key)]

    async def read_window_lines(self, from_ms: int, to_ms: int) -> tuple[list[str], list[str]]:
        """``(keys, lines)``: every JSON line of the window's objects (not yet filtered by time)."""
        keys = await self.list_window(from_ms, to_ms)
        chunks = await asyncio.gather(*(self.read_lines(k) for k in keys))
        return keys, [line for chunk in chunks for line in chunk]

    async def read_window(self, from_ms: int, to_ms: int) -> list[LoadReport]:
        """Every report taken in ``[from_ms, to_ms)``, ordered by (at_ms, broker_id)."""
        _, lines = await self.read_window_lines(from_ms, to_ms)
        reports = [LoadReport.from_json(json.loads(line)) for line in lines]
        inside = [r for r in reports if from_ms <= r.at_ms < to_ms]
        return sorted(inside, key=lambda r: (r.at_ms, r.broker_id))

    async def prune(self, older_than_ms: int, *, page: int = 1000) -> int:
        """Delete every hour partition that ends at or before ``older_than_ms``; return how many
        objects were deleted. Keys sort by date and hour, so listing stops at the first partition
        that is kept."""
        deleted = 0
        start_after: str | None = None
        while True:
            infos = await self._store.list(HISTORY_ROOT, start_after=start_after, limit=page)
            if not infos:
                return deleted
            for info in infos:
                parsed = parse_key(info.key)
                if parsed is None:
                    continue  # not ours: leave it
                if parsed.hour_ms + HOUR_MS > older_than_ms:
                    return deleted
                await self._store.delete(info.key)
                deleted += 1
            start_after = infos[-1].key
