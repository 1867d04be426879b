"""Opening a reliable topic's log on a broker: where it continues, when it waits, what it refuses.

Real WALs in a temporary directory, the in-memory etcd."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from danube_broker.takeover import LogOpening, close_orphaned_stints
from danube_broker.wal import Durability, TopicLog
from danube_common.errors import HistoryConflict, TakeoverPending, TopicNotOwned
from danube_common.keys import Keys
from danube_common.log_state import LogRecords, LogState
from danube_common.metadata.memory import MemoryStore
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_common.wal.marker import read_incarnation, write_incarnation
from tests.support import wait_until
from tests.unit.broker.helpers import config

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = TopicName("default", "orders")
INC = 11


class Env:
    def __init__(self, store: MemoryStore, tmp_path: Path) -> None:
        self.res = Resources(store, Keys("u"))
        self.records = LogRecords(store, self.res.keys)
        self.tmp = tmp_path
        self.closed = False

    def directory(self, broker: str) -> Path:
        return self.tmp / broker / T.namespace / T.local

    async def own(self, broker: str) -> int:
        return await self.res.store.put(self.res.keys.owner(T), {"broker_id": broker})

    def opening(self, broker: str, epoch: int, **kw: object) -> LogOpening:
        cfg = config(broker_id=broker, data_dir=str(self.tmp / broker), offset_reservation_block=1000)
        return LogOpening(
            T,
            incarnation=INC,
            directory=self.directory(broker),
            durability=Durability.FSYNC,
            cfg=cfg,
            resources=self.res,
            epoch=lambda: epoch,
            closed=lambda: self.closed,
            **kw,  # type: ignore[arg-type]
        )

    async def stint(self) -> LogState:
        state = await self.records.state(T)
        assert state is not None
        return state


@pytest.fixture
async def env(memory_store: MemoryStore, tmp_path: Path) -> Env:
    return Env(memory_store, tmp_path)


async def append(log: object, n: int) -> None:
    assert isinstance(log, TopicLog)
    await log.append([b"x"] * n, [1] * n)


async def test_a_new_topic_starts_at_zero_and_records_its_writer(env: Env) -> None:
    epoch = await env.own("b1")
    opened = await env.opening("b1", epoch).run()
    try:
        assert opened.log.next_offset == 0
        s = await env.stint()
        assert (s.writer, s.epoch, s.start_offset, s.incarnation, s.open) == ("b1", epoch, 0, INC, True)
        assert opened.reservation.reserved_to == 1000
        assert read_incarnation(env.directory("b1")) == INC
    finally:
        await opened.log.aclose()


async def test_a_hand_over_is_continued_exactly_and_a_stale_local_log_is_set_aside(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    await append(first.log, 30)
    await first.log.aclose()
    assert await env.records.close(T, first.stint, next_offset=30, closed_by="hand_over", sequences={"p": 30})
    # b2 went on to 80 and handed it back (b1's own directory ends at 30: an earlier stay).
    epoch2 = await env.own("b2")
    second = await env.opening("b2", epoch2).run()
    assert second.log.next_offset == 30 and second.stint.producer_sequences == {"p": 30}
    await append(second.log, 50)
    await second.log.aclose()
    assert await env.records.close(T, second.stint, next_offset=80, closed_by="hand_over")
    epoch3 = await env.own("b1")
    third = await env.opening("b1", epoch3).run()
    try:
        assert third.log.next_offset == 80 and third.log.first_offset == 80
        assert third.stint.previous is not None and third.stint.previous["writer"] == "b2"
        aside = list(env.directory("b1").parent.glob("orders.superseded-30*"))
        assert len(aside) == 1, "the local log of the earlier stay is kept aside, not reused"
    finally:
        await third.log.aclose()


async def test_a_takeover_waits_for_the_dead_writers_end_and_never_times_out(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    await append(first.log, 40)  # b1 froze here: its stint is open, its end unknown
    epoch2 = await env.own("b2")
    opening = env.opening("b2", epoch2)
    task = asyncio.create_task(opening.run())
    await wait_until(lambda: opening.waiting is not None, what="waiting")
    err = opening.waiting.error(str(T))  # type: ignore[union-attr]
    assert isinstance(err, TakeoverPending) and err.retryable and "broker b1" in err.message
    await asyncio.sleep(1.0)  # far longer than any poll: still waiting, never guessing
    assert not task.done()
    # b1's uploader records the end it read from b1's disk.
    assert await env.records.close(T, first.stint, next_offset=40, closed_by="uploader", sequences={"q": 4})
    opened = await asyncio.wait_for(task, 5)
    try:
        assert opened.log.next_offset == 40 and opened.stint.producer_sequences == {"q": 4}
        assert opening.waiting is None
    finally:
        await opened.log.aclose()
        await first.log.aclose()


async def test_a_cloud_writers_log_continues_after_what_object_storage_holds(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch, cloud_acks=True).run()
    await append(first.log, 40)
    await first.log.aclose()
    await env.res.store.put(env.res.keys.upload_checkpoint(T), {"next_offset": 25, "incarnation": INC})
    epoch2 = await env.own("b2")
    opened = await asyncio.wait_for(env.opening("b2", epoch2).run(), 5)
    try:
        assert opened.log.next_offset == 25
        assert opened.stint.previous is not None and opened.stint.previous["closed_by"] == "cloud"
    finally:
        await opened.log.aclose()


async def test_our_own_open_stint_continues_at_our_disks_end(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    await append(first.log, 17)
    await first.log.aclose()  # kill -9 and restart: the record still says b1 writes from 0
    again = await env.opening("b1", epoch).run()
    try:
        assert again.log.next_offset == 17 and again.log.first_offset == 0
        assert again.stint.start_offset == 17 and again.stint.previous["closed_by"] == "writer_restart"  # type: ignore[index]
    finally:
        await again.log.aclose()


async def test_contradicting_records_are_refused(env: Env) -> None:
    await env.res.store.put(
        env.res.keys.storage_state(T), LogState("b1", 1, 0, INC).closed(50, "hand_over").to_json()
    )
    await env.res.store.put(env.res.keys.upload_checkpoint(T), {"next_offset": 70, "incarnation": INC})
    epoch = await env.own("b2")
    with pytest.raises(HistoryConflict, match="two histories"):
        await env.opening("b2", epoch).run()


async def test_the_unclean_policy_forces_past_every_possibly_acked_offset(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    await append(first.log, 40)
    epoch2 = await env.own("b2")

    async def alive(broker: str) -> bool:
        return False

    opened = await asyncio.wait_for(
        env.opening("b2", epoch2, unclean_after_s=0.3, writer_alive=alive).run(), 5
    )
    try:
        assert opened.log.next_offset == first.reservation.reserved_to == 1000
        gaps = await env.records.gaps(T)
        assert [(g.start_offset, g.next_offset) for g in gaps] == [(0, 1000)]
        assert "unclean_takeover_after_s" in gaps[0].decided_by
    finally:
        await opened.log.aclose()
        await first.log.aclose()


async def test_the_unclean_policy_never_forces_while_the_writer_is_registered(env: Env) -> None:
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    epoch2 = await env.own("b2")

    async def alive(broker: str) -> bool:
        return True

    opening = env.opening("b2", epoch2, unclean_after_s=0.1, writer_alive=alive)
    task = asyncio.create_task(opening.run())
    await asyncio.sleep(0.8)
    assert not task.done() and await env.records.gaps(T) == []
    env.closed = True
    with pytest.raises(TopicNotOwned):
        await asyncio.wait_for(task, 5)
    await first.log.aclose()


async def test_an_owner_that_moved_on_stops_the_opening(env: Env) -> None:
    epoch = await env.own("b1")
    await env.own("b2")  # the owner key moved on before the open's transaction
    with pytest.raises(TopicNotOwned):
        await env.opening("b1", epoch).run()
    assert await env.records.state(T) is None, "nothing recorded"


async def test_a_directory_of_a_deleted_topic_is_removed(env: Env) -> None:
    d = env.directory("b1")
    old = await TopicLog.open(d, cfg=config().wal, durability=Durability.FSYNC)
    await append(old, 5)
    await old.aclose()
    write_incarnation(d, INC - 1)
    epoch = await env.own("b1")
    opened = await env.opening("b1", epoch).run()
    try:
        assert opened.log.next_offset == 0 and opened.log.first_offset == 0
        assert read_incarnation(d) == INC
    finally:
        await opened.log.aclose()


async def test_a_record_written_meanwhile_is_read_again(env: Env) -> None:
    """Another broker's record lands between our read and our transaction: we decide again."""
    epoch = await env.own("b1")
    opening = env.opening("b1", epoch)
    real_read = env.records.read
    calls = 0

    async def racing_read(topic: TopicName, *, incarnation: int | None = None):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        v = await real_read(topic, incarnation=incarnation)
        if calls == 1:
            st = LogState("b0", 1, 0, INC).closed(12, "hand_over")
            await env.res.store.put(env.res.keys.storage_state(T), st.to_json())
        return v

    opening._records.read = racing_read  # type: ignore[method-assign]
    opened = await opening.run()
    try:
        assert calls >= 2 and opened.log.next_offset == 12
    finally:
        await opened.log.aclose()


