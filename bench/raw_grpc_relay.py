"""Baseline for the benchmarks: the raw gRPC batched-stream ceiling on this machine.

A minimal server process speaking our batched extension RPCs with no broker logic at all:
PublishBatches acks each frame, and every frame is handed unchanged to the (single) open
ReceiveBatches stream. What a client measures through it is what gRPC + protobuf in Python
can carry with the same frames; our broker can only approach it.

    python bench/raw_grpc_relay.py --listen 127.0.0.1:0 --ready-file /tmp/relay.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc.aio

from danube_common.grpc_util import SERVER_OPTIONS
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc


class Relay(pb_grpc.ProducerServiceServicer, pb_grpc.ConsumerServiceServicer):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[pb.StreamMessage]] = asyncio.Queue(maxsize=64)
        self.offset = 0

    async def PublishBatches(
        self, request_iterator: AsyncIterator[pb.PublishBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        async for batch in request_iterator:
            n = len(batch.messages)
            first = self.offset
            self.offset += n
            await self.queue.put(list(batch.messages))
            yield pb.PublishAck(batch_seq=batch.batch_seq, first_offset=first, count=n)

    async def ReceiveBatches(
        self, request: pb.ReceiveBatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.MessageBatch]:
        while True:
            msgs = await self.queue.get()
            yield pb.MessageBatch(messages=msgs)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--ready-file", required=True)
    args = p.parse_args()
    server = grpc.aio.server(options=SERVER_OPTIONS)
    relay = Relay()
    pb_grpc.add_ProducerServiceServicer_to_server(relay, server)
    pb_grpc.add_ConsumerServiceServicer_to_server(relay, server)
    port = server.add_insecure_port(args.listen)
    await server.start()
    host = args.listen.rsplit(":", 1)[0]
    _write_ready(args.ready_file, {"addr": f"{host}:{port}", "pid": os.getpid()})
    await server.wait_for_termination()


def _write_ready(path: str, info: dict[str, object]) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(info))
    tmp.rename(path)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
