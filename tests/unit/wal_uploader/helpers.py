"""Shared by the uploader's unit, integration and fault tests: real segments written through the
broker's TopicLog, and checks of what ended up in object storage and etcd."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import google_crc32c
import grpc.aio
import yaml

from danube_broker.wal import Durability, TopicLog, WalConfig
from danube_common.keys import Keys
from danube_common.log_state import LogState
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import ObjectStore
from danube_common.pb import DanubeWalUploader_pb2 as upb
from danube_common.pb import DanubeWalUploader_pb2_grpc as upb_grpc
from danube_common.storage import SegmentDescriptor, check_disjoint, gaps
from danube_common.topic_name import TopicName
from danube_common.wal.codec import StopReason, scan
from danube_common.wal.marker import write_incarnation
from danube_common.wal.segment import HEADER_BYTES, decode_header
from tests.support import wait_until

SMALL_SEGMENT_BYTES = 64 * 1024


def payload(i: int, size: int = 100) -> bytes:
    head = f"m-{i:08d}-".encode()
    return head + bytes((i + k) % 251 for k in range(max(0, size - len(head))))


#: The incarnation the helpers mark topic directories (and log records) with.
INCARNATION = 1


async def open_log(
    directory: Path,
    *,
    segment_max_bytes: int = SMALL_SEGMENT_BYTES,
    initial_offset: int = 0,
    incarnation: int | None = INCARNATION,
) -> TopicLog:
    """The broker's TopicLog on ``directory``, marked with ``incarnation`` as a broker does."""
    cfg = WalConfig(segment_max_bytes=segment_max_bytes, index_every_frames=16, tail_cache_bytes=0)
    log = await TopicLog.open(directory, cfg=cfg, durability=Durability.FSYNC, initial_offset=initial_offset)
    if incarnation is not None:
        write_incarnation(directory, incarnation)
    return log


async def record_stint(
    store: MetadataStore,
    keys: Keys,
    topic: TopicName,
    writer: str,
    *,
    start: int = 0,
    epoch: int = 1,
    incarnation: int = INCARNATION,
) -> LogState:
    """Write the log record a broker writes when it opens the topic (``writer`` writes it from
    ``start``): what the uploader needs before it uploads anything of the directory."""
    state = LogState(writer=writer, epoch=epoch, start_offset=start, incarnation=incarnation)
    rev = await store.put(keys.storage_state(topic), state.to_json())
    return replace(state, revision=rev)


async def append(log: TopicLog, first: int, count: int, *, size: int = 100, batch: int = 50) -> None:
    """Append records ``payload(first) .. payload(first + count - 1)`` (their offsets, when the log
    started at ``first``)."""
    i = first
    while i < first + count:
        n = min(batch, first + count - i)
        await log.append([payload(j, size) for j in range(i, i + n)], [1_000 + j for j in range(i, i + n)])
        i += n


async def write_topic(
    data_dir: Path, topic: TopicName, count: int, *, size: int = 100, roll: bool = False
) -> TopicLog:
    """The topic's log, open, holding records ``0 .. count - 1`` (the caller closes it)."""
    log = await open_log(data_dir / topic.namespace / topic.local)
    await append(log, 0, count, size=size)
    if roll:
        await log.roll()
    return log


async def descriptors(store: MetadataStore, keys: Keys, topic: TopicName) -> list[SegmentDescriptor]:
    kvs, _ = await store.get_prefix(keys.segments_prefix(topic))
    return [SegmentDescriptor.from_json(kv.json()) for kv in kvs]


async def checkpoint(store: MetadataStore, keys: Keys, topic: TopicName) -> int | None:
    value = await store.get_json(keys.upload_checkpoint(topic))
    return int(value["next_offset"]) if value else None


def decode_object(data: bytes, start: int, end: int) -> list[tuple[int, int, bytes]]:
    """The frames of an uploaded object, checked: a header saying ``start``, then exactly the
    frames ``start .. end - 1`` with good checksums and nothing after them."""
    header = decode_header(data[:HEADER_BYTES], source="object")
    assert header.first_offset == start, (header.first_offset, start)
    r = scan(data, HEADER_BYTES, expected_offset=start)
    assert r.stop is StopReason.END, r.detail
    assert [f.offset for f in r.frames] == list(range(start, end))
    return [(f.offset, f.publish_time_ms, bytes(f.record)) for f in r.frames]