async def test_a_restarted_broker_records_the_end_of_what_it_no_longer_owns(env: Env) -> None:
    """No uploader recorded the end of b1's log (none configured, or it died with b1): the new
    owner waits, until b1 restarts and records the end from its own disk."""
    epoch = await env.own("b1")
    first = await env.opening("b1", epoch).run()
    await append(first.log, 23)
    await first.log.aclose()  # b1 dies
    epoch2 = await env.own("b2")
    waiting = asyncio.create_task(env.opening("b2", epoch2).run())
    await asyncio.sleep(0.3)
    assert not waiting.done()

    cfg = config(broker_id="b1", data_dir=str(env.tmp / "b1"))
    assert await close_orphaned_stints(cfg, env.res, owned={str(T)}) == 0, "an owned topic is left alone"
    assert await close_orphaned_stints(cfg, env.res, owned=set()) == 1
    s = await env.stint()
    assert (s.closed_by, s.next_offset) == ("writer_restart", 23) or (s.open and s.start_offset == 23)
    opened = await asyncio.wait_for(waiting, 5)
    try:
        assert opened.log.next_offset == 23
    finally:
        await opened.log.aclose()
    other = config(broker_id="b3", data_dir=str(env.tmp / "b1"))
    assert await close_orphaned_stints(other, env.res, owned=set()) == 0, "only our own stints"
