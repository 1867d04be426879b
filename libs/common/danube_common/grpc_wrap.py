"""Wrapping a gRPC method handler's behavior, for server interceptors (errors, auth, tracing).

A ``grpc.RpcMethodHandler`` carries one behavior of one of four kinds (unary or stream request,
unary or stream response); an interceptor that wraps behaviors builds a new handler of the same
kind with the same (de)serializers. :func:`rewrap` does that once for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Behavior = Callable[..., Any]
Wrap = Callable[[Behavior], Behavior]

_FACTORIES = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


def rewrap(
    handler: grpc.RpcMethodHandler,
    *,
    unary_unary: Wrap | None = None,
    unary_stream: Wrap | None = None,
    stream_unary: Wrap | None = None,
    stream_stream: Wrap | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` with its behavior replaced by the wrap given for its kind; a kind given no
    wrap is returned unchanged."""
    wraps = {
        "unary_unary": unary_unary,
        "unary_stream": unary_stream,
        "stream_unary": stream_unary,
        "stream_stream": stream_stream,
    }
    for kind, factory in _FACTORIES:
        behavior = getattr(handler, kind)
        if not behavior:
            continue
        wrap = wraps[kind]
        if wrap is None:
            return handler
        return factory(
            wrap(behavior),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler
