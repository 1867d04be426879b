"""Topic compaction: the view's rules, its storage, and reading it through a subscription."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from danube_broker.compaction import (
    CompactedView,
    Compactor,
    TopicCompaction,
    decode_view,
    encode_view,
    view_file_name,
)
from danube_broker.dispatch.reliable.acks import AckTracker
from danube_common.errors import DataLoss
from danube_common.objstore.local import LocalObjectStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.topic_name import TopicName
from tests.unit.broker.fake_log import FakeLog
from tests.unit.broker.reliable_helpers import make_rig, offsets, take

pytestmark = pytest.mark.unit

TOPIC = TopicName.parse("/default/table")


def rec(
    key: str | None,
    payload: bytes = b"v",
    *,
    chunk: tuple[str, int, int] | None = None,
    pack: int = 0,
) -> bytes:
    m = pb.StreamMessage(payload=payload, producer_name="p")
    if key is not None:
        m.routing_key = key
    if chunk is not None:
        m.chunk.message_uuid, m.chunk.index, m.chunk.count = chunk
    if pack:
        m.batch_size = pack
    return m.SerializeToString()


def compact(records: list[bytes], base: CompactedView | None = None, start: int = 0) -> CompactedView:
    c = Compactor(base)
    for i, r in enumerate(records):
        c.add(start + i, 1_000 + start + i, r)
    return c.finish(start + len(records))


def kept(view: CompactedView) -> list[int]:
    return [e.offset for e in view.entries]


# ---------------------------------------------------------------------------------------- rules


def test_the_newest_message_of_each_key_is_kept_in_offset_order() -> None:
    view = compact([rec("a", b"1"), rec("b", b"1"), rec("a", b"2"), rec("c"), rec("b", b"2")])
    assert kept(view) == [2, 3, 4]
    assert view.keys == 3 and view.horizon == 5
    assert [pb.StreamMessage.FromString(e.record).payload for e in view.entries] == [b"2", b"v", b"2"]


def test_a_tombstone_deletes_its_key_and_keyless_messages_are_left_out() -> None:
    view = compact([rec("a"), rec(None), rec("b"), rec("a", b""), rec(None, b"")])
    assert kept(view) == [2] and view.keys == 1 and view.horizon == 5
    again = compact([rec("a", b"back")], base=view, start=5)
    assert kept(again) == [2, 5], "a key written after its tombstone is back"


def test_a_pack_is_one_message_kept_whole_even_with_an_empty_payload() -> None:
    view = compact([rec("a", b"packed", pack=3), rec("b"), rec("b", b"", pack=2)])
    assert kept(view) == [0, 2]


def test_a_chunked_message_is_kept_with_all_its_chunks_once_complete() -> None:
    records = [
        rec("a", b"old"),
        rec("a", b"c0", chunk=("u1", 0, 3)),
        rec("b"),
        rec("a", b"c1", chunk=("u1", 1, 3)),
        rec("a", b"c2", chunk=("u1", 2, 3)),
    ]
    assert kept(compact(records)) == [1, 2, 3, 4]


def test_an_incomplete_chunked_message_at_the_horizon_is_kept_beside_the_older_value() -> None:
    first = compact([rec("a", b"old"), rec("a", b"c0", chunk=("u1", 0, 2))])
    assert kept(first) == [0, 1], "the older value, and the first chunk of the newer one"
    done = compact([rec("a", b"c1", chunk=("u1", 1, 2))], base=first, start=2)
    assert kept(done) == [1, 2], "completed across two compactions: the old value goes"


def test_an_abandoned_or_broken_chunked_message_does_not_replace_the_value() -> None:
    records = [
        rec("a", b"old"),
        rec("a", b"c0", chunk=("u1", 0, 3)),
        rec("a", b"c2", chunk=("u1", 2, 3)),  # chunk 1 missing: broken
        rec("b", b"c1", chunk=("u9", 1, 2)),  # a continuation of nothing
    ]
    assert kept(compact(records)) == [0, 1]
    abandoned = compact([rec("a", b"old"), rec("a", b"c0", chunk=("u1", 0, 2)), rec("a", b"new")])
    assert kept(abandoned) == [2]


def test_compacting_in_steps_gives_the_view_of_compacting_at_once() -> None:
    rnd = random.Random(7)
    keys = ["k0", "k1", "k2", "k3", "k4", None]
    for _ in range(200):
        records = [
            rec(rnd.choice(keys), rnd.choice([b"", b"x", b"yy"]), pack=rnd.choice([0, 0, 0, 2]))
            for _ in range(40)
        ]
        whole = compact(records)
        cut = rnd.randrange(0, 41)
        step = compact(records[cut:], base=compact(records[:cut]), start=cut)
        assert kept(step) == kept(whole) and step.keys == whole.keys and step.horizon == whole.horizon


def test_offsets_must_come_in_order_and_the_horizon_above_them() -> None:
    c = Compactor()
    c.add(5, 0, rec("a"))
    with pytest.raises(ValueError, match="in order"):
        c.add(5, 0, rec("a"))
    with pytest.raises(ValueError, match="horizon"):
        c.finish(5)


def test_the_view_reads_from_an_offset() -> None:
    view = compact([rec("a"), rec("b"), rec("a"), rec("c"), rec("d")])
    assert [e.offset for e in view.read(0, 2)] == [1, 2]
    assert [e.offset for e in view.read(3, 10)] == [3, 4]
    assert view.read(5, 10) == [] and view.first_offset == 1
    assert CompactedView(9, [], 0).first_offset == 9


# ---------------------------------------------------------------------------------------- storage


def test_a_stored_view_reads_back_and_damage_is_reported() -> None:
    view = compact([rec("a"), rec("b"), rec("a", b"2")])
    data = encode_view(view)
    back = decode_view(data, horizon=3, entries=2, keys=2)
    assert back.entries == view.entries and back.horizon == 3
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    with pytest.raises(DataLoss):
        decode_view(bytes(flipped), horizon=3, entries=2, keys=2)
    with pytest.raises(DataLoss, match="entries"):
        decode_view(data, horizon=3, entries=3, keys=2)
    with pytest.raises(DataLoss):
        decode_view(data[:-3], horizon=3, entries=2, keys=2)
    with pytest.raises(DataLoss, match="out of order"):
        decode_view(data, horizon=2, entries=2, keys=2)


async def fill_log(records: list[bytes]) -> FakeLog:
    log = FakeLog()
    await log.append(records, [1_000] * len(records))
    return log


class Records:
    """The etcd record writes of a TopicCompaction (what the broker writes fenced)."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None
        self.fail: BaseException | None = None

    async def __call__(self, value: dict[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.value = value


async def test_compactions_are_stored_on_disk_and_in_object_storage_and_load_back(tmp_path: Path) -> None:
    objects = await LocalObjectStore.open(tmp_path / "objects")
    records = Records()
    tc = TopicCompaction(
        TOPIC, directory=tmp_path / "wal", objects=objects, incarnation=3, write_record=records
    )
    log = await fill_log([rec("a"), rec("b"), rec("a", b"2")])
    info = await tc.compact(log, 3)
    assert (info.horizon, info.entries, info.keys, info.messages_read) == (3, 2, 2, 3)
    assert records.value is not None and records.value["horizon"] == 3
    assert (tmp_path / "wal" / view_file_name(3)).exists()
    assert info.object_key.startswith("compacted/default/table/i3/") and await objects.get(info.object_key)

    await log.append([rec("b", b""), rec("c")], [1_000] * 2)
    # What a crash between storing a view and writing its record leaves (older than the next
    # view), and a newer view another owner is storing meanwhile.
    (tmp_path / "wal" / view_file_name(4)).write_bytes(b"orphan")
    prefix = info.object_key.rpartition("/")[0]
    await objects.put(f"{prefix}/{4:020d}-abc.view", b"orphan")
    await objects.put(f"{prefix}/{99:020d}-def.view", b"newer")
    info2 = await tc.compact(log, 5)
    assert (info2.horizon, info2.keys, info2.messages_read) == (5, 2, 2), "continues from the old horizon"
    assert kept(tc.view) == [2, 4]  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "wal").iterdir()) == [view_file_name(5)], "older files deleted"
    assert [o.key for o in await objects.list("compacted/")] == [
        info2.object_key,
        f"{prefix}/{99:020d}-def.view",
    ]
    await objects.delete(f"{prefix}/{99:020d}-def.view")

    # A new owner: the local file first ...
    other = TopicCompaction(
        TOPIC, directory=tmp_path / "wal", objects=objects, incarnation=3, write_record=Records()
    )
    await other.load(records.value)
    assert other.view is not None and kept(other.view) == [2, 4] and other.info == info2
    # ... object storage when the file is gone or damaged (another machine) ...
    (tmp_path / "wal" / view_file_name(5)).write_bytes(b"damaged")
    third = TopicCompaction(
        TOPIC, directory=tmp_path / "wal", objects=objects, incarnation=3, write_record=Records()
    )
    await third.load(records.value)
    assert third.view is not None and kept(third.view) == [2, 4]
    # ... and neither: reported, no view (the next compaction starts over).
    await objects.delete(info2.object_key)
    lost = TopicCompaction(
        TOPIC, directory=tmp_path / "wal", objects=objects, incarnation=3, write_record=Records()
    )
    await lost.load(records.value)
    assert lost.view is None and "OBJECT_NOT_FOUND" in lost.load_error
    again = await lost.compact(log, 5)
    assert again.messages_read == 5 and kept(lost.view) == [2, 4]  # type: ignore[arg-type]


