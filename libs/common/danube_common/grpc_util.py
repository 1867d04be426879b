"""gRPC helpers: server and channel construction, address handling.

Every server is built by :func:`new_server` (a service with ``auth`` enabled passes its
AuthInterceptor, which goes outermost, before the ErrorInterceptor) and every channel a service
opens to another by :func:`open_channel` (TLS when given the service's channel credentials).
Binding with TLS is ``danube_common.security.tls.bind_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence

import grpc
import grpc.aio

from danube_common.errors import ErrorInterceptor
from danube_common.observability import tracing
from danube_common.observability.grpc_tracing import ServerTracingInterceptor, client_interceptors

#: Frames carry batches; allow generous messages (payload limits are enforced by policy).
MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024

SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
]
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def new_server(
    extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    *,
    options: Sequence[tuple[str, int]] = SERVER_OPTIONS,
) -> grpc.aio.Server:
    """A server whose ``extra_interceptors`` run outside the ErrorInterceptor (the first is
    outermost): an AuthInterceptor there refuses a call before any servicer code runs, with
    the same status and ``x-danube-error-code`` trailing metadata the ErrorInterceptor sends.
    With tracing on, a ServerTracingInterceptor goes outside them all."""
    traced: list[grpc.aio.ServerInterceptor] = [ServerTracingInterceptor()] if tracing.ENABLED else []
    return grpc.aio.server(
        interceptors=[*traced, *extra_interceptors, ErrorInterceptor()], options=list(options)
    )


def open_channel(
    addr: str,
    credentials: grpc.ChannelCredentials | None = None,
    *,
    options: Sequence[tuple[str, int | str]] = CHANNEL_OPTIONS,
) -> grpc.aio.Channel:
    """A channel to another service: TLS with ``credentials`` (a service's
    ``channel_credentials(cfg.tls)``: its CA and, for mTLS, its own certificate), else plaintext.
    With tracing on, unary calls get CLIENT spans and carry the caller's context."""
    interceptors = client_interceptors() if tracing.ENABLED else None
    if credentials is None:
        return grpc.aio.insecure_channel(addr, options=list(options), interceptors=interceptors)
    return grpc.aio.secure_channel(addr, credentials, options=list(options), interceptors=interceptors)


def strip_scheme(url: str) -> str:
    """``http://host:port`` -> ``host:port`` (Danube clients do the same)."""
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return url


def bind(server: grpc.aio.Server, addr: str) -> int:
    """Bind an insecure port; return the actual port (useful with port 0)."""
    try:
        port = server.add_insecure_port(addr)
    except RuntimeError as exc:  # grpcio reports a failed bind this way
        raise OSError(f"cannot listen on {addr}: address in use or not available here") from exc
    if port == 0:
        raise OSError(f"cannot listen on {addr}: address in use or not available here")
    return port


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
