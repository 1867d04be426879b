"""Wiring of the planner: etcd, the object store, the engine, the ``spark-planner`` role, the loop.

The planner campaigns for the ``spark-planner`` role through the leader service. While it
leads, it runs a cycle (:mod:`danube_planner.cycle`) every ``interval_s``, and at once when a
request key appears under ``/{cluster}/rebalance/requests/``; every write is fenced by its
term, so a deposed planner (paused, partitioned) writes nothing. It keeps no state of its own:
a crash at any point loses nothing (the next leader reads everything from etcd and the object
store again), and a cycle cut short writes nothing (one transaction).

``--once``: one cycle, then exit. With a leader service it waits to be elected (at most
``election_timeout_s``) and fences as usual; with ``leader_endpoints: []`` it runs one cycle at
once, **unfenced** (for tests and operators; the log says so).

Planning for good (not ``--once``), it serves ``/metrics`` on ``http_listen_addr`` (with its
``tls``, and with ``auth`` a token holding ``lookup``): :mod:`danube_planner.metrics`.

Shutdown (stop event; SIGINT/SIGTERM): resign (a standby takes over at once), stop the engine
(the SparkSession), stop the HTTP endpoint, close the object store and etcd.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from danube_common.aio import cancel_and_wait
from danube_common.grpc_util import install_stop_signals
from danube_common.keys import Keys
from danube_common.leadership import Candidacy, Elector, Leadership
from danube_common.load_history import LoadHistoryReader
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import open_object_store
from danube_common.observability.http import HttpEndpoint
from danube_common.observability.metrics import new_registry
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
from danube_planner.config import PlannerConfig
from danube_planner.cycle import CycleResult, Engine, Planner, PythonEngine
from danube_planner.metrics import PlannerMetrics
from danube_planner.model import PLANNER_ROLE, AggregateParams, Aggregates, PlannerInputs

log = logging.getLogger(__name__)


class PlannerFailure(ServiceFailure):
    """The planner stopped because something it depends on failed."""


class SparkEngine:
    """The DataFrame path on a SparkSession (created in the constructor: blocking)."""

    name = "spark"

    def __init__(self, cfg: PlannerConfig) -> None:
        from danube_planner.history_fetch import HistorySource
        from danube_planner.sparkenv import create_session

        #: The cycle hands over history keys, not lines: the executors fetch the objects.
        self.fetches_history = cfg.spark.history_on_executors
        self._history = HistorySource(
            cfg.object_store,
            read_concurrency=cfg.history_read_concurrency,
            partitions=cfg.spark.history_partitions,
        )
        self._spark = create_session(cfg.spark)

    @property
    def session(self) -> Any:
        return self._spark

    def aggregate(self, inp: PlannerInputs, params: AggregateParams) -> Aggregates:
        from danube_planner.frames import aggregate_spark

        return aggregate_spark(self._spark, inp, params, self._history)

    def close(self) -> None:
        """Stop the Spark session. When the whole process group was signalled (danube-local, a
        container stop), the JVM may already be gone: that is a normal end, not an error."""
        try:
            self._spark.stop()
        except Exception as exc:  # py4j's network errors when the JVM exited first
            log.info("the Spark JVM was already gone at shutdown (%s)", type(exc).__name__)


def make_engine(cfg: PlannerConfig) -> Engine:
    """Blocking (a SparkSession takes seconds to start): call from a thread."""
    if cfg.engine == "python":
        return PythonEngine()
    return SparkEngine(cfg)


class RequestWatch:
    """Sets ``requested`` whenever a key is put under the requests prefix (owned task)."""

    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self._store = store
        self._prefix = keys.rebalance_requests_prefix()
        self.requested = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="planner-requests")

    async def _run(self) -> None:
        async for ev in self._store.watch_prefix(self._prefix):
            if ev.kind == "put":
                log.info("cycle requested (%s)", ev.key.rsplit("/", 1)[-1])
                self.requested.set()

    async def aclose(self) -> None:
        task, self.task = self.task, None
        err = await cancel_and_wait(task)
        if err is not None:
            raise err


async def serve_term(
    planner: Planner,
    lead: Leadership,
    *,
    interval_s: float,
    requests: RequestWatch,
    stop: asyncio.Event,
    metrics: PlannerMetrics | None = None,
) -> None:
    """Run cycles while ``lead`` holds: every ``interval_s``, or sooner on a request."""
    loop = asyncio.get_running_loop()
    while not lead.lost.is_set() and not stop.is_set():
        requests.requested.clear()
        start = loop.time()
        try:
            result = await planner.cycle(lead)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a failed cycle (etcd, object store, Spark): retry next time
            log.error("planner cycle failed: %s", exc, exc_info=not isinstance(exc, TimeoutError))
            if metrics is not None:
                metrics.cycle_failed(loop.time() - start)
        else:
            if metrics is not None:
                metrics.cycle_done(result, loop.time() - start)
        waits = {
            asyncio.ensure_future(lead.lost.wait()),
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(requests.requested.wait()),
        }
        try:
            await asyncio.wait(waits, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)


async def run(
    cfg: PlannerConfig,
    *,
    once: bool = False,
    ready: Callable[[ServiceReady], None] | None = None,
    stop: asyncio.Event | None = None,
    on_cycle: Callable[[CycleResult], None] | None = None,
) -> None:
    """Plan until ``stop`` (default: SIGINT/SIGTERM), or one cycle with ``once``."""
    if not once and not cfg.leader_endpoints:
        raise PlannerFailure(
            "no leader service configured (leader_endpoints is empty): only --once can run without one"
        )
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    keys = Keys(cfg.etcd.cluster)
    store = EtcdStore.from_config(cfg.etcd)
    objects = None
    engine: Engine | None = None
    elector: Elector | None = None
    candidacy: Candidacy | None = None
    security: ServiceSecurity | None = None
    http: HttpEndpoint | None = None
    metrics: PlannerMetrics | None = None
    requests = RequestWatch(store, keys)
    try:
        await store.wait_ready(cfg.etcd.connect_timeout_s)
        if not once:  # /metrics (with the service's TLS and auth) while planning for good
            security = await start_security(cfg, store, keys)
            registry = new_registry()
            metrics = PlannerMetrics(registry)
            http = await start_http(cfg, security, registry, service="planner")
        objects = await open_object_store(cfg.object_store)
        engine = await asyncio.to_thread(make_engine, cfg)
        planner = Planner(
            cfg,
            store,
            keys,
            LoadHistoryReader(objects, read_concurrency=cfg.history_read_concurrency),
            engine,
        )
        info = ServiceReady(
            "planner", "", os.getpid(), {"candidate_id": cfg.candidate_id, "engine": engine.name}
        ).with_http(http)
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
        if ready is not None:
            ready(info)
        if not cfg.leader_endpoints:
            log.warning(
                "no leader service configured: running one cycle WITHOUT fencing (writes are not "
                "guarded by a planner term; do not run two planners like this)"
            )
            result = await planner.cycle(None)
            if on_cycle is not None:
                on_cycle(result)
            return
        elector = Elector(
            cfg.leader_endpoints,
            rpc_timeout_s=cfg.leader_rpc_timeout_s,
            heartbeat_deadline_s=cfg.leader_heartbeat_deadline_s,
            credentials=internal_credentials(cfg),
        )
        candidacy = elector.campaign(PLANNER_ROLE, candidate_id=cfg.candidate_id, ttl_s=cfg.leadership_ttl_s)
        log.info(
            "planner %s campaigning for %s (leader service %s, engine %s)",
            cfg.candidate_id,
            PLANNER_ROLE,
            ",".join(cfg.leader_endpoints),
            engine.name,
        )
        if once:
            lead = await _first_term(candidacy, stop, cfg.election_timeout_s)
            if lead is None:
                return
            result = await planner.cycle(lead)
            if on_cycle is not None:
                on_cycle(result)
            return
        requests.start()
        await _lead_until_stop(cfg, planner, candidacy, requests, stop, metrics=metrics, security=security)
    finally:
        if candidacy is not None:
            await candidacy.aclose()  # resign: a standby takes over at once
        if elector is not None:
            await elector.aclose()
        await requests.aclose()
        if http is not None:
            await http.aclose()
        if security is not None:
            await security.aclose()
        if engine is not None:
            await asyncio.to_thread(engine.close)
        if objects is not None:
            await objects.aclose()
        await store.aclose()
        if cfg.ready_file:
            remove_ready_file(cfg.ready_file)
    log.info("planner %s stopped", cfg.candidate_id)


async def _first_term(candidacy: Candidacy, stop: asyncio.Event, timeout_s: float) -> Leadership | None:
    elected = asyncio.ensure_future(anext(candidacy))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {elected, stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for f in (elected, stopped):
            f.cancel()
    if elected in done and not elected.cancelled():
        return elected.result()
    if stopped in done:
        return None
    raise PlannerFailure(
        f"not elected {PLANNER_ROLE} within {timeout_s:.0f}s: another planner leads, or the leader "
        "service is unreachable"
    )


async def _lead_until_stop(
    cfg: PlannerConfig,
    planner: Planner,
    candidacy: Candidacy,
    requests: RequestWatch,
    stop: asyncio.Event,
    *,
    metrics: PlannerMetrics | None = None,
    security: ServiceSecurity | None = None,
) -> None:
    async def follow() -> None:
        async for lead in candidacy:
            log.info("leading %s (term %d)", PLANNER_ROLE, lead.term)
            if metrics is not None:
                metrics.term_started(lead.term)
            try:
                await serve_term(
                    planner, lead, interval_s=cfg.interval_s, requests=requests, stop=stop, metrics=metrics
                )
            finally:
                if metrics is not None:
                    metrics.term_ended()
            if not stop.is_set():
                log.warning("term %d is over: no longer planning", lead.term)

    loop = asyncio.create_task(follow(), name="planner-loop")
    loops: dict[asyncio.Task[None] | None, str] = {
        loop: "the planning loop",
        requests.task: "the request watch",
    }
    if security is not None:
        loops |= {task: what for task, what in security.loops().items()}
    try:
        ended = await wait_for_stop(stop, loops)
    finally:
        await cancel_and_wait(loop)
    if ended is not None:
        raise PlannerFailure(str(ended)) from ended.error
