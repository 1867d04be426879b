"""A fake benchmark driver whose clients work across processes (for the client-worker tests).

Not in bench/drivers, so ``bench.drivers.discover`` never sees it: only the tests use it. ``start``
runs a tiny relay in the harness's event loop on a loopback port; producer and consumer handles
(in the harness or in worker processes, rebuilt there by ``attach(client_spec())``) connect to it.
Wire: a JSON hello line (``{"topic", "sub"}``; no ``sub`` = producer), answered ``ok``; then
4-byte big-endian length-prefixed payloads. The relay copies each published payload to one
consumer of every subscription of the topic. A producer's ack is immediate (a completed future).

``fail`` (a spec flag) makes the clients misbehave: ``send:N`` = the producer raises on its N-th
send; ``exit`` = the consumer process exits with code 3 on its first receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

from bench.drivers.base import ConsumerHandle, Driver, ProducerHandle

HOST = "127.0.0.1"
HEADER = 4


class _Producer(ProducerHandle):
    def __init__(self, writer: asyncio.StreamWriter, fail_at: int) -> None:
        self._w = writer
        self._fail_at = fail_at
        self._n = 0

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        self._n += 1
        if self._n == self._fail_at:
            raise RuntimeError(f"fake send failed on purpose at message {self._n}")
        self._w.write(len(payload).to_bytes(HEADER, "big") + payload)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        await self._w.drain()

    async def close(self) -> None:
        self._w.close()
        with contextlib.suppress(OSError):
            await self._w.wait_closed()


class _Consumer(ConsumerHandle):
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, exit_on_receive: bool
    ) -> None:
        self._r = reader
        self._w = writer
        self._exit = exit_on_receive

    async def receive(self) -> list[bytes]:
        if self._exit:
            os._exit(3)  # a hard crash: no exception, no reply, just gone
        n = int.from_bytes(await self._r.readexactly(HEADER), "big")
        return [await self._r.readexactly(n)]

    async def close(self) -> None:
        self._w.close()
        with contextlib.suppress(OSError):
            await self._w.wait_closed()


class LoopbackFakeDriver(Driver):
    name = "fake-loopback"
    durability = "in memory (fake relay on loopback)"

    def __init__(self, *, fail: str = "") -> None:
        self.fail = fail
        self._port = 0
        self._server: asyncio.Server | None = None
        self._conns: list[asyncio.StreamWriter] = []  # relay side
        self._subs: dict[str, dict[str, list[asyncio.StreamWriter]]] = {}
        self._rr = itertools.count()

    # -- the relay (harness process only)

    async def start(self, workdir: Path) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.append(writer)
        try:
            hello = json.loads(await reader.readline())
            topic = hello["topic"]
            if "sub" in hello:
                consumers = self._subs.setdefault(topic, {}).setdefault(hello["sub"], [])
                consumers.append(writer)
                writer.write(b"ok\n")
                try:
                    await reader.read()  # until the consumer closes
                finally:
                    consumers.remove(writer)
                return
            writer.write(b"ok\n")
            while True:
                head = await reader.readexactly(HEADER)
                frame = head + await reader.readexactly(int.from_bytes(head, "big"))
                for consumers in self._subs.get(topic, {}).values():
                    if consumers:
                        consumers[next(self._rr) % len(consumers)].write(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        for w in self._conns:
            w.close()
        self._conns.clear()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def server_pids(self) -> list[int]:
        return []

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        self._subs.setdefault(topic, {})

    # -- the client side (harness or worker)

    def client_spec(self) -> dict[str, Any]:
        return {"port": self._port, "fail": self.fail}

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> LoopbackFakeDriver:
        driver = cls(fail=spec["fail"])
        driver._port = int(spec["port"])
        return driver

    async def _connect(self, hello: dict[str, str]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(HOST, self._port)
        writer.write(json.dumps(hello).encode() + b"\n")
        if await reader.readline() != b"ok\n":
            raise RuntimeError("fake relay refused the handle")
        return reader, writer

    async def producer(self, topic: str) -> ProducerHandle:
        _, writer = await self._connect({"topic": topic})
        fail_at = int(self.fail.split(":")[1]) if self.fail.startswith("send:") else 0
        return _Producer(writer, fail_at)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        reader, writer = await self._connect({"topic": topic, "sub": subscription})
        return _Consumer(reader, writer, exit_on_receive=self.fail == "exit")
