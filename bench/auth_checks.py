"""What the auth interceptor costs per call and per stream message, in one process, no network.

    .venv/bin/python bench/auth_checks.py [--n 20000]

The pieces of ``danube_common.security.interceptor`` the publish and consume paths run, each timed
in a loop (median of 5 repetitions, microseconds per operation), with the launcher's narrow token
(``user:demo-producer``, role ``producer`` on namespace ``default``) and, as a real cluster would
have, a few hundred other bindings in the policy:

- **authenticate, cached token**: ``authorization`` header -> principal, the token in the
  verifier's cache (every call after the first in 30 s);
- **authenticate, full HS256 check**: the same with the cache off (a token's first call, and once
  every 30 s after that);
- **authorize a topic**: RBAC on ``/default/t`` (the lineage walk over the principal's bindings);
- **authorize a handle**: a producer id resolved to its topic and creator, RBAC on the topic,
  then "is it the caller's own" (SendMessage, PublishBatches, AckBatch without a topic ...);
- **unary call**: the two above plus the rule lookup, what every unary RPC pays (an AckBatch);
- **stream message, same target**: a PublishBatch after the first on its stream (the target
  is computed and compared, RBAC is re-run only every ``stream_recheck_interval_s``);
- **stream wrapper**: the extra async-generator layer the interceptor puts between gRPC and
  the servicer, per message, next to iterating the messages directly;
- **client: bearer interceptors, per stream message**: the SDK sends its token through
  grpc.aio client interceptors (danube_sdk/auth.py), and grpc.aio routes every write and read
  of an intercepted stream through an extra queue and task. Timed on a loopback stream
  (plaintext, 100-byte messages, one response per request, like PublishBatches/PublishAck)
  with and without them; the difference is the interceptors' cost per message pair.

What this does not measure: TLS (record encryption in gRPC's C core, below Python).
``bench/run.py --drivers danube,danube-tls,danube-secure`` measures the whole, end to end
(docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.security import SecurityStore
from danube_common.security.interceptor import Authenticator, AuthInterceptor, _Gate
from danube_common.security.rbac import Authorizer, Binding, Permission, Resource
from danube_common.security.rules import RULES, Handle, HandleInfo
from danube_common.security.security_view import SecurityView
from danube_common.security.tokens import TokenVerifier, issue_token
from danube_sdk.auth import BearerToken, _aio_interceptors

SECRET = "0123456789abcdef" * 4
ISSUER = "danube"
PUBLISH = "/danube.ProducerService/PublishBatches"
OTHER_BINDINGS = 300


async def _policy() -> tuple[SecurityView, MemoryStore]:
    """The policy the services read (a SecurityView, fed from an in-memory store): the demo
    producer's binding among ``OTHER_BINDINGS`` others."""
    store, keys = MemoryStore(), Keys("bench")
    rbac = SecurityStore(store, keys)
    for i in range(OTHER_BINDINGS):
        await rbac.create_binding(
            Binding.create(f"b{i}", f"user:u{i}", "consumer", "namespace", f"ns{i % 20}")
        )
    await rbac.create_binding(
        Binding.create("demo-producer", "user:demo-producer", "producer", "namespace", "default")
    )
    view = SecurityView(store, keys)
    await view.start()
    await view.wait_for(lambda: len(view.bindings) == OTHER_BINDINGS + 1, timeout_s=10)
    return view, store


def _time_us(fn: Callable[[], Any], n: int, reps: int = 5) -> float:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


async def _time_stream_us(n: int, wrapped: bool, icp: AuthInterceptor, gate: _Gate, req: Any) -> float:
    async def source() -> AsyncIterator[Any]:
        for _ in range(n):
            yield req

    runs = []
    for _ in range(5):
        it: AsyncIterator[Any] = source()
        if wrapped:
            first = await it.__anext__()
            it = icp._checked_requests(PUBLISH, gate, None, first, it)  # context: only used to refuse
        t0 = time.perf_counter()
        async for _ in it:
            pass
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=20_000, help="operations per timing loop")
    asyncio.run(measure(p.parse_args().n))


