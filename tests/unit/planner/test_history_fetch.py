"""History read where the Spark executors read it (danube_planner.history_fetch), without Spark:
the task function on a local object store, a cycle whose engine fetches history itself, and the
chunks the driver's own lines travel in."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from danube_common.keys import Keys
from danube_common.load_history import LoadHistoryReader, LoadHistoryWriter
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import ObjectStoreConfig
from danube_common.objstore.local import LocalObjectStore
from danube_planner.aggregate import aggregate
from danube_planner.config import PlannerConfig
from danube_planner.cycle import Planner, PythonEngine
from danube_planner.frames import pack
from danube_planner.history_fetch import HistorySource, fetch_lines, fetch_partition
from danube_planner.model import AggregateParams, Aggregates, PlannerInputs
from tests.unit.planner.helpers import NOW, zipf_cluster
from tests.unit.planner.test_cycle import publish

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


@pytest.fixture
async def objects(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    s = await LocalObjectStore.open(tmp_path / "objects", prefix="c1/")
    yield s
    await s.aclose()


def source_of(objects: LocalObjectStore) -> HistorySource:
    return HistorySource(
        ObjectStoreConfig(local_dir=str(objects.root), prefix=objects.prefix), read_concurrency=2
    )


class Counter:
    """Stands in for a Spark accumulator."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


async def test_a_task_reads_its_keys_and_skips_malformed_lines(objects: LocalObjectStore) -> None:
    syn = zipf_cluster(brokers=3, topics=20, seed=2, history_samples=3)
    writer = LoadHistoryWriter(objects, max_batch=2)
    for r in syn.history:
        writer.add(r)
    await writer.aclose()
    reader = LoadHistoryReader(objects)
    keys, lines = await reader.read_window_lines(NOW - 3_600_000, NOW)
    assert len(keys) == 6 and len(lines) == 9
    # One object gets a malformed line among good ones; one listed key is gone (pruned meanwhile).
    spoiled = keys[0]
    await objects.put(spoiled, (await objects.get(spoiled)) + b'{"not": "a report"}\nnot json\n')
    gone = keys[1]
    gone_lines = await reader.read_lines(gone)
    await objects.delete(gone)

    source = source_of(objects)
    # A task runs its own event loop: here, in a thread (as an executor task has no loop).
    got, bad = await asyncio.to_thread(fetch_lines, keys, source)
    assert bad == 2
    assert sorted(got) == sorted(set(lines) - set(gone_lines))
    bad_lines = Counter()
    rows = await asyncio.to_thread(lambda: list(fetch_partition(source, bad_lines, iter(keys))))
    assert rows == [(text, False) for text in got] and bad_lines.value == 2
    assert await asyncio.to_thread(fetch_lines, [], source) == ([], 0)


def test_the_executors_get_an_absolute_local_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = HistorySource(ObjectStoreConfig(local_dir="data/objects"))
    assert src.for_executors().store.local_dir == os.path.join(tmp_path, "data/objects")
    s3 = HistorySource(ObjectStoreConfig(backend="s3", s3={"bucket": "history"}))
    assert s3.for_executors() is s3


def test_the_plain_aggregation_refuses_unread_history() -> None:
    inp = PlannerInputs(
        now_ms=NOW, window_from_ms=NOW - 1, window_to_ms=NOW, current_lines=[], history_keys=["k"]
    )
    with pytest.raises(ValueError, match="1 history object"):
        aggregate(inp)


class FetchingEngine:
    """An engine that reads history itself, as the Spark engine's executors do."""

    name = "fetching"
    fetches_history = True

    def __init__(self, source: HistorySource) -> None:
        self.source = source
        self.seen: list[PlannerInputs] = []

    def aggregate(self, inp: PlannerInputs, params: AggregateParams) -> Aggregates:
        self.seen.append(inp)
        lines, _ = fetch_lines(list(inp.history_keys), self.source)
        return aggregate(dataclasses.replace(inp, history_lines=lines, history_keys=()), params)

    def close(self) -> None:
        return None


async def test_the_cycle_hands_keys_to_an_engine_that_fetches_history(
    memory_store: MemoryStore, keys: Keys, objects: LocalObjectStore
) -> None:
    syn = zipf_cluster(brokers=4, topics=40, seed=5, history_samples=3)
    writer = LoadHistoryWriter(objects, max_batch=2)
    for r in syn.history:
        writer.add(r)
    await writer.aclose()
    listed = await LoadHistoryReader(objects).list_window(NOW - 600_000, NOW)
    cfg = PlannerConfig(engine="python", leader_endpoints=[], max_moves_per_cycle=5)

    # The same cluster in two stores (a cycle's plan would block the other's).
    await publish(memory_store, keys, syn)
    plain = await Planner(cfg, memory_store, keys, LoadHistoryReader(objects), PythonEngine()).cycle(
        None, now=NOW
    )
    other = MemoryStore()
    await publish(other, keys, syn)
    engine = FetchingEngine(source_of(objects))
    result = await Planner(cfg, other, keys, LoadHistoryReader(objects), engine).cycle(None, now=NOW)
    await other.aclose()

    [inp] = engine.seen
    assert list(inp.history_keys) == listed and not inp.history_lines  # keys only, no lines
    assert result.report["window"]["history_objects"] == len(listed) == 4 * 2  # 3 reports, 2 a batch
    assert result.report["window"]["samples"] == plain.report["window"]["samples"] == 4 * 4
    assert result.aggregates == plain.aggregates
    assert result.plan_result is not None and plain.plan_result is not None
    assert len(plain.plan_result.moves) > 0
    assert [m.topic for m in result.plan_result.moves] == [m.topic for m in plain.plan_result.moves]


def test_the_drivers_lines_travel_in_chunks_of_bounded_size() -> None:
    rows = [("a" * n, n % 2 == 0) for n in (300, 300, 500, 1200, 100, 100, 100)]
    chunks = pack(rows, limit=1000)
    assert [r for c in chunks for r in c] == rows  # all of them, in order
    assert [[len(line) for line, _ in c] for c in chunks] == [[300, 300], [500], [1200], [100, 100, 100]]
    assert pack([], limit=10) == [] and len(pack(rows)) == 1  # small inputs: one chunk