async def test_a_refused_record_write_keeps_the_old_view(tmp_path: Path) -> None:
    records = Records()
    tc = TopicCompaction(TOPIC, directory=tmp_path, objects=None, incarnation=None, write_record=records)
    log = await fill_log([rec("a"), rec("a", b"2")])
    await tc.compact(log, 1)
    records.fail = DataLoss("fenced")
    with pytest.raises(DataLoss):
        await tc.compact(log, 2)
    assert (
        tc.horizon == 1 and tc.info is not None and tc.info.horizon == 1 and tc.info.stored_in == "local disk"
    )


# ---------------------------------------------------------------------------------------- acks


def test_ack_range_matches_acknowledging_each_offset() -> None:
    rnd = random.Random(3)
    for _ in range(300):
        a, b = AckTracker(rnd.randrange(-1, 5)), AckTracker()
        b.cursor = a.cursor
        model = set(range(a.cursor + 1))
        for _ in range(12):
            lo = rnd.randrange(0, 60)
            hi = lo + rnd.randrange(0, 8)
            if rnd.random() < 0.5:
                a.ack_range(lo, hi)
            else:
                a.ack_many(range(lo, hi + 1))
            b.ack_many(range(lo, hi + 1))
            model |= set(range(lo, hi + 1))
            assert a.cursor == b.cursor and a.acked_above == b.acked_above
            assert a.persistable(1000) == b.persistable(1000)
            assert all(a.is_acked(o) == (o in model) for o in range(70))


