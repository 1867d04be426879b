"""RPC spans on a real grpc.aio server and channel built by grpc_util: the caller's CLIENT span
is the parent of the callee's SERVER span, statuses and Danube codes are recorded, streams get
no span, and with tracing off no interceptor is installed at all."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from danube_common.errors import TopicNotFound
from danube_common.grpc_util import bind, new_server, open_channel
from danube_common.observability import tracing
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from tests.support.tracing import capture_spans, named

pytestmark = pytest.mark.unit

HEALTH = "danube.HealthCheck/HealthCheck"


class Health(pb_grpc.HealthCheckServicer):
    async def HealthCheck(
        self, request: pb.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthCheckResponse:
        if request.id == 404:
            raise TopicNotFound("topic /default/gone does not exist")
        return pb.HealthCheckResponse(status=pb.HealthCheckResponse.OK)


class Consumers(pb_grpc.ConsumerServiceServicer):
    async def ReceiveMessages(
        self, request: pb.ReceiveRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamMessage]:
        for i in range(3):
            yield pb.StreamMessage(request_id=i)


async def _serve() -> tuple[grpc.aio.Server, str]:
    server = new_server()
    pb_grpc.add_HealthCheckServicer_to_server(Health(), server)
    pb_grpc.add_ConsumerServiceServicer_to_server(Consumers(), server)
    port = bind(server, "127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def test_client_and_server_spans_join_one_trace() -> None:
    with capture_spans() as exporter:
        server, addr = await _serve()
        channel = open_channel(addr)
        try:
            stub = pb_grpc.HealthCheckStub(channel)
            await stub.HealthCheck(pb.HealthCheckRequest(id=1), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.HealthCheck(pb.HealthCheckRequest(id=404), timeout=5)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            got = [m async for m in pb_grpc.ConsumerServiceStub(channel).ReceiveMessages(pb.ReceiveRequest())]
            assert len(got) == 3
        finally:
            await channel.close()
            await server.stop(None)
        spans = exporter.get_finished_spans()
    calls = named(spans, HEALTH)
    clients = [s for s in calls if s.kind == SpanKind.CLIENT]
    servers = [s for s in calls if s.kind == SpanKind.SERVER]
    assert len(clients) == 2 and len(servers) == 2
    for client in clients:
        server_span = next(
            s for s in servers if s.parent is not None and s.parent.span_id == client.context.span_id
        )
        assert server_span.context.trace_id == client.context.trace_id
        assert (
            server_span.attributes is not None
            and server_span.attributes["rpc.service"] == "danube.HealthCheck"
        )
    ok = [s for s in servers if s.attributes and s.attributes["rpc.grpc.status_code"] == 0]
    failed = [s for s in servers if s.attributes and s.attributes["rpc.grpc.status_code"] == 5]
    assert len(ok) == 1 and len(failed) == 1
    assert failed[0].status.status_code == StatusCode.ERROR
    assert failed[0].attributes is not None and failed[0].attributes["danube.error.code"] == "TOPIC_NOT_FOUND"
    failed_client = next(s for s in clients if s.attributes and s.attributes["rpc.grpc.status_code"] == 5)
    assert failed_client.status.status_code == StatusCode.ERROR
    assert not named(spans, "danube.ConsumerService/ReceiveMessages"), "streams get no RPC span"


async def test_with_tracing_off_nothing_is_intercepted() -> None:
    with capture_spans() as exporter:
        tracing.set_enabled_for_tests(False)  # a provider exists, but this process has tracing off
        server, addr = await _serve()
        channel = open_channel(addr)
        try:
            await pb_grpc.HealthCheckStub(channel).HealthCheck(pb.HealthCheckRequest(id=1), timeout=5)
        finally:
            await channel.close()
            await server.stop(None)
        assert exporter.get_finished_spans() == ()