async def check_uploaded(
    store: MetadataStore,
    keys: Keys,
    objects: ObjectStore,
    topic: TopicName,
    *,
    end: int,
    size: int = 100,
) -> list[SegmentDescriptor]:
    """Descriptors of ``topic`` are disjoint, contiguous from 0 to at least ``end``, and each
    object decodes to exactly its range's records (compared one by one)."""
    descs = check_disjoint(await descriptors(store, keys, topic))
    assert descs, "no descriptor"
    assert descs[0].start_offset == 0
    assert gaps(descs, first=0, end=descs[-1].next_offset) == []
    assert descs[-1].next_offset >= end
    for d in descs:
        data = await objects.get(d.object_key)
        assert len(data) == d.size_bytes
        assert google_crc32c.value(data) == d.crc32c
        frames = decode_object(data, d.start_offset, d.next_offset)
        for offset, pt, record in frames:
            assert record == payload(offset, size), f"offset {offset} differs"
            assert pt == 1_000 + offset
        assert d.max_publish_time_ms == 1_000 + d.next_offset - 1
    return descs


# ---------------------------------------------------------------- the uploader as a process


def s3_settings(endpoint_url: str, bucket: str, **over: Any) -> dict[str, Any]:
    """``object_store`` settings for a moto endpoint (or a proxy in front of it)."""
    s3: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "bucket": bucket,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "path_style": True,
        "create_bucket": True,
        "connect_timeout_s": 1.0,
        "read_timeout_s": 3.0,
        "request_timeout_s": 5.0,
        "max_attempts": 1,
    }
    s3.update(over)
    return {"backend": "s3", "s3": s3}


class UploaderProcess:
    """``python -m danube_wal_uploader`` with a YAML config; stopped (killed if need be) on exit."""

    def __init__(
        self,
        workdir: Path,
        *,
        broker_id: str,
        data_dir: Path,
        etcd_endpoint: str,
        cluster: str,
        object_store: dict[str, Any],
        **fields: Any,
    ) -> None:
        self.workdir = workdir
        self.ready = workdir / f"uploader-{broker_id}.json"
        self.log_path = workdir / f"uploader-{broker_id}.log"
        config = {
            "broker_id": broker_id,
            "data_dir": str(data_dir),
            "listen_addr": "127.0.0.1:0",
            "object_store": object_store,
            "scan_interval_s": 0.1,
            "retry_initial_s": 0.05,
            "retry_max_s": 0.5,
            "final_state_poll_s": 0.05,
            "registration_ttl_s": 3,
            "etcd": {"endpoints": [etcd_endpoint], "cluster": cluster},
            **fields,
        }
        self.config_path = workdir / f"uploader-{broker_id}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    async def start(self, timeout_s: float = 30) -> UploaderProcess:
        """Start and wait for the ready file (polling without blocking the event loop: a
        FaultyProxy in this process must keep forwarding meanwhile)."""
        self.ready.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115, ASYNC230 - handed to the child
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - starting a process does not wait for it
            [
                sys.executable,
                "-m",
                "danube_wal_uploader",
                "--config",
                str(self.config_path),
                "--ready-file",
                str(self.ready),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        proc = self.proc

        def ready_or_exited() -> bool:
            return self.ready.exists() or proc.poll() is not None

        try:
            await wait_until(ready_or_exited, timeout_s=timeout_s, what="the uploader's ready file")
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{self.log_tail()}") from None
        if proc.poll() is not None:
            raise AssertionError(f"the uploader exited with {proc.returncode}:\n{self.log_tail()}")
        self.info = json.loads(self.ready.read_text())
        return self

    @property
    def addr(self) -> str:
        return str(self.info["addr"])

    def log_tail(self, n: int = 6000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    async def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self._exited(10)

    async def _exited(self, timeout_s: float) -> int:
        proc = self.proc
        assert proc is not None
        await wait_until(lambda: proc.poll() is not None, timeout_s=timeout_s, what="the uploader's exit")
        return proc.returncode

    async def stop(self) -> int:
        """SIGTERM, then wait; returns the exit code."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return await self._exited(15)
            except AssertionError:
                proc.kill()
                proc.wait()
        return proc.returncode

    async def __aenter__(self) -> UploaderProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.kill_now()

    def kill_now(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class UploaderClient:
    """A small async client of the uploader's API."""

    def __init__(self, addr: str) -> None:
        self.channel = grpc.aio.insecure_channel(addr)
        self.stub = upb_grpc.WalUploaderStub(self.channel)

    async def flush(self, topic: TopicName, up_to: int = 0, *, timeout_s: float = 20) -> upb.FlushResponse:
        return await self.stub.Flush(
            upb.FlushRequest(topic=str(topic), up_to_offset=up_to), timeout=timeout_s
        )

    async def status(self, topic: TopicName | None = None) -> upb.StatusResponse:
        return await self.stub.Status(upb.StatusRequest(topic=str(topic) if topic else ""), timeout=5)

    async def aclose(self) -> None:
        await self.channel.close()