# ---------------------------------------------------------------------------------------- reading


def source(view: CompactedView | None) -> Any:
    return SimpleNamespace(view=view)


async def test_a_compacted_subscription_reads_the_view_then_the_log() -> None:
    records = [
        rec("a"),
        rec("b"),
        rec("a", b"2"),
        rec(None),
        rec("b", b""),
        rec("c"),
        rec("a", b"3"),
        rec("d"),
    ]
    log = await fill_log(records)
    view = compact(records[:6])  # horizon 6: a@2, c@5
    rig = make_rig(log=log, compaction=source(view))
    c = rig.attach("c", window=100)
    await rig.pump()
    got = take(c)
    assert offsets(got) == [2, 5, 6, 7]
    assert rig.engine.compacted_total == 4
    rig.engine.ack([2, 5, 6, 7])
    assert rig.engine.cursor == 7, "what the view left out counts as acknowledged"

    plain = make_rig(log=log)
    pc = plain.attach("c", window=100)
    await plain.pump()
    assert offsets(take(pc)) == list(range(8)), "a subscription without read_compacted reads everything"


async def test_the_view_is_read_below_what_retention_cut_and_a_newer_view_is_picked_up() -> None:
    records = [rec(f"k{i % 3}") for i in range(30)]
    log = await fill_log(records)
    await log.truncate_before(20)
    assert log.first_offset == 20
    holder = source(compact(records[:10]))  # k1@7, k2@8, k0@9, horizon 10
    rig = make_rig(log=log, compaction=holder, read_batch=2, max_pending=2)
    c = rig.attach("c", window=2)
    await rig.pump()
    assert offsets(take(c)) == [7, 8], "below the log's first offset: from the view"
    holder.view = compact(records[:25])  # compacted again meanwhile: k1@22, k2@23, k0@24
    rig.engine.ack([7, 8])
    got: list[int] = []
    for _ in range(5):
        await rig.pump()
        batch = offsets(take(c))
        got += batch
        rig.engine.ack(batch)
    assert got == [22, 23, 24, 25, 26, 27, 28, 29], "at or above the read position, from the newer view"
    assert rig.engine.skipped_total == 0, "nothing reported gone: the view covers the cut"
    assert rig.engine.cursor == 29


async def test_a_seek_may_go_below_the_log_into_the_view() -> None:
    records = [rec(f"k{i % 2}") for i in range(20)]
    log = await fill_log(records)
    await log.truncate_before(10)
    rig = make_rig(log=log, compaction=source(compact(records[:12])), cursor=15)
    assert rig.engine.seek(0) == 10, "the view's oldest entry (k0@10, k1@11)"
    plain = make_rig(log=log, cursor=15)
    assert plain.engine.seek(0) == 10
    older = make_rig(log=log, compaction=source(compact(records[:8])), cursor=15)
    assert older.engine.seek(0) == 6


async def test_a_fenced_out_broker_at_the_same_horizon_does_not_touch_the_owners_view(tmp_path: Path) -> None:
    """A paused former owner computing a view at the owner's horizon (from a log that may have
    diverged) stores its own object, and its fenced record write fails: the owner's view, named
    by the record, is intact."""
    objects = await LocalObjectStore.open(tmp_path / "objects")
    records = Records()
    owner = TopicCompaction(
        TOPIC, directory=tmp_path / "a", objects=objects, incarnation=1, write_record=records
    )
    await owner.compact(await fill_log([rec("a"), rec("b")]), 2)
    fenced = Records()
    fenced.fail = DataLoss("fenced out")
    former = TopicCompaction(
        TOPIC, directory=tmp_path / "b", objects=objects, incarnation=1, write_record=fenced
    )
    with pytest.raises(DataLoss):
        await former.compact(await fill_log([rec("x"), rec("y")]), 2)
    assert len(await objects.list("compacted/")) == 2, "two objects, neither overwritten"
    fresh = TopicCompaction(
        TOPIC, directory=tmp_path / "c", objects=objects, incarnation=1, write_record=Records()
    )
    await fresh.load(records.value)
    assert fresh.view is not None
    assert [pb.StreamMessage.FromString(e.record).routing_key for e in fresh.view.entries] == ["a", "b"]
