"""Load history read by the Spark executors: the driver lists the window's objects and hands out
their keys; each task opens the object store, fetches its keys (``LoadHistoryReader``, a few at
once), drops malformed lines and yields the rest as ``(line, current=False)`` rows, the rows the
driver used to build itself (:func:`danube_planner.frames.lines_frame`). The driver's work and
the tasks it ships no longer grow with the history: only the keys travel.

The functions the tasks run are module-level and take plain values, so they pickle by reference:
an executor imports this module, which means it runs a Python with the project installed
(``spark.python``). A task's object store is opened for reading only: a local directory is used
as it is (``LocalObjectStore`` without ``open``: no directory creation, no sweep of temporary
files, which belong to the writers), S3 through ``open_object_store`` (a bucket check). The
local directory must be the same path on every executor (a shared filesystem, or one machine):
the driver makes ``local_dir`` absolute before shipping the config.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from danube_common.load_history import LoadHistoryReader
from danube_common.objstore import LocalObjectStore, ObjectStore, ObjectStoreConfig, open_object_store
from danube_planner.model import split_report_lines

#: The rows both the driver (current reports) and the executors (history) produce.
LINES_SCHEMA = "line string, current boolean"


@dataclass(frozen=True, slots=True)
class HistorySource:
    """Where the executors read history from, and how."""

    store: ObjectStoreConfig
    #: Objects one task fetches at once.
    read_concurrency: int = 16
    #: Spark partitions of the keys; 0: the context's default parallelism.
    partitions: int = 0

    def for_executors(self) -> HistorySource:
        """A copy whose ``local_dir`` is absolute (an executor's working directory is not ours)."""
        if self.store.backend != "local":
            return self
        store = self.store.model_copy(update={"local_dir": os.path.abspath(self.store.local_dir)})
        return HistorySource(store, self.read_concurrency, self.partitions)


async def _open_for_reading(cfg: ObjectStoreConfig) -> ObjectStore:
    if cfg.backend == "local":
        return LocalObjectStore(cfg.local_dir, prefix=cfg.prefix)
    return await open_object_store(cfg)


async def _fetch(keys: Sequence[str], source: HistorySource) -> list[str]:
    store = await _open_for_reading(source.store)
    try:
        reader = LoadHistoryReader(store, read_concurrency=source.read_concurrency)
        chunks = await asyncio.gather(*(reader.read_lines(k) for k in keys))
    finally:
        await store.aclose()
    return [line for chunk in chunks for line in chunk]


def fetch_lines(keys: Sequence[str], source: HistorySource) -> tuple[list[str], int]:
    """``(valid lines, malformed lines)`` of the objects ``keys`` (an object pruned meanwhile
    has no lines). Blocking: runs its own event loop (an executor task has none)."""
    if not keys:
        return [], 0
    return split_report_lines(asyncio.run(_fetch(keys, source)))


def fetch_partition(source: HistorySource, bad: Any, keys: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """One task: its keys in, history rows out; malformed lines are added to ``bad`` (an
    accumulator the driver reads)."""
    lines, malformed = fetch_lines(list(keys), source)
    if malformed:
        bad.add(malformed)
    for line in lines:
        yield (line, False)


def history_frame(spark: Any, keys: Sequence[str], source: HistorySource) -> tuple[Any, Any]:
    """``(DataFrame of (line, current=False) rows, accumulator of malformed lines)``: the rows
    are fetched by the executors when an action needs them."""
    sc = spark.sparkContext
    bad = sc.accumulator(0)
    if not keys:
        return spark.createDataFrame([], LINES_SCHEMA), bad
    slices = max(1, min(len(keys), source.partitions or sc.defaultParallelism))
    rows = sc.parallelize(list(keys), slices).mapPartitions(
        partial(fetch_partition, source.for_executors(), bad)
    )
    return spark.createDataFrame(rows, LINES_SCHEMA), bad
