"""Wiring of the load manager: etcd, the cluster view, the campaign, the planning loop, status API.

Every replica follows the cluster (``ControlView``) and campaigns for the ``load-manager`` role
through the leader service. Only while it holds the role does it act: each pass plans from the
view (:mod:`decide`) and applies the actions as transactions fenced by its term (:mod:`actions`),
then waits for the view to show its own writes and for the next change (or
``reconcile_interval_s``). When the term ends (``lost``), the loop stops acting at once and the
replica campaigns again; a deposed replica's in-flight writes are refused by the fence.

Shutdown (stop event; SIGINT/SIGTERM): resign (the campaign stream is cancelled and the leader
service revokes the lease, so a standby takes over at once), stop the status server, stop the
view, close etcd. The load manager keeps no state of its own: a crash at any point loses nothing
(a standby re-derives everything from etcd).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import grpc.aio

from danube_common import gc_tuning
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.grpc_util import install_stop_signals
from danube_common.keys import Keys
from danube_common.leadership import Candidacy, Elector, Leadership
from danube_common.metadata.etcd import EtcdStore
from danube_common.observability.http import HttpEndpoint
from danube_common.observability.metrics import new_registry
from danube_common.pb import DanubeLoadManager_pb2 as lmpb
from danube_common.pb import DanubeLoadManager_pb2_grpc as lmpb_grpc
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.records import now_ms as now_wall_ms
from danube_common.resources import Resources
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
from danube_load_manager import spans
from danube_load_manager.actions import Executor
from danube_load_manager.config import LoadManagerConfig
from danube_load_manager.decide import Action, Limits, Move, Snapshot, next_actions
from danube_load_manager.metrics import ACTION_KINDS, LoadManagerCollector
from danube_load_manager.rebalance_plans import mark_started, newly_settled, settle
from danube_load_manager.view import ControlView

log = logging.getLogger(__name__)


class LoadManagerFailure(ServiceFailure):
    """The load manager stopped because something it depends on failed."""


class LoadManager:
    """The planning loop, run while this replica leads."""

    def __init__(self, cfg: LoadManagerConfig, resources: Resources, view: ControlView) -> None:
        self._cfg = cfg
        self._view = view
        self._executor = Executor(resources, candidate_id=cfg.candidate_id)
        self._limits = Limits(
            max_moves_in_flight=cfg.max_moves_in_flight,
            move_cooldown_s=cfg.move_cooldown_s,
            weights=cfg.weights,
        )
        self._last_move_s: dict[str, float] = {}
        self.leading = False
        self.term = 0
        self.elections = 0
        self.passes = 0
        self.applied = 0
        self.refused = 0
        #: (action kind, "applied" | "refused") -> count, for metrics.
        self.actions: dict[tuple[str, str], int] = {}
        #: Move outcome -> count: "started" (every move begun), and the plans' "done",
        #: "failed" and "skipped" moves as recorded.
        self.moves: dict[str, int] = {}

    async def follow(self, candidacy: Candidacy) -> None:
        """Act during each term this candidacy wins, until the candidacy ends."""
        async for lead in candidacy:
            self.elections += 1
            self.term = lead.term
            self.leading = True
            log.info(
                "leading as %s (term %d, via leader replica %s)", lead.candidate_id, lead.term, lead.replica
            )
            try:
                await self._manage(lead)
            finally:
                self.leading = False
                log.warning("term %d is over: no longer acting as the load manager", lead.term)

    async def _manage(self, lead: Leadership) -> None:
        loop = asyncio.get_running_loop()
        lost = asyncio.create_task(lead.lost.wait(), name="leadership-lost")
        try:
            while not lead.lost.is_set():
                await self._idle(lead, lost, await self._pass(lead, loop.time()))
        finally:
            # A cancellation of this task arriving meanwhile ends it (suppress would swallow it).
            exc = await cancel_and_wait(lost)
            if exc is not None:
                raise exc

    async def _idle(self, lead: Leadership, lost: asyncio.Task[bool], wrote: int) -> None:
        """After a pass: let the view catch up with our own writes (``wrote``: the highest
        revision written), then wait for the next change, the interval, or the end of the term."""
        view, interval = self._view, self._cfg.reconcile_interval_s
        if wrote:
            await view.wait_for(lambda: lead.lost.is_set() or view.revision >= wrote, interval)
        seen = view.revision
        changed = asyncio.ensure_future(view.wait_for(lambda: view.revision > seen, interval))
        try:
            await asyncio.wait({changed, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Not suppress(CancelledError): a cancellation of this task arriving meanwhile would
            # be swallowed, and _manage would start another pass instead of ending.
            exc = await cancel_and_wait(changed)
            if exc is not None:
                raise exc

    async def _pass(self, lead: Leadership, now_s: float) -> int:
        """One planning pass; returns the highest revision written (0: nothing applied)."""
        self.passes += 1
        snap = self._view.snapshot()
        now_ms = now_wall_ms()
        actions = next_actions(
            snap, now_s=now_s, last_move_s=self._last_move_s, limits=self._limits, now_ms=now_ms
        )
        wrote = 0
        started: dict[str, list[int]] = {}
        for action in actions:
            if lead.lost.is_set():
                break
            try:
                with spans.applying(
                    action, snap, term=lead.term, candidate_id=self._cfg.candidate_id
                ) as span:
                    out = await self._executor.apply(action, fence=lead.fence(), term=lead.term)
                    spans.finish(span, out)
            except DanubeError as exc:
                log.warning("could not apply %s: %s", action, exc)
                self.refused += 1
                self._count(action, "refused")
                continue
            self._count(action, "applied" if out.applied else "refused")
            if out.applied:
                self.applied += 1
                wrote = max(wrote, out.revision)
                if isinstance(action, Move):
                    self.moves["started"] = self.moves.get("started", 0) + 1
                    self._last_move_s[action.topic] = now_s
                    if action.plan is not None:
                        started.setdefault(action.plan[0], []).append(action.plan[1])
            else:
                self.refused += 1
                log.debug("refused by etcd (stale view or term over): %s", action)
        wrote = max(wrote, await self._record_plans(lead, snap, started, now_ms))
        if len(self._last_move_s) > 100_000:  # forget cool-downs long past
            cutoff = now_s - self._limits.move_cooldown_s
            self._last_move_s = {t: at for t, at in self._last_move_s.items() if at >= cutoff}
        return wrote

    def _count(self, action: Action, result: str) -> None:
        key = (ACTION_KINDS[type(action)], result)
        self.actions[key] = self.actions.get(key, 0) + 1

    async def _record_plans(
        self, lead: Leadership, snap: Snapshot, started: dict[str, list[int]], now_ms: int
    ) -> int:
        """Bring every live plan's move statuses up to date (settled against this pass's snapshot,
        before the moves it just started are marked ``moving``) and write the changed ones."""
        wrote = 0
        active = snap.active_brokers()
        for plan_id, doc in snap.plans.items():
            if lead.lost.is_set():
                break
            settled = settle(doc, snap.owners, active, now_ms=now_ms)
            new = mark_started(settled or doc, started.get(plan_id, ()), now_ms=now_ms)
            if settled is None and plan_id not in started:
                continue
            try:
                rev = await self._executor.update_plan(
                    plan_id, snap.plan_revisions[plan_id], new, fence=lead.fence()
                )
            except DanubeError as exc:
                log.warning("could not record the progress of plan %s: %s", plan_id, exc)
                continue
            if rev:
                wrote = max(wrote, rev)
                for status, n in newly_settled(doc, new).items():
                    self.moves[status] = self.moves.get(status, 0) + n
                if new.get("status") == "done" and doc.get("status") != "done":
                    outcome = [f"{m.get('topic')}: {m.get('status')}" for m in new.get("moves") or []]
                    log.info("plan %s done: %s", plan_id, ", ".join(outcome) or "no moves")
        return wrote


class StatusApi(lmpb_grpc.LoadManagerStatusServicer):
    def __init__(self, cfg: LoadManagerConfig, manager: LoadManager, view: ControlView) -> None:
        self._cfg = cfg
        self._m = manager
        self._view = view

    async def GetStatus(
        self, request: lmpb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> lmpb.LoadManagerStatusResponse:
        m, v = self._m, self._view
        return lmpb.LoadManagerStatusResponse(
            candidate_id=self._cfg.candidate_id,
            leading=m.leading,
            term=m.term,
            passes=m.passes,
            actions_applied=m.applied,
            actions_refused=m.refused,
            brokers=len(v.brokers),
            topics=len(v.owners),
            moves_in_flight=len(v.moving),
            view_revision=v.revision,
            elections=m.elections,
        )


async def run(
    cfg: LoadManagerConfig,
    *,
    ready: Callable[[ServiceReady], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (default: until SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    store = EtcdStore.from_config(cfg.etcd)
    view = ControlView(store, Keys(cfg.etcd.cluster))
    elector = Elector(
        cfg.leader_endpoints,
        rpc_timeout_s=cfg.leader_rpc_timeout_s,
        heartbeat_deadline_s=cfg.leader_heartbeat_deadline_s,
        credentials=internal_credentials(cfg),
    )
    server: grpc.aio.Server | None = None
    http: HttpEndpoint | None = None
    security: ServiceSecurity | None = None
    candidacy: Candidacy | None = None
    follow: asyncio.Task[None] | None = None
    try:
        await store.wait_ready(cfg.etcd.connect_timeout_s)
        resources = Resources(store, Keys(cfg.etcd.cluster))
        security = await start_security(cfg, store, resources.keys)
        server = security.new_server()
        await view.start()
        manager = LoadManager(cfg, resources, view)
        lmpb_grpc.add_LoadManagerStatusServicer_to_server(StatusApi(cfg, manager, view), server)
        port = security.bind(server, cfg.listen_addr)
        await server.start()
        metrics = new_registry()
        metrics.register(LoadManagerCollector(manager, view))
        http = await start_http(
            cfg, security, metrics, service="load manager", advertised_host=cfg.advertised_host
        )
        addr = f"{cfg.advertised_host}:{port}"
        candidacy = elector.campaign(
            LOAD_MANAGER_ROLE,
            candidate_id=cfg.candidate_id,
            ttl_s=cfg.leadership_ttl_s,
            metadata={"addr": addr},
        )
        follow = asyncio.create_task(manager.follow(candidacy), name="load-manager")
        info = ServiceReady("load_manager", addr, os.getpid(), {"candidate_id": cfg.candidate_id}).with_http(
            http
        )
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, info.to_json())
        gc_tuning.serving(cfg.gc)
        log.info(
            "load manager %s up (status on %s, leader service %s, cluster %s)",
            cfg.candidate_id,
            info.url,
            ",".join(cfg.leader_endpoints),
            cfg.etcd.cluster,
        )
        if ready is not None:
            ready(info)
        ended = await wait_for_stop(
            stop, {follow: "the planning loop", view.task: "the cluster watch", **security.loops()}
        )
        if ended is not None:
            raise LoadManagerFailure(str(ended)) from ended.error
    finally:
        if candidacy is not None:
            await candidacy.aclose()  # resign: a standby takes over at once
        await cancel_and_wait(follow)
        if server is not None:
            await server.stop(cfg.shutdown_grace_s)
        if http is not None:
            await http.aclose()
        if security is not None:
            await security.aclose()
        await view.aclose()
        await elector.aclose()
        await store.aclose()
        if cfg.ready_file:
            remove_ready_file(cfg.ready_file)
    log.info("load manager %s stopped", cfg.candidate_id)
