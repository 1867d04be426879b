"""Helpers shared by producer and consumer sessions: stream status, health checks, task racing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import grpc
import grpc.aio

from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError, TopicNotOwned, Unavailable, error_from_status
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.connection import Stubs
from danube_sdk.errors import with_auth_hint

log = logging.getLogger(__name__)


async def call_error(call: grpc.aio.Call, what: str) -> DanubeError:
    """The error a finished stream call ended with (OK counts as 'closed by the server')."""
    code = await call.code()
    if code == grpc.StatusCode.OK:
        return Unavailable(f"{what}: stream closed by the server")
    md: dict[str, str] = {}
    for key, value in await call.trailing_metadata() or ():
        md[key] = value.decode() if isinstance(value, bytes) else value
    return with_auth_hint(error_from_status(code, await call.details() or "", md))


def map_stream_error(exc: BaseException, what: str) -> DanubeError:
    if isinstance(exc, DanubeError):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        md = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in exc.trailing_metadata() or ()}
        return with_auth_hint(error_from_status(exc.code(), exc.details() or "", md))
    return Unavailable(f"{what}: {exc!r}")


async def health_watch(
    stubs: Stubs, *, client: int, client_id: int, interval_s: float, rpc_timeout_s: float
) -> None:
    """Poll HealthCheck; raise TopicNotOwned when the broker answers CLOSE.

    Returns (ending the watch, not the session) if the broker does not serve health checks.
    Transient failures are ignored: the data stream reports real breakage itself.
    """
    if interval_s <= 0:
        return
    req = pb.HealthCheckRequest(client=pb.HealthCheckRequest.ClientType.Name(client), id=client_id)
    while True:
        await asyncio.sleep(interval_s)
        try:
            resp = await stubs.health.HealthCheck(req, timeout=rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return
            log.debug("health check failed: %s", exc.details())
            continue
        if resp.status == pb.HealthCheckResponse.CLOSE:
            raise TopicNotOwned("the broker asked this client to reconnect (health check CLOSE)")


async def race(
    main: dict[str, Coroutine[Any, Any, None]], optional: dict[str, Coroutine[Any, Any, None]]
) -> None:
    """Run coroutines until one of ``main`` ends (or any raises); cancel the rest.

    A coroutine of ``optional`` may return without ending the race (e.g. a health watch on a
    broker without health checks). The first exception is re-raised; a ``main`` coroutine
    returning normally just ends the race.
    """
    tasks = {asyncio.create_task(c, name=n): n for n, c in main.items()}
    opt = {asyncio.create_task(c, name=n): n for n, c in optional.items()}
    pending: set[asyncio.Task[None]] = set(tasks) | set(opt)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None:
                    raise exc
                if task in tasks:
                    return
    finally:
        # Not ``with suppress(CancelledError): await task``: that would swallow a cancellation
        # of this very coroutine (its supervisor's task being closed) and let it start over.
        await cancel_and_wait(*pending)
        for task in (*tasks, *opt):  # mark every outcome seen (both ends of a stream may fail)
            if task.done() and not task.cancelled():
                task.exception()


def first_error(eg: BaseExceptionGroup) -> BaseException:
    """The first real error of a TaskGroup failure (groups nest when tasks start tasks)."""
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
