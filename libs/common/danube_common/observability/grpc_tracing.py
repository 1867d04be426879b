"""RPC spans: a server interceptor and a client interceptor, W3C context in gRPC metadata.

Unary calls (admin calls, lookups, CreateProducer, Subscribe, AckBatch, campaigns' unary
siblings, the uploader's Flush, ...) get a SERVER span on the callee, a CLIENT span on the caller,
the caller's context in the ``traceparent`` metadata entry. Long-lived streams (PublishBatches,
ReceiveBatches, Campaign, watches) get none: a span as long as a connection says nothing, and
the messages they carry have traces of their own (:mod:`.messages`).

Both are installed only while tracing is on (:data:`.tracing.ENABLED`): built by
``grpc_util.new_server`` / ``open_channel`` and the SDK's channel factory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from danube_common.errors import MD_ERROR_CODE
from danube_common.grpc_wrap import rewrap
from danube_common.observability import tracing

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER_NAME = "danube.grpc"


def _rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _parent_from_metadata(metadata: Any) -> Context | None:
    carrier = {k: v for k, v in (metadata or ()) if k in ("traceparent", "tracestate") and isinstance(v, str)}
    return _PROPAGATOR.extract(carrier) if carrier else None


class ServerTracingInterceptor(grpc.aio.ServerInterceptor):
    """A SERVER span per unary-response call, parented on the caller's ``traceparent``; the
    status code (and the Danube error code of a refusal) is recorded on it. Goes outermost,
    so refusals by the auth interceptor have spans too."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method

        def traced(behavior: Callable[..., Any]) -> Callable[..., Any]:
            return _traced(method, behavior)

        return rewrap(handler, unary_unary=traced, stream_unary=traced)


def _traced(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    name = method.lstrip("/")
    attributes = _rpc_attributes(method)

    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        parent = _parent_from_metadata(context.invocation_metadata())
        with tracing.tracer(_TRACER_NAME).start_as_current_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            failed = True
            try:
                response = await behavior(request, context)
                failed = False
                return response
            except BaseException as exc:
                if not isinstance(exc, grpc.aio.AbortError):
                    span.record_exception(exc)
                raise
            finally:
                _finish_server_span(span, context, failed=failed)

    return wrapper


def _finish_server_span(span: trace.Span, context: grpc.aio.ServicerContext, *, failed: bool) -> None:
    if not span.is_recording():
        return
    code = context.code()
    if code is None:  # nothing set: OK when the handler returned, else the exception's status
        code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
    if isinstance(code, grpc.StatusCode):
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, context.details() or code.name))
    for key, value in context.trailing_metadata() or ():
        if key == MD_ERROR_CODE:
            span.set_attribute("danube.error.code", value)


class ClientTracingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A CLIENT span per unary call; the span's context goes out in ``traceparent``."""

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        method = client_call_details.method
        if isinstance(method, bytes):
            method = method.decode()
        with tracing.tracer(_TRACER_NAME).start_as_current_span(
            method.lstrip("/"),
            kind=SpanKind.CLIENT,
            attributes=_rpc_attributes(method),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            metadata = list(client_call_details.metadata or ())
            if span.is_recording():
                carrier: dict[str, str] = {}
                _PROPAGATOR.inject(carrier)
                metadata.extend(carrier.items())
            details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                client_call_details.timeout,
                grpc.aio.Metadata(*metadata),
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
            call = await continuation(details, request)
            try:
                await call
            except grpc.aio.AioRpcError as exc:
                if span.is_recording():
                    span.set_attribute("rpc.grpc.status_code", exc.code().value[0])
                    span.set_status(Status(StatusCode.ERROR, exc.details() or exc.code().name))
                raise
            if span.is_recording():
                span.set_attribute("rpc.grpc.status_code", 0)
            return call


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    return [ClientTracingInterceptor()]
