"""A broker with ``wal.commit_sync: journal`` (in-process, real WAL, real etcd): publishes are
acknowledged once the commit journal holds them, and a start after a power loss that took the
segments' unflushed tails puts them back from the journal before any topic opens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.wal import journal as jr
from tests.integration.test_reliable_dispatch import (
    producer,
    publish,
    receive,
    reliable_broker,
    stop,
    subscribe,
)
from tests.support import unique
from tests.unit.wal.helpers import cut_to_headers

pytestmark = pytest.mark.integration

TOPICS = 6


def journal_copies(data_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for _, p in jr.journal_files(jr.journal_dir(data_dir))}


async def test_acked_publishes_survive_losing_the_segments_through_the_journal(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "wal"
    names = [f"/default/{unique('jrnl')}" for _ in range(TOPICS)]
    b = await reliable_broker(etcd_server, cluster_name, data_dir, wal={"commit_sync": "journal"})
    try:
        assert b.registry.reliable.commit_group is not None
        for i, name in enumerate(names):
            pid = (await producer(b, name)).producer_id
            ack = await publish(b, pid, [f"{i}-{k}".encode() for k in range(3)])
            assert ack.first_offset == 0
        # Acknowledged: the journal holds every batch (the broker has not checkpointed yet).
        held = await asyncio.to_thread(journal_copies, data_dir)
        records = [r for buf in held.values() for r in jr.read_records(buf)]
        assert sum(len(r) for r in records) >= TOPICS
    finally:
        await stop(b)
    # The power went out before a checkpoint flushed the segments: their frames are gone, the
    # journal files the broker had then are on disk. (A clean stop checkpointed; undo that.)
    assert await asyncio.to_thread(cut_to_headers, data_dir, "default/*/*.wal") == TOPICS
    for path, data in held.items():
        await asyncio.to_thread(path.write_bytes, data)

    b = await reliable_broker(etcd_server, cluster_name, data_dir, wal={"commit_sync": "journal"})
    try:
        for i, name in enumerate(names):
            cid = await subscribe(b, name, window=100, earliest=True)
            stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
            got = await receive(stream, 3)
            assert [m.payload for m in got] == [f"{i}-{k}".encode() for k in range(3)]
            stream.cancel()
        assert not [p for p in held if p.exists()], "replayed journal files are deleted"
    finally:
        await stop(b)
