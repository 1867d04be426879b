"""Calling any RPC once, by its protobuf descriptor, under a deadline.

Tests that must reach every method of every service (the auth table test) enumerate them from
the generated modules' descriptors (:func:`rpcs`) and call each through the channel's generic
multi-callables (:func:`call_once`): no stub per service, so an RPC added to a ``.proto`` is
probed without touching the test. A streaming call sends one request message and reads the
first response or the final status; every call is bounded by its deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

Metadata = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Rpc:
    """One method of one service, as the descriptors describe it."""

    service: str  # full name, e.g. danube.ProducerService
    method: str
    client_streaming: bool
    server_streaming: bool
    request_type: type[Message]
    response_type: type[Message]

    @property
    def path(self) -> str:
        """The full method name, as in ``RULES`` and on the wire."""
        return f"/{self.service}/{self.method}"

    @property
    def short(self) -> str:
        """``ProducerService.CreateProducer``: readable in test ids."""
        return f"{self.service.rpartition('.')[2]}.{self.method}"

    @property
    def streaming(self) -> bool:
        return self.client_streaming or self.server_streaming


def services(modules: Iterable[Any]) -> list[str]:
    """The full name of every service of the generated ``*_pb2`` ``modules``."""
    return [s.full_name for m in modules for s in m.DESCRIPTOR.services_by_name.values()]


def rpcs(modules: Iterable[Any]) -> list[Rpc]:
    """Every method of every service of the generated ``*_pb2`` ``modules``, in file order."""
    out = []
    for module in modules:
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out.append(
                    Rpc(
                        service.full_name,
                        m.name,
                        m.client_streaming,
                        m.server_streaming,
                        GetMessageClass(m.input_type),
                        GetMessageClass(m.output_type),
                    )
                )
    return out


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one call ended: OK with the (first) response, or the error status."""

    code: grpc.StatusCode
    details: str = ""
    trailing: tuple[tuple[str, str], ...] = ()
    response: Message | None = None

    def trailer(self, key: str) -> str | None:
        return next((v for k, v in self.trailing if k == key), None)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}" if self.details else self.code.name


def _texts(md: Any) -> tuple[tuple[str, str], ...]:
    return tuple(
        (str(k), v.decode(errors="replace") if isinstance(v, bytes) else str(v)) for k, v in md or ()
    )


async def _one(request: Message) -> AsyncIterator[Message]:
    yield request


async def call_once(
    channel: grpc.aio.Channel,
    rpc: Rpc,
    request: Message,
    *,
    metadata: Metadata = (),
    timeout_s: float,
) -> Outcome:
    """Call ``rpc`` with ``request`` (a stream of that one message for client streams) and
    return how it ended; a server stream ends at its first response (then it is cancelled)."""
    kwargs: dict[str, Any] = {
        "request_serializer": rpc.request_type.SerializeToString,
        "response_deserializer": rpc.response_type.FromString,
    }
    md = tuple(metadata)
    call: Any = None
    try:
        if rpc.client_streaming and rpc.server_streaming:
            call = channel.stream_stream(rpc.path, **kwargs)(_one(request), timeout=timeout_s, metadata=md)
        elif rpc.client_streaming:
            call = channel.stream_unary(rpc.path, **kwargs)(_one(request), timeout=timeout_s, metadata=md)
            return Outcome(grpc.StatusCode.OK, response=await call)
        elif rpc.server_streaming:
            call = channel.unary_stream(rpc.path, **kwargs)(request, timeout=timeout_s, metadata=md)
        else:
            response = await channel.unary_unary(rpc.path, **kwargs)(request, timeout=timeout_s, metadata=md)
            return Outcome(grpc.StatusCode.OK, response=response)
        first = await call.read()
        if first is grpc.aio.EOF:  # the stream ended without a response: its status says how
            return Outcome(
                await call.code(), await call.details() or "", _texts(await call.trailing_metadata())
            )
        return Outcome(grpc.StatusCode.OK, response=first)
    except grpc.aio.AioRpcError as err:
        return Outcome(err.code(), err.details() or "", _texts(err.trailing_metadata()))
    finally:
        if call is not None and rpc.server_streaming:
            call.cancel()
