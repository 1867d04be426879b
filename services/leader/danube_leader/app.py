"""Wiring of the leader service: etcd, the elections, one gRPC server, ordered shutdown.

Start-up: connect to etcd (bounded wait), check the TLS files and (with ``auth`` enabled) load
the RBAC view, bind the port (TLS when configured), start serving, then announce
readiness (callback and/or ready file). Shutdown (stop event, SIGINT/SIGTERM from
``__main__``): remove the ready file; refuse new streams and end every campaign (LOST, then
its lease is revoked so the next candidate is elected at once) and watch, within
``shutdown_grace_s``; stop the server (in-flight RPCs get ``shutdown_grace_s``); close etcd.
The service keeps no state of its own: a crash loses nothing but the campaigns it carried,
whose leases then expire within their TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

import grpc.aio

from danube_common import gc_tuning
from danube_common.grpc_util import SERVER_OPTIONS, install_stop_signals
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.observability.metrics import new_registry
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc
from danube_common.service import (
    ServiceFailure,
    ServiceReady,
    ServiceSecurity,
    remove_ready_file,
    start_http,
    start_security,
    wait_for_stop,
    write_ready_file,
)
from danube_common.service import running as service_running
from danube_leader.config import LeaderConfig
from danube_leader.election import Elections
from danube_leader.grpc_api import LeaderElectionApi
from danube_leader.metrics import LeaderCollector

log = logging.getLogger(__name__)


def _new_server(cfg: LeaderConfig, security: ServiceSecurity) -> grpc.aio.Server:
    """The common server, plus keep-alive pings towards clients: a frozen or vanished
    candidate's connection is dropped, which ends its campaigns and revokes their leases."""
    options = [
        *SERVER_OPTIONS,
        ("grpc.keepalive_time_ms", int(cfg.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(cfg.keepalive_timeout_s * 1000)),
        # grpc-core times a ping out after this (default 60 s), whatever keepalive_timeout_ms says.
        ("grpc.http2.ping_timeout_ms", int(cfg.keepalive_timeout_s * 1000)),
        ("grpc.http2.max_pings_without_data", 0),  # keep pinging idle WatchLeader streams
    ]
    return security.new_server(options=options)


async def run(
    cfg: LeaderConfig,
    *,
    ready: Callable[[ServiceReady], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (default: until SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    async with contextlib.AsyncExitStack() as stack:
        store = EtcdStore.from_config(cfg.etcd)
        stack.push_async_callback(store.aclose)
        await store.wait_ready(cfg.etcd.connect_timeout_s)
        security = await start_security(cfg, store, Keys(cfg.etcd.cluster))
        stack.push_async_callback(security.aclose)

        elections = Elections(
            store,
            Keys(cfg.etcd.cluster),
            default_ttl_s=cfg.default_ttl_s,
            min_ttl_s=cfg.min_ttl_s,
            max_ttl_s=cfg.max_ttl_s,
            heartbeat_interval_s=cfg.heartbeat_interval_s,
            max_streams=cfg.max_streams,
            max_metadata_bytes=cfg.max_metadata_bytes,
        )
        server = _new_server(cfg, security)
        lpb_grpc.add_LeaderElectionServicer_to_server(LeaderElectionApi(elections), server)
        port = security.bind(server, cfg.listen_addr)

        async def shutdown() -> None:
            log.info("stopping: ending %d campaigns (leases revoked)", len(elections.campaigns))
            await elections.aclose(timeout_s=cfg.shutdown_grace_s)
            await server.stop(cfg.shutdown_grace_s)
            # RPCs cancelled by the stop have resigned; let their loops revoke before etcd closes.
            await elections.aclose(timeout_s=cfg.shutdown_grace_s)

        stack.push_async_callback(shutdown)
        await server.start()
        metrics = new_registry()
        metrics.register(LeaderCollector(elections, max_roles=cfg.metrics.max_topics))
        http = await start_http(cfg, security, metrics, service="leader", advertised_host=cfg.advertised_host)
        if http is not None:
            stack.push_async_callback(http.aclose)

        info = ServiceReady("leader", f"{cfg.advertised_host}:{port}", os.getpid()).with_http(http)
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
            stack.callback(remove_ready_file, cfg.ready_file)
        gc_tuning.serving(cfg.gc)
        log.info(
            "leader election serving on %s (cluster %s, etcd %s)",
            info.addr,
            cfg.etcd.cluster,
            ",".join(cfg.etcd.endpoints),
        )
        if ready is not None:
            ready(info)
        ended = await wait_for_stop(stop, security.loops())
        if ended is not None:
            raise ServiceFailure(str(ended)) from ended.error
    log.info("leader service stopped")


@contextlib.asynccontextmanager
async def running(cfg: LeaderConfig) -> AsyncIterator[ServiceReady]:
    """Run the service in this event loop for the duration of the block (embedding, tests)."""
    async with service_running(run, cfg, name="leader") as info:
        yield info
