"""Wiring of the lookup service: etcd, the cluster view, two gRPC servers, ordered shutdown.

Start-up: connect to etcd (bounded wait), create the bootstrap namespaces, check the TLS files
and (with ``auth`` enabled) load the RBAC view, load the cluster view and the schema registry view and follow their watches, bind both ports (the schema
registry is served on both), start serving, start the HTTP endpoint (``/metrics``, and the web
console with its loopback channel to the admin port), then announce readiness (callback
and/or ready file). Shutdown (stop event, SIGINT/SIGTERM from ``__main__``): remove the ready
file, close the HTTP endpoint and the console's channel, stop both servers (in-flight RPCs get ``shutdown_grace_s``), stop the view, close etcd.
The service keeps no state of its own, so a crash at any point loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

import grpc.aio

from danube_common import gc_tuning
from danube_common.cluster_view import ClusterView
from danube_common.discovery import DiscoveryServicer
from danube_common.grpc_util import install_stop_signals
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.observability.metrics import new_registry
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.resources import Resources
from danube_common.schema_store import SchemaStore
from danube_common.schema_view import SchemaView
from danube_common.security import SecurityStore
from danube_common.service import (
    ServiceFailure,
    ServiceReady,
    internal_credentials,
    remove_ready_file,
    start_http,
    start_security,
    wait_for_stop,
    write_ready_file,
)
from danube_common.service import running as service_running
from danube_lookup.admin_api import BrokerAdminApi, ClusterAdminApi, NamespaceAdminApi, TopicAdminApi
from danube_lookup.broker_stats import BrokerStatsClient
from danube_lookup.catalog import Catalog
from danube_lookup.config import LookupConfig
from danube_lookup.console import Console
from danube_lookup.metrics import LookupCollector
from danube_lookup.schema_api import SchemaRegistryApi
from danube_lookup.security_api import SecurityAdminApi

log = logging.getLogger(__name__)


async def run(
    cfg: LookupConfig,
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
        resources = Resources(store, Keys(cfg.etcd.cluster))
        for ns in cfg.bootstrap_namespaces:
            if await resources.create_namespace(ns, exist_ok=True):
                log.info("created bootstrap namespace %s", ns)

        security = await start_security(cfg, store, resources.keys)
        stack.push_async_callback(security.aclose)
        view = ClusterView(resources)
        await view.start()
        stack.push_async_callback(view.aclose)
        schemas = SchemaView(store, resources.keys)
        await schemas.start()
        stack.push_async_callback(schemas.aclose)
        registry = SchemaRegistryApi(SchemaStore(store, resources.keys), schemas)

        client_server = security.new_server()
        discovery = DiscoveryServicer(resources, view, auto_create_topics=cfg.auto_create_topics)
        pb_grpc.add_DiscoveryServicer_to_server(discovery, client_server)
        spb_grpc.add_SchemaRegistryServicer_to_server(registry, client_server)
        port = security.bind(client_server, cfg.listen_addr)
        catalog = Catalog(resources, discovery.resolver)
        stats = BrokerStatsClient(
            resources,
            rpc_timeout_s=cfg.broker_rpc_timeout_s,
            compaction_timeout_s=cfg.compaction_rpc_timeout_s,
            credentials=internal_credentials(cfg),
        )
        stack.push_async_callback(stats.aclose)  # closed after the servers stop (LIFO)
        admin_server = security.new_server()
        apb_grpc.add_BrokerAdminServicer_to_server(BrokerAdminApi(catalog), admin_server)
        apb_grpc.add_NamespaceAdminServicer_to_server(NamespaceAdminApi(catalog), admin_server)
        apb_grpc.add_TopicAdminServicer_to_server(TopicAdminApi(catalog, stats), admin_server)
        apb_grpc.add_ClusterAdminServicer_to_server(ClusterAdminApi(catalog), admin_server)
        spb_grpc.add_SchemaRegistryServicer_to_server(registry, admin_server)
        apb_grpc.add_SecurityAdminServicer_to_server(
            SecurityAdminApi(SecurityStore(store, resources.keys), security.view), admin_server
        )
        admin_port = security.bind(admin_server, cfg.admin_listen_addr)

        async def stop_servers(*servers: grpc.aio.Server) -> None:
            log.info("stopping (grace %.1fs)", cfg.shutdown_grace_s)
            await asyncio.gather(*(s.stop(cfg.shutdown_grace_s) for s in servers))

        stack.push_async_callback(stop_servers, client_server, admin_server)
        await client_server.start()
        await admin_server.start()
        metrics = new_registry()
        metrics.register(LookupCollector(discovery.resolver))
        console = Console.open(cfg, admin_port) if cfg.http_listen_addr and cfg.console.enabled else None
        if console is not None:
            stack.push_async_callback(console.aclose)  # after the HTTP endpoint (LIFO)
        http = await start_http(
            cfg,
            security,
            metrics,
            service="lookup",
            advertised_host=cfg.advertised_host,
            routes=console.routes() if console is not None else (),
        )
        if http is not None:
            stack.push_async_callback(http.aclose)

        info = ServiceReady(
            "lookup",
            f"{cfg.advertised_host}:{port}",
            os.getpid(),
            admin_addr=f"{cfg.advertised_host}:{admin_port}",
        ).with_http(http)
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
            stack.callback(remove_ready_file, cfg.ready_file)
        gc_tuning.serving(cfg.gc)
        log.info(
            "lookup serving: discovery on %s, admin on %s (cluster %s, etcd %s)",
            info.addr,
            info.admin_addr,
            cfg.etcd.cluster,
            ",".join(cfg.etcd.endpoints),
        )
        if ready is not None:
            ready(info)
        ended = await wait_for_stop(
            stop,
            {
                view.task: "the cluster view's watch",
                schemas.task: "the schema registry's watch",
                **security.loops(),
            },
        )
        if ended is not None:
            raise ServiceFailure(str(ended)) from ended.error
    log.info("lookup stopped")


@contextlib.asynccontextmanager
async def running(cfg: LookupConfig) -> AsyncIterator[ServiceReady]:
    """Run the service in this event loop for the duration of the block (embedding, tests)."""
    async with service_running(run, cfg, name="lookup") as info:
        yield info
