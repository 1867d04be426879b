"""Wiring of the broker: etcd, registration, assignment watch, its gRPC servers, ordered shutdown.

Start-up: connect to etcd (bounded wait) -> bootstrap namespaces -> check the TLS files and
(with ``auth`` enabled) load the RBAC view -> bind the client port (TLS when configured) and,
with ``internal_listen_addr``, the internal listener (mTLS when TLS is configured) (the real
ports are needed for the registration) -> register on a lease (renewed from a thread of its own,
see ``membership.py``) -> list our assignments and
follow them -> start the cluster view (Discovery) -> serve -> announce readiness.

The two servers serve one API with one AuthInterceptor; the cluster's own services dial the
internal listener (registered as ``internal_addr``), where their client certificates are seen.
With an internal listener, ``BrokerStatsService`` (cluster_internal) is served there only.

Shutdown (stop event; SIGINT/SIGTERM from the CLI): refuse new producers/consumers -> the
servers stop accepting -> the registration says ``draining`` (no new placements) -> every topic is unloaded, so client streams end with UNAVAILABLE
(TopicNotOwned: clients look the topic up again) and health checks answer CLOSE -> reliable
topics write their cursors (fenced) and close their logs (pending commits finish) -> the
internal loops are cancelled -> with a WAL uploader, every reliable topic is flushed to object
storage -> ownership of every topic is released (fenced by epoch, recording where each reliable
log ends) ->
in-flight RPCs get ``shutdown_grace_s`` -> the registration lease is revoked -> etcd closed.

A crashed internal loop (including a reliable topic's dispatcher, cursor flusher or policy
watch), or a lost registration lease, stops the broker the same way (minus
the release when the lease is lost) and :func:`run` raises :class:`BrokerFailure`: the
process exits non-zero instead of staying half alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from danube_broker.config import BrokerConfig
from danube_broker.dead_letter_publisher import DeadLetterPublisher
from danube_broker.fd_limit import raise_fd_limit, segment_files_budget
from danube_broker.grpc_api import ConsumerApi, HealthApi, ProducerApi
from danube_broker.handoff import TopicMover
from danube_broker.load_reporter import LoadReporter
from danube_broker.membership import Membership
from danube_broker.metrics import BrokerCollector, BrokerEvents, LeaseCollector, RuntimeCollector
from danube_broker.ns_limits import NamespaceLimits
from danube_broker.registry import BrokerRegistry
from danube_broker.schema_gate import SchemaGate
from danube_broker.stats_api import BrokerStatsApi
from danube_broker.takeover import close_orphaned_stints
from danube_broker.tiering import Tiering
from danube_broker.wal import CommitGroup
from danube_broker.wal.journal import JournalWriter
from danube_broker.wal.syncfs import CommitSync, filesystem_flush
from danube_common import gc_tuning
from danube_common.aio import cancel_and_wait
from danube_common.cluster_view import ClusterView
from danube_common.discovery import DiscoveryServicer
from danube_common.errors import DanubeError
from danube_common.grpc_util import install_stop_signals
from danube_common.keys import Keys
from danube_common.leadership import read_leaders
from danube_common.load_history import LoadHistoryWriter
from danube_common.metadata.etcd import EtcdKeepalive, EtcdStore
from danube_common.metadata.lease import KeepaliveClientFactory, KeptLease, RenewalTiming
from danube_common.namespace_view import NamespaceView
from danube_common.observability.http import HttpEndpoint
from danube_common.observability.metrics import new_registry
from danube_common.pb import DanubeAdmin_pb2_grpc as admin_grpc
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.records import BrokerRecord, now_ms
from danube_common.resources import Resources
from danube_common.schema_store import SchemaStore
from danube_common.schema_view import SchemaView
from danube_common.security.rules import HandleResolver
from danube_common.service import (
    ServiceFailure,
    ServiceReady,
    ServiceSecurity,
    internal_credentials,
    remove_ready_file,
    start_http,
    start_security,
    wait_for_stop,
    write_ready_file,
)
from danube_common.service import running as service_running
from danube_common.wal.journal import journal_dir

log = logging.getLogger(__name__)


class BrokerFailure(ServiceFailure):
    """The broker stopped because something it depends on failed (not because it was asked to)."""


async def _sweep_forever(registry: BrokerRegistry, interval_s: float) -> NoReturn:
    while True:
        await asyncio.sleep(interval_s)
        registry.sweep()


@dataclass(slots=True)
class Listeners:
    """The broker's gRPC servers: the client port, and the optional internal listener."""

    client: Any
    #: Advertised host:port of the client port.
    addr: str
    internal: Any | None = None
    #: Advertised host:port of the internal listener; "" without one.
    internal_addr: str = ""

    @property
    def servers(self) -> list[Any]:
        return [s for s in (self.client, self.internal) if s is not None]

    def add_servicers(self, add: Callable[[Any], None], *, internal_only: bool = False) -> None:
        """Register on every server (``internal_only``: on the internal listener when there is
        one, else on the client port)."""
        if internal_only and self.internal is not None:
            add(self.internal)
            return
        for server in self.servers:
            add(server)

    async def start(self) -> None:
        for server in self.servers:
            await server.start()

    async def stop(self, grace_s: float) -> None:
        await asyncio.gather(*(server.stop(grace_s) for server in self.servers))