async def _stream_pair_us(n: int, *, intercepted: bool, token: str) -> float:
    """Per request/response pair on a loopback stream-stream call, median of 3 runs of ``n``."""

    async def echo(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        async for req in requests:
            yield req[:8]

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Pairs": grpc.stream_stream_rpc_method_handler(echo)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    # The SDK's own interceptors (private helpers of danube_sdk.auth), as DanubeClient(token=...) uses them.
    interceptors = _aio_interceptors(BearerToken(token)) if intercepted else None
    runs = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=interceptors) as ch:
            method = ch.stream_stream("/bench.Echo/Pairs")
            payload = b"x" * 100
            for _ in range(3):
                call = method()
                t0 = time.perf_counter()
                for _ in range(n):
                    await call.write(payload)
                    await call.read()
                runs.append((time.perf_counter() - t0) / n * 1e6)
                await call.done_writing()
                await call.code()
    finally:
        await server.stop(None)
    return statistics.median(runs)


async def measure(n: int) -> None:
    view, _store = await _policy()

    token = issue_token("demo-producer", "user", "demo-producer", 3600, SECRET, ISSUER)
    md = {"authorization": f"Bearer {token}"}
    cached = Authenticator(verifier=TokenVerifier(key=SECRET, issuer=ISSUER), client_cert_users=False)
    uncached = Authenticator(
        verifier=TokenVerifier(key=SECRET, issuer=ISSUER, cache_ttl_s=0), client_cert_users=False
    )
    authorizer = Authorizer(view, super_admins=["admin"])
    principal = cached.authenticate(md, None)
    info = HandleInfo(topic=Resource.topic("/default/t"), creator="user:demo-producer")
    icp = AuthInterceptor(
        authenticator=cached,
        authorizer=authorizer,
        resolve_handle=lambda h: info,
        stream_recheck_interval_s=0.5,
    )
    rule = RULES[PUBLISH]
    req = pb.PublishBatch(producer_id=42, batch_seq=1)
    gate = _Gate(icp, rule, principal)
    gate.check(req, force=True)

    def unary_call() -> None:
        who = icp.authenticator.authenticate(md, None)  # type: ignore[union-attr]
        g = _Gate(icp, icp.rules[PUBLISH], who)
        g.check(req, force=True)

    rows = [
        ("authenticate, cached token", _time_us(lambda: cached.authenticate(md, None), n)),
        ("authenticate, full HS256 check", _time_us(lambda: uncached.authenticate(md, None), n // 4)),
        (
            "authorize a topic",
            _time_us(
                lambda: authorizer.require(principal, Permission.PRODUCE, Resource.topic("/default/t")), n
            ),
        ),
        ("authorize a handle", _time_us(lambda: icp.authorize(principal, rule, Handle("producer", 42)), n)),
        ("unary call (authenticate + authorize a handle)", _time_us(unary_call, n)),
        ("stream message, same target", _time_us(lambda: gate.check(req), n)),
    ]
    plain = await _time_stream_us(n * 5, False, icp, gate, req)
    wrapped = await _time_stream_us(n * 5, True, icp, gate, req)
    await view.aclose()
    rows.append(("stream wrapper: extra per message", wrapped - plain))
    direct = await _stream_pair_us(n // 4, intercepted=False, token=token)
    via = await _stream_pair_us(n // 4, intercepted=True, token=token)
    rows.append(("client: bearer interceptors, per stream message", via - direct))
    width = max(len(name) for name, _ in rows)
    print(f"{'operation':<{width}}  us/op")
    for name, us in rows:
        print(f"{name:<{width}}  {us:6.2f}")
    print(
        f"(policy: {OTHER_BINDINGS + 1} bindings; stream iteration without the wrapper: {plain:.2f} us/message; "
        f"loopback stream pair without the client interceptors: {direct:.1f} us)"
    )


if __name__ == "__main__":
    main()
