"""Every fault scenario once, short, on one cluster, judged by the history checker.

Each scenario (tests/fault/scenarios.py) runs 4 producers and 4 consumers (a shared and an exclusive
subscription) over an ``fsync`` and a ``cloud`` topic on one broker, injects its fault, heals it,
and then checks the recorded history against a fresh read of each topic: no acknowledged message
lost, no phantom, per-producer order, unique and gap-free offsets, no duplicate (the producers are
idempotent), acks never regress; the log records' chain in etcd (no two brokers wrote the same
offsets); and that every load-manager write carried the term leading at that revision. Where
retention deletes history (retention_under_faults), every subscription must have received every
acknowledged message.

The long form is the soak: ``scripts/soak.sh --minutes 30`` runs the scenarios in random order for
as long as asked and prints the checker's verdict for each; it also runs the few scenarios left
out here (``scenarios.SOAK_ONLY``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.topic_name import TopicName
from tests.fault.cluster import FaultCluster
from tests.fault.scenarios import RETENTION_SIZE_BYTES, SCENARIOS, SOAK_ONLY, run_scenario
from tests.fault.workload import final_read
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    cluster = FaultCluster(Path(tmp_path_factory.mktemp("faults"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in SOAK_ONLY])
async def test_no_acknowledged_message_is_lost(fc: FaultCluster, name: str) -> None:
    # Short: the fault comes once 100 sends were acknowledged on each topic (the soak waits for 200).
    outcome = await run_scenario(fc, name, seed=zlib.crc32(name.encode()), warmup_acks=200)
    print("\n" + outcome.summary())
    assert outcome.ok, outcome.summary()
    c = outcome.verdict.counts
    assert c.sends_ok >= 500, f"too little traffic to judge: {c}"
    assert outcome.term_writes_checked > 0
    if name == "graceful_stop":
        # Handed over while still served (the lame duck), not re-placed after the stop.
        assert all(closes and set(closes) == {"hand_over"} for closes in outcome.closes.values()), (
            outcome.closes
        )
    if name == "machine_lost":
        # The one loss allowed: what the lost machine had not uploaded, recorded as an accepted
        # gap by the operator's decision (the checker allows it there and nowhere else).
        return
    if name in RETENTION_SIZE_BYTES:
        # What retention deleted is not in the final read (it starts where the history now
        # starts); outcome.ok checked that every subscription had received all of it.
        assert c.lost_in_allowed_gaps > 0, "retention deleted nothing acknowledged"
        return
    assert c.lost_in_allowed_gaps == 0


# ---------------------------------------------------------------------- the log across owners
async def _publish(fc: FaultCluster, topic: str, seqs: list[int]) -> tuple[int, pb.PublishAck]:
    """Attach producer "p" on the topic's current owner and publish one batch with ``seqs``
    (raw gRPC: the test chooses the sequence ids). Returns (last_sequence_id the broker reported
    on attach, the batch's ack)."""
    async with fc.etcd() as res:
        own = await res.get_owner(TopicName.parse(topic))
        assert own is not None
        broker = await res.get_broker(own.broker_id)
        assert broker is not None
    async with grpc.aio.insecure_channel(broker.broker_addr) as ch:
        stub = pb_grpc.ProducerServiceStub(ch)
        resp = await stub.CreateProducer(
            pb.ProducerRequest(
                request_id=1, producer_name="p", topic_name=topic, dispatch_strategy=pb.Reliable
            ),
            timeout=30,
        )
        batch = pb.PublishBatch(
            producer_id=resp.producer_id,
            batch_seq=1,
            messages=[pb.StreamMessage(payload=f"m{s}".encode(), sequence_id=s) for s in seqs],
        )
        call = stub.PublishBatches()
        await call.write(batch)
        ack = await call.read()
        await call.done_writing()
        assert isinstance(ack, pb.PublishAck)
        return resp.last_sequence_id, ack


async def _publish_when_served(fc: FaultCluster, topic: str, seqs: list[int]) -> tuple[int, pb.PublishAck]:
    """:func:`_publish`, retried while the topic's new owner is not serving it yet."""

    async def attempt() -> tuple[int, pb.PublishAck] | None:
        try:
            return await _publish(fc, topic, seqs)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return None  # moving, taking over, or the owner's address still the old one
            raise

    return await wait_until(attempt, timeout_s=60, interval_s=0.2, what=f"publishing to {topic}")  # type: ignore[no-any-return]


async def _owner_changes(fc: FaultCluster, topic: str, than: str) -> str:
    async def other() -> str | None:
        async with fc.etcd() as res:
            o = await fc.owner(res, topic)
        return o if o is not None and o != than else None

    return str(await wait_until(other, timeout_s=60, interval_s=0.2, what=f"{topic} owned elsewhere"))


async def test_retried_sequence_ids_are_deduplicated_across_a_move_and_a_failover(fc: FaultCluster) -> None:
    topic = f"/default/{unique('dedup')}"
    await fc.create_topic(topic)
    last, ack = await _publish(fc, topic, list(range(1, 11)))
    assert (last, ack.first_offset, ack.count, ack.duplicates) == (0, 0, 10, 0)
    async with fc.etcd() as res:
        first_owner = await fc.owner(res, topic)
    assert first_owner is not None

    await fc.admin("topics", "move", topic)
    second_owner = await _owner_changes(fc, topic, first_owner)
    # The new owner knows the producer's sequence ids: a client that never heard the acks
    # re-sends the same ids and gets the original offsets, nothing is stored twice.
    last, ack = await wait_until(
        lambda: _publish(fc, topic, list(range(1, 11))), timeout_s=30, what="publish"
    )
    assert last == 10
    assert (ack.duplicates, list(ack.offsets)) == (10, list(range(10)))
    last, ack = await _publish(fc, topic, [11, 12])
    assert (ack.first_offset, ack.count, ack.duplicates) == (10, 2, 0)

    await fc.kill(second_owner)  # a failover: the dead broker's uploader records where its log ends
    try:
        await _owner_changes(fc, topic, second_owner)
        last, ack = await _publish_when_served(fc, topic, [11, 12])
        assert last == 12 and ack.duplicates == 2
    finally:
        await fc.restart(second_owner)
    read = await final_read(
        fc.service_url, topic, expect_at_least=12, timeout_s=30, idle_s=1.5, admin_addr=fc.admin_addr
    )
    assert [off for off, _ in read] == list(range(12)), "each message stored once, offsets unbroken"


async def test_a_deleted_topic_created_again_starts_empty(fc: FaultCluster) -> None:
    topic = f"/default/{unique('reborn')}"
    await fc.create_topic(topic)
    for lo in range(1, 4001, 500):
        await _publish(fc, topic, list(range(lo, lo + 500)))
    name = TopicName.parse(topic)
    async with fc.etcd() as res:
        owner = await fc.owner(res, topic)
        old = await res.get_topic(name)
        assert old is not None and owner is not None

        async def uploaded() -> bool:
            cp = await res.store.get_json(res.keys.upload_checkpoint(name))
            return bool(cp) and int(cp["next_offset"]) > 0

        await wait_until(uploaded, timeout_s=30, what="part of the topic in object storage")
        directory = fc.c.broker_data_dir(owner) / name.namespace / name.local
        assert directory.exists()

        await fc.admin("topics", "delete", topic)
        kvs, _ = await res.store.get_prefix(res.keys.storage_topic_prefix(name))
        assert kvs == [], "the log's records, descriptors and checkpoint went with the topic"
        await wait_until(lambda: not directory.exists(), timeout_s=30, what="the deleted topic's WAL removed")

        await fc.create_topic(topic)
        new = await res.get_topic(name)
        assert new is not None and new.incarnation != old.incarnation
    _, ack = await _publish(fc, topic, [1])
    assert (ack.first_offset, ack.duplicates) == (0, 0), "a new log: offset 0, no memory of old sequence ids"
    read = await final_read(
        fc.service_url, topic, expect_at_least=1, timeout_s=30, idle_s=1.5, admin_addr=fc.admin_addr
    )
    assert [(off, msg) for off, msg in read] == [(0, None)], "nothing of the deleted topic comes back"