def bind_listeners(cfg: BrokerConfig, security: ServiceSecurity) -> Listeners:
    """Build and bind the servers (ConfigError for unusable TLS files, OSError for a port in
    use); log a WARNING when the cluster's services will not be able to call this broker."""
    server = security.new_server()
    listeners = Listeners(server, cfg.advertised_addr(security.bind(server, cfg.listen_addr)))
    if cfg.internal_listen_addr is not None:
        internal = security.new_server()
        port = security.bind(internal, cfg.internal_listen_addr, tls=cfg.internal_tls)
        listeners.internal, listeners.internal_addr = internal, cfg.internal_advertised_addr(port)
    warning = cfg.internal_calls_warning()
    if warning is not None:
        log.warning("%s", warning)
    return listeners


def handle_resolver(registry: BrokerRegistry) -> HandleResolver:
    """Producer/consumer id -> its topic and creator, for the RBAC of id-only calls
    (SendMessage, ReceiveMessages, Seek, ...); None for an id not attached here (the servicer
    answers NOT_FOUND)."""
    return registry.handle_info


async def run(
    cfg: BrokerConfig,
    *,
    ready: Callable[[ServiceReady], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (default: until SIGINT/SIGTERM); raise BrokerFailure on a crash."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    fd_soft_limit, _ = raise_fd_limit()
    store = EtcdStore.from_config(cfg.etcd)
    try:
        await store.wait_ready(cfg.etcd.connect_timeout_s)
        resources = Resources(store, Keys(cfg.etcd.cluster))
        for ns in cfg.bootstrap_namespaces:
            if await resources.create_namespace(ns, exist_ok=True):
                log.info("created bootstrap namespace %s", ns)
        # Object storage and the WAL uploader (None: neither configured). A missing bucket or an
        # unreachable endpoint stops the start here, before anything is served.
        security = await start_security(cfg, store, resources.keys)
        tiering: Tiering | None = None
        http: HttpEndpoint | None = None
        commit_group: CommitGroup | None = None
        try:
            tiering = await Tiering.open(cfg, resources)
            listeners = bind_listeners(cfg, security)
            metrics = new_registry()
            events = BrokerEvents(metrics)
            registry = BrokerRegistry(cfg, resources, broker_url=f"http://{listeners.addr}", events=events)
            metrics.register(BrokerCollector(registry, max_topics=cfg.metrics.max_topics))
            if cfg.wal.shared_commit:  # one commit scheduler for every topic's WAL; closed last
                journal = (
                    await asyncio.to_thread(
                        JournalWriter.open,
                        cfg.data_path,
                        flush_filesystem=filesystem_flush(cfg.data_path),
                        max_bytes=cfg.wal.journal_max_bytes,
                        checkpoint_s=cfg.wal.journal_checkpoint_s,
                    )
                    if cfg.wal.commit_sync is CommitSync.JOURNAL
                    else None
                )
                commit_group = CommitGroup(
                    journal=journal,
                    max_round_bytes=cfg.wal.max_round_bytes,
                    fsync_threads=cfg.wal.commit_fsync_threads,
                    commit_sync=cfg.wal.commit_sync,
                    loop_write_bytes=cfg.wal.round_loop_write_bytes,
                    cache_budget_bytes=cfg.wal.tail_cache_total_bytes,
                    idle_close_s=cfg.wal.idle_fd_close_s,
                    max_open_files=cfg.wal.max_open_segment_files or segment_files_budget(fd_soft_limit),
                    observer=events,
                    on_failure=registry.tasks.report_failure,
                )
                registry.reliable.commit_group = commit_group
                log.info(
                    "WAL commit rounds are flushed per %s",
                    {
                        CommitSync.FILESYSTEM: "file system (one syncfs)",
                        CommitSync.JOURNAL: f"commit journal ({journal_dir(cfg.data_path)}, one fdatasync)",
                    }.get(commit_group.commit_sync, "file (fdatasync)"),
                )
            metrics.register(RuntimeCollector(asyncio.get_running_loop(), store))
            metrics.register(LeaseCollector(lambda: registry.reliable.lease))
            http = await start_http(
                cfg, security, metrics, service="broker", advertised_host=cfg.advertised_host
            )
            if security.interceptor is not None:  # before serving: id-only calls resolve here
                security.interceptor.resolve_handle = handle_resolver(registry)
                registry.takeover_check = security.interceptor.check_takeover
            if tiering is not None:
                registry.set_tiering(tiering)
            await _serve(
                cfg,
                resources,
                listeners,
                registry,
                ready=ready,
                stop=stop,
                tiering=tiering,
                security=security,
                http=http,
            )
        finally:
            if commit_group is not None:  # after _serve closed the topics' logs
                await commit_group.aclose()
            if http is not None:
                await http.aclose()
            if tiering is not None:
                await tiering.aclose()
            await security.aclose()
    finally:
        await store.aclose()
        if cfg.ready_file:
            remove_ready_file(cfg.ready_file)
    log.info("broker %s stopped", cfg.broker_id)


def _renewal_client(cfg: BrokerConfig) -> KeepaliveClientFactory:
    """The registration lease's renewal thread's own etcd connection: the same endpoints and
    TLS as the broker's store, on a blocking channel (made on that thread); a renewal waits at
    most the broker's etcd deadline or the lease's attempt timeout, whichever is shorter."""
    attempt_s = RenewalTiming.of(cfg.registration_ttl_s, cfg.ack_margin_s).attempt_timeout_s
    timeout_s = min(cfg.etcd.request_timeout_s, attempt_s)
    return lambda: EtcdKeepalive.from_config(cfg.etcd, timeout_s=timeout_s)


async def _serve(
    cfg: BrokerConfig,
    resources: Resources,
    listeners: Listeners,
    registry: BrokerRegistry,
    *,
    ready: Callable[[ServiceReady], None] | None,
    stop: asyncio.Event,
    tiering: Tiering | None = None,
    security: ServiceSecurity | None = None,
    http: HttpEndpoint | None = None,
) -> None:
    membership = Membership(
        resources,
        registry,
        registration_ttl_s=cfg.registration_ttl_s,
        ack_margin_s=cfg.ack_margin_s,
        keepalive_client=_renewal_client(cfg) if cfg.registration_renewal_thread else None,
    )
    mover = TopicMover(
        registry, resources, move_timeout_s=cfg.move_timeout_s, tiering=tiering, events=registry.events
    )
    membership.mover = mover
    membership.events = registry.events
    view = ClusterView(resources)
    schemas = SchemaView(resources.store, resources.keys)
    namespaces = NamespaceView(resources.store, resources.keys)
    ns_limits = NamespaceLimits(namespaces, registry.topics, cfg, events=registry.events)
    registry.ns_limits = ns_limits
    namespaces.on_change = ns_limits.namespaces_changed
    discovery = DiscoveryServicer(
        resources, view, self_broker_id=cfg.broker_id, auto_create_topics=cfg.auto_create_topics
    )
    dead_letters = DeadLetterPublisher(
        registry,
        discovery.resolver.resolve_broker,
        rpc_timeout_s=cfg.etcd.request_timeout_s,
        credentials=internal_credentials(cfg),
    )
    registry.set_dead_letter(dead_letters)
    loops: dict[asyncio.Task[Any], str] = dict(security.loops()) if security is not None else {}
    history: LoadHistoryWriter | None = None
    lease: KeptLease | None = None
    failure: BrokerFailure | None = None
    served = False
    try:
        addr = listeners.addr
        record = BrokerRecord(
            cfg.broker_id,
            addr,
            registry.broker_url,
            "active",
            now_ms(),
            internal_addr=listeners.internal_addr,
        )
        # Namespace policies first: topics loaded from here on get their limits at once.
        await namespaces.start()
        if namespaces.task is not None:
            loops[namespaces.task] = "the namespace policy watch"
        loops[asyncio.create_task(ns_limits.run_expiry(), name="message-ttl")] = "the message TTL loop"
        lease = await membership.register(record)
        # From here on, nothing is acknowledged unless this lease is surely alive.
        registry.reliable.lease = lease
        registry.reliable.renewal_wait_s = cfg.ack_renewal_wait_s
        revision = await membership.load_assignments()
        # Topics we wrote before a crash and no longer own: record their log ends from our disk.
        await close_orphaned_stints(cfg, resources, owned=set(registry.topics))
        loops[asyncio.create_task(membership.follow_assignments(revision + 1), name="assignments")] = (
            "the assignment watch"
        )
        loops[asyncio.create_task(_sweep_forever(registry, cfg.sweep_interval_s), name="sweep")] = (
            "the expiry sweep"
        )
        if tiering is not None and tiering.objects is not None and cfg.load_history_flush_interval_s > 0:
            history = LoadHistoryWriter(
                tiering.objects,
                flush_interval_s=cfg.load_history_flush_interval_s,
                max_batch=max(1, int(cfg.load_history_flush_interval_s / cfg.load_report_interval_s)),
            ).start()
        reporter = LoadReporter(
            registry,
            resources.store,
            resources.keys,
            lease_id=lambda: lease.lease_id if lease is not None else 0,
            interval_s=cfg.load_report_interval_s,
            max_topics=cfg.load_report_max_topics,
            history=history,
            full_refresh_every=max(1, round(cfg.load_report_full_refresh_s / cfg.load_report_interval_s)),
        )
        await reporter.publish()
        loops[asyncio.create_task(reporter.run(), name="load-report")] = "the load reporter"
        await view.start()
        await schemas.start()
        registry.schemas = SchemaGate(schemas, SchemaStore(resources.store, resources.keys))
        for task, what in (
            (view.task, "the cluster view watch"),
            (schemas.task, "the schema registry watch"),
            (lease.task, "the lease keep-alive"),
        ):
            if task is not None:
                loops[task] = what

        producers, consumers = ProducerApi(registry, cfg), ConsumerApi(registry, cfg)
        health, stats = HealthApi(registry), BrokerStatsApi(registry, resources, cfg)
        listeners.add_servicers(lambda s: pb_grpc.add_ProducerServiceServicer_to_server(producers, s))
        listeners.add_servicers(lambda s: pb_grpc.add_ConsumerServiceServicer_to_server(consumers, s))
        listeners.add_servicers(lambda s: pb_grpc.add_HealthCheckServicer_to_server(health, s))
        listeners.add_servicers(lambda s: pb_grpc.add_DiscoveryServicer_to_server(discovery, s))
        # cluster_internal: where its callers' certificates are seen.
        listeners.add_servicers(
            lambda s: admin_grpc.add_BrokerStatsServiceServicer_to_server(stats, s), internal_only=True
        )
        await listeners.start()
        served = True
        extra: dict[str, Any] = {"broker_id": cfg.broker_id}
        if listeners.internal_addr:
            extra["internal_addr"] = listeners.internal_addr
        info = ServiceReady("broker", addr, os.getpid(), extra, live=registry).with_http(http)
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
        gc_tuning.serving(cfg.gc)
        log.info(
            "broker %s serving on %s (listen %s%s, cluster %s, etcd %s)",
            cfg.broker_id,
            info.url,
            cfg.listen_addr,
            f"; internal listener {listeners.internal_addr}" if listeners.internal_addr else "",
            cfg.etcd.cluster,
            ",".join(cfg.etcd.endpoints),
        )
        if ready is not None:
            ready(info)
        failure = await _wait_for_stop(stop, lease, loops, registry)
    finally:
        await mover.aclose()
        if history is not None:
            await history.aclose()  # a last flush of the buffered reports
        await _shutdown(
            cfg,
            resources,
            listeners,
            registry,
            membership,
            view,
            lease,
            loops,
            served=served,
            tiering=tiering,
        )
        await dead_letters.aclose()
        await schemas.aclose()
        await namespaces.aclose()
    if failure is not None:
        raise failure


async def _wait_for_stop(
    stop: asyncio.Event, lease: KeptLease, loops: dict[asyncio.Task[Any], str], registry: BrokerRegistry
) -> BrokerFailure | None:
    """None when asked to stop; else why the broker must stop (its lease lost, a topic or a loop
    crashed)."""
    lost, crashed = "the registration lease", "a topic"
    ended = await wait_for_stop(stop, loops, conditions={lease.lost: lost, registry.tasks.failed: crashed})
    if ended is None:
        return None
    if ended.what == lost:
        log.error("the registration lease was lost: this broker can no longer claim its topics; stopping")
        return BrokerFailure(
            "registration lease lost (etcd unreachable for a whole TTL, or the lease expired)"
        )
    if ended.what == crashed:
        failure = BrokerFailure(str(registry.tasks.failure))
        failure.__cause__ = registry.tasks.failure
        return failure
    failure = BrokerFailure(str(ended))
    failure.__cause__ = ended.error
    return failure


async def _shutdown(
    cfg: BrokerConfig,
    resources: Resources,
    listeners: Listeners,
    registry: BrokerRegistry,
    membership: Membership,
    view: ClusterView,
    lease: KeptLease | None,
    loops: dict[asyncio.Task[Any], str],
    *,
    served: bool,
    tiering: Tiering | None = None,
) -> None:
    try:
        await membership.mark_draining()
    except DanubeError as exc:
        log.warning("could not mark broker %s draining: %s", cfg.broker_id, exc)
    if served and lease is not None and not lease.lost.is_set():
        await _lame_duck(cfg, resources, registry)
    registry.begin_shutdown()
    server_stop = asyncio.create_task(listeners.stop(cfg.shutdown_grace_s), name="server-stop")
    # Taken before closing: a closed topic lets go of its reliable part.
    reliables = {name: t.reliable for name, t in registry.topics.items() if t.reliable is not None}
    held = registry.close_all("the broker is shutting down")
    # Reliable topics: dispatch stopped; cursors written and logs closed before ownership goes.
    await registry.wait_closed()
    log_ends = {name: rt.local.next_offset for name, rt in reliables.items()}
    closes = {
        name: close
        for name, rt in reliables.items()
        if (close := rt.close_txn(rt.local.next_offset, "release")) is not None
    }
    own_loops = [
        t
        for t, what in loops.items()
        if what in ("the assignment watch", "the expiry sweep", "the load reporter", "the message TTL loop")
    ]
    await cancel_and_wait(*own_loops)
    lease_ok = lease is not None and not lease.lost.is_set()
    if lease_ok and tiering is not None:
        # Before releasing: the next owners read everything written here from object storage.
        await tiering.flush_all(log_ends)
    if lease_ok:
        try:
            await membership.release_all(held, closes)
        except DanubeError as exc:
            log.warning("could not release topic ownership (peers take over after the lease TTL): %s", exc)
    await server_stop
    await view.aclose()
    if lease is not None:
        await lease.aclose(revoke=lease_ok)
        if lease_ok:
            log.info("registration of broker %s revoked", cfg.broker_id)
    if served:
        log.info("broker %s: all client streams ended", cfg.broker_id)


async def _lame_duck(cfg: BrokerConfig, resources: Resources, registry: BrokerRegistry) -> None:
    """Keep serving while the load manager moves our topics away (we said ``draining``), until
    none is left or ``lame_duck_timeout_s`` passes. Skipped without a leading load manager."""
    if cfg.lame_duck_timeout_s <= 0 or not registry.topics:
        return
    try:
        leading = LOAD_MANAGER_ROLE in await read_leaders(resources.store, resources.keys)
    except DanubeError:
        leading = False
    if not leading:
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    before = len(registry.topics)
    log.info(
        "lame duck: %d topic(s) are being handed to other brokers (at most %.0fs)",
        before,
        cfg.lame_duck_timeout_s,
    )
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(cfg.lame_duck_timeout_s):
            await registry.no_topics.wait()
    log.info(
        "lame duck over after %.1fs: %d of %d topic(s) handed over; releasing the rest",
        loop.time() - start,
        before - len(registry.topics),
        before,
    )


@contextlib.asynccontextmanager
async def running(cfg: BrokerConfig) -> AsyncIterator[ServiceReady]:
    """Run the service in this event loop for the duration of the block (embedding, tests)."""
    async with service_running(run, cfg, name=f"broker-{cfg.broker_id}") as info:
        yield info
