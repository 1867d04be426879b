"""The ceiling: bench/raw_grpc_relay.py, a server that acks each PublishBatch frame and hands it unchanged
to the open ReceiveBatches stream, with no broker logic. What goes through it is what gRPC + protobuf
in Python carry with our frames on this machine.

The client side batches like our SDK does (see _Producer), one stream per producer; acks resolve the
frame's futures.
In memory, one consumer stream at a time: non-reliable workloads with one subscription only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import grpc.aio

from bench.drivers.base import ConsumerHandle, Driver, DriverUnavailable, ProducerHandle
from danube_common.grpc_util import CHANNEL_OPTIONS
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc

RELAY = Path(__file__).resolve().parent.parent / "raw_grpc_relay.py"
BATCH_MAX = 1000


class _Producer(ProducerHandle):
    """Frames sealed like our SDK's: at ``BATCH_MAX`` messages, or at once when no frame is in flight
    (then the next frame grows while this one is acked: batches grow exactly when load does)."""

    def __init__(self, stub: pb_grpc.ProducerServiceStub, producer_id: int) -> None:
        self._id = producer_id
        self._open: list[pb.StreamMessage] = []
        self._open_futs: list[asyncio.Future[None]] = []
        self._inflight: deque[list[asyncio.Future[None]]] = deque()
        self._frames: asyncio.Queue[pb.PublishBatch | None] = asyncio.Queue(maxsize=16)
        self._seq = 0
        self._call = stub.PublishBatches(self._requests())
        self._acks = asyncio.create_task(self._read_acks())

    async def _requests(self):  # type: ignore[no-untyped-def]
        while (frame := await self._frames.get()) is not None:
            yield frame

    def _take(self) -> pb.PublishBatch | None:
        """The open frame, now counted in flight (None if empty)."""
        if not self._open:
            return None
        msgs, futs = self._open, self._open_futs
        self._open, self._open_futs = [], []
        self._inflight.append(futs)
        self._seq += 1
        return pb.PublishBatch(producer_id=self._id, batch_seq=self._seq, messages=msgs)

    async def _seal(self) -> None:
        if (frame := self._take()) is not None:
            await self._frames.put(frame)  # back-pressure: the writer's queue is bounded

    async def _read_acks(self) -> None:
        async for _ack in self._call:
            for f in self._inflight.popleft():
                if not f.done():
                    f.set_result(None)
            if not self._inflight and (frame := self._take()) is not None:
                self._frames.put_nowait(frame)  # nothing in flight: the queue is empty

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._open.append(pb.StreamMessage(payload=payload, publish_time=0, producer_name="raw"))
        self._open_futs.append(fut)
        if not self._inflight or len(self._open) >= BATCH_MAX:
            await self._seal()
        return fut

    async def flush(self) -> None:
        await self._seal()
        pending = [f for futs in self._inflight for f in futs]
        if pending:
            await asyncio.gather(*pending)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), 10)
        await self._frames.put(None)
        self._acks.cancel()
        self._call.cancel()
        await asyncio.gather(self._acks, return_exceptions=True)


class _Consumer(ConsumerHandle):
    def __init__(self, stub: pb_grpc.ConsumerServiceStub) -> None:
        self._call = stub.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=1))
        self._it = self._call.__aiter__()

    async def receive(self) -> list[bytes]:
        mb = await self._it.__anext__()
        return [m.payload for m in mb.messages]

    async def close(self) -> None:
        self._call.cancel()


class RawGrpcDriver(Driver):
    name = "raw-grpc"
    durability = "in memory, no broker (ceiling)"
    supports_reliable = False

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._channel: grpc.aio.Channel | None = None
        self._addr = ""
        self._next_id = 0

    async def start(self, workdir: Path) -> None:
        if self._proc is not None:
            return
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        ready = workdir / "relay.json"
        await asyncio.to_thread(ready.unlink, missing_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, str(RELAY), "--ready-file", str(ready), start_new_session=True
        )
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(ready.exists):
            if self._proc.returncode is not None or time.monotonic() > deadline:
                await self.stop()
                raise DriverUnavailable("the raw gRPC relay (bench/raw_grpc_relay.py) did not start")
            await asyncio.sleep(0.05)
        self._addr = json.loads(await asyncio.to_thread(ready.read_text))["addr"]
        self._channel = grpc.aio.insecure_channel(self._addr, options=CHANNEL_OPTIONS)

    def client_spec(self) -> dict[str, Any]:
        assert self._channel is not None, "start() the driver first"
        return {"addr": self._addr}

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> RawGrpcDriver:
        driver = cls()  # no relay process: stop() closes the channel only
        driver._addr = str(spec["addr"])
        driver._channel = grpc.aio.insecure_channel(driver._addr, options=CHANNEL_OPTIONS)
        return driver

    async def stop(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    def server_pids(self) -> list[int]:
        return [self._proc.pid] if self._proc is not None else []

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        if reliable:
            raise ValueError("raw-grpc keeps nothing: non-reliable workloads only")

    async def producer(self, topic: str) -> ProducerHandle:
        assert self._channel is not None
        self._next_id += 1
        return _Producer(pb_grpc.ProducerServiceStub(self._channel), self._next_id)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        assert self._channel is not None
        return _Consumer(pb_grpc.ConsumerServiceStub(self._channel))  # the relay buffers until read
