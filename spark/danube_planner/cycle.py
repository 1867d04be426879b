"""One planner cycle: read the cluster (etcd) and the load history window (object store),
aggregate (Spark or plain Python), plan, and write the report and the plan back in one
transaction fenced by the planner's term.

:class:`Planner` is the cycle, testable on the in-memory store with the Python engine; the loop
that holds the role and decides when to run a cycle is in :mod:`danube_planner.app`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import Span

from danube_common.keys import Keys
from danube_common.leadership import Leadership
from danube_common.load_history import LoadHistoryReader
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.observability import record_context
from danube_common.records import BrokerRecord, now_ms
from danube_planner import spans
from danube_planner.aggregate import aggregate
from danube_planner.config import PlannerConfig
from danube_planner.model import (
    AggregateParams,
    Aggregates,
    OwnerRow,
    PlannerInputs,
    report_json,
    split_report_lines,
)
from danube_planner.rebalance import (
    Candidate,
    PlanLimits,
    PlanResult,
    compute_plan,
    last_moves,
    live_plan,
    plan_json,
    plans_to_delete,
)

log = logging.getLogger(__name__)

#: Operations per etcd transaction (etcd allows 128; the report and the plan take two).
_TXN_OPS = 100


class Engine(Protocol):
    name: str
    #: True: the cycle lists the history window and passes the keys (``history_keys``); the
    #: engine reads the objects (the Spark engine's executors). False: it passes the lines.
    fetches_history: bool

    def aggregate(self, inp: PlannerInputs, params: AggregateParams) -> Aggregates:
        """Blocking: run in a thread."""

    def close(self) -> None: ...


class PythonEngine:
    name = "python"
    fetches_history = False

    def aggregate(self, inp: PlannerInputs, params: AggregateParams) -> Aggregates:
        return aggregate(inp, params)

    def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What a cycle reads from etcd."""

    current_lines: list[str]
    broker_states: dict[str, str]
    owners: dict[str, OwnerRow]
    pinned: frozenset[str]
    #: (plan_id, plan document), oldest first.
    plans: list[tuple[str, dict[str, Any]]]
    requests: list[str]
    #: Every request asked for a dry run (``{"dry_run": true}``): the plan is written ``proposed``
    #: (the load manager does not execute it; ``danube-admin rebalance --apply ID`` does).
    dry_run: bool = False
    #: The trace contexts the requests carry (the cycle links to them).
    request_traces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CycleResult:
    report: dict[str, Any]
    plan: dict[str, Any] | None
    plan_id: str | None
    #: False when the fenced transaction failed (the term ended meanwhile): nothing was written.
    written: bool
    aggregates: Aggregates
    plan_result: PlanResult | None
    timings_ms: dict[str, float] = field(default_factory=dict)


def valid_report_lines(lines: Sequence[str]) -> list[str]:
    """The lines that parse as load reports (a malformed one is skipped, with a warning)."""
    out, bad = split_report_lines(lines)
    if bad:
        log.warning("skipped %d malformed load report line(s)", bad)
    return out


def effective_states(registrations: Mapping[str, BrokerRecord], admin: Mapping[str, str]) -> dict[str, str]:
    """The load manager's rule: a broker's own non-active state (shutting down) wins, then the
    admin state (``/broker_states``), else active."""
    out = {}
    for broker_id, rec in registrations.items():
        out[broker_id] = rec.state if rec.state != "active" else admin.get(broker_id, "active")
    return out


async def read_cluster(store: MetadataStore, keys: Keys) -> ClusterState:
    regs: dict[str, BrokerRecord] = {}
    kvs, _ = await store.get_prefix(keys.brokers_prefix())
    for kv in kvs:
        broker_id = kv.key[len(keys.brokers_prefix()) :]
        if "/" not in broker_id:
            try:
                regs[broker_id] = BrokerRecord.from_json(kv.json())
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring malformed broker registration %s: %s", kv.key, exc)
    admin: dict[str, str] = {}
    for kv in (await store.get_prefix(keys.broker_states_prefix()))[0]:
        admin[kv.key[len(keys.broker_states_prefix()) :]] = str((_json(kv) or {}).get("state", "active"))
    lines = [kv.value.decode() for kv in (await store.get_prefix(keys.load_prefix()))[0]]
    owners: dict[str, OwnerRow] = {}
    for kv in (await store.get_prefix(keys.owners_prefix()))[0]:
        topic = keys.parse_owner(kv.key)
        value = _json(kv)
        if topic is None or not isinstance(value, dict) or "broker_id" not in value:
            continue
        owners[str(topic)] = OwnerRow(
            topic=str(topic),
            broker_id=str(value["broker_id"]),
            assigned_at_ms=int(value.get("assigned_at_ms") or 0),
            epoch=kv.mod_revision,
            moving_to=str(value.get("moving_to") or ""),
        )
    pinned = set()
    for kv in (await store.get_prefix(keys.pinned_prefix()))[0]:
        topic = keys.parse_topic_suffix(keys.pinned_prefix(), kv.key)
        if topic is not None:
            pinned.add(str(topic))
    plans: list[tuple[str, dict[str, Any]]] = []
    for kv in (await store.get_prefix(keys.rebalance_plans_prefix()))[0]:
        doc = _json(kv)
        if isinstance(doc, dict):
            plans.append((kv.key[len(keys.rebalance_plans_prefix()) :], doc))
    request_kvs = (await store.get_prefix(keys.rebalance_requests_prefix()))[0]
    requests = [kv.key[len(keys.rebalance_requests_prefix()) :] for kv in request_kvs]
    dry_run = bool(request_kvs) and all(
        isinstance(doc := _json(kv), dict) and bool(doc.get("dry_run")) for kv in request_kvs
    )
    return ClusterState(
        current_lines=valid_report_lines(lines),
        broker_states=effective_states(regs, admin),
        owners=owners,
        pinned=frozenset(pinned),
        plans=plans,
        requests=requests,
        dry_run=dry_run,
        request_traces=tuple(tp for kv in request_kvs if (tp := record_context.traceparent_of(_json(kv)))),
    )


def _json(kv: KeyValue) -> Any:
    try:
        return kv.json()
    except (ValueError, UnicodeDecodeError):
        log.warning("ignoring a value that is not JSON at %s", kv.key)
        return None


def candidates(agg: Aggregates, owners: Mapping[str, OwnerRow]) -> list[Candidate]:
    out = []
    for t in agg.topics:
        own = owners.get(t.topic)
        out.append(
            Candidate(
                topic=t.topic,
                broker_id=t.broker_id,
                load=t.load,
                assigned_at_ms=own.assigned_at_ms if own else 0,
                epoch=own.epoch if own else 0,
                moving=bool(own.moving_to) if own else False,
                owned=own is not None,
            )
        )
    return out


class Planner:
    """Runs cycles; every write of a cycle is one transaction fenced by ``lead`` (when given)."""

    def __init__(
        self,
        cfg: PlannerConfig,
        store: MetadataStore,
        keys: Keys,
        history: LoadHistoryReader | None,
        engine: Engine,
    ) -> None:
        self._cfg = cfg
        self._store = store
        self._keys = keys
        self._history = history
        self._engine = engine
        self.params = AggregateParams(
            weights=cfg.weights,
            hot_topics=cfg.hot_topics,
            max_namespaces=cfg.report_max_namespaces,
        )
        self.limits = PlanLimits(
            max_moves=cfg.max_moves_per_cycle,
            target_cv=cfg.target_cv,
            cooldown_ms=int(cfg.move_cooldown_s * 1000),
            min_age_ms=int(cfg.min_topic_age_s * 1000),
        )
        self.cycles = 0

    async def cycle(self, lead: Leadership | None, *, now: int | None = None) -> CycleResult:
        """One cycle (see the module docstring). ``lead=None``: unfenced (``--once`` without a
        leader service). A ``planner cycle`` trace while tracing is on (:mod:`danube_planner.spans`)."""
        with spans.cycle(
            {
                "danube.planner.candidate_id": self._cfg.candidate_id,
                "danube.planner.engine": self._engine.name,
                "danube.planner.term": lead.term if lead is not None else None,
                "danube.planner.fenced": lead is not None,
            }
        ) as span:
            result = await self._cycle(lead, now, span)
            agg = result.aggregates
            spans.annotate(
                span,
                {
                    "danube.planner.brokers": len(agg.brokers),
                    "danube.planner.topics": len(agg.topics),
                    "danube.planner.samples": agg.samples,
                    "danube.planner.imbalance": agg.cv,
                    "danube.plan.id": result.plan_id,
                    "danube.plan.moves": len(result.plan_result.moves) if result.plan_result else None,
                    "danube.plan.imbalance_after": result.plan_result.cv_after
                    if result.plan_result
                    else None,
                    "danube.planner.written": result.written,
                },
            )
            return result

    async def _cycle(self, lead: Leadership | None, now: int | None, span: Span | None) -> CycleResult:
        cfg, k = self._cfg, self._keys
        t0 = time.monotonic()
        now_ms_ = now if now is not None else now_ms()
        with spans.stage("read cluster"):
            state = await read_cluster(self._store, k)
        spans.link_requests(span, state.request_traces)
        t_read = time.monotonic()
        from_ms = now_ms_ - int(cfg.history_window_s * 1000)
        hist_keys: list[str] = []
        hist_lines: list[str] = []
        fetched_by_engine = self._engine.fetches_history
        if self._history is not None and cfg.history_window_s > 0:
            with spans.stage("read load history", {"danube.planner.window_s": cfg.history_window_s}) as read:
                if fetched_by_engine:  # only the keys: the engine's executors read the objects
                    hist_keys = await self._history.list_window(from_ms, now_ms_)
                else:
                    hist_keys, hist_lines = await self._history.read_window_lines(from_ms, now_ms_)
                spans.annotate(read, {"danube.planner.history_objects": len(hist_keys)})
        t_hist = time.monotonic()
        inputs = PlannerInputs(
            now_ms=now_ms_,
            window_from_ms=from_ms,
            window_to_ms=now_ms_,
            current_lines=state.current_lines,
            history_lines=hist_lines,
            history_keys=hist_keys if fetched_by_engine else (),
            owners=state.owners,
            broker_states=state.broker_states,
        )
        agg, result = await asyncio.wait_for(
            asyncio.to_thread(self._compute, inputs, state), timeout=cfg.cycle_timeout_s
        )
        t_compute = time.monotonic()

        planner_info: dict[str, Any] = {
            "candidate_id": cfg.candidate_id,
            "term": lead.term if lead is not None else None,
            "fenced": lead is not None,
            "engine": self._engine.name,
        }
        blocking = live_plan(state.plans, now_ms_)
        plan_id: str | None = None
        plan: dict[str, Any] | None = None
        summary: dict[str, Any]
        if result is None:
            summary = {"plan_id": None, "moves": 0, "skipped": f"plan {blocking} is still pending"}
        else:
            summary = {
                "plan_id": None,
                "moves": len(result.moves),
                "imbalance_after": round(result.cv_after, 6),
                "stopped": result.stopped,
            }
            if result.moves or state.requests:
                plan_id = f"{now_ms_:013d}-{secrets.token_hex(3)}"
                summary["plan_id"] = plan_id
                plan = plan_json(
                    plan_id,
                    result,
                    created_at_ms=now_ms_,
                    expires_at_ms=now_ms_ + int(cfg.plan_ttl_s * 1000),
                    limits=self.limits,
                    planner=planner_info,
                    requests=state.requests,
                )
                if state.dry_run:
                    plan["status"] = "proposed"
                # The load manager's moves of this plan link to this cycle's trace.
                plan.update(record_context.current())
        timings = {
            "read_etcd_ms": (t_read - t0) * 1000,
            "read_history_ms": (t_hist - t_read) * 1000,
            "compute_ms": (t_compute - t_hist) * 1000,
        }
        report = report_json(
            agg,
            generated_at_ms=now_ms_,
            window_from_ms=from_ms,
            window_to_ms=now_ms_,
            history_objects=len(hist_keys),
            weights=self.params.weights,
            planner={**planner_info, "compute_ms": round(timings["compute_ms"], 1)},
            plan=summary,
        )
        with spans.stage("write report and plan", {"danube.plan.id": plan_id} if plan_id else None):
            written = await self._write(lead, report, plan_id, plan, state, now_ms_)
            if written:
                await self.prune(now_ms_)
        timings["write_ms"] = (time.monotonic() - t_compute) * 1000
        self.cycles += 1
        log.info(
            "cycle %d: %d brokers, %d topics, imbalance %.3f%s; %s (%s) in %.0f ms",
            self.cycles,
            len(agg.brokers),
            len(agg.topics),
            agg.cv,
            f" -> {result.cv_after:.3f} with {len(result.moves)} move(s)" if result else "",
            f"plan {plan_id} written" if plan_id and written else "no plan written",
            f"fenced by term {lead.term}" if lead is not None else "UNFENCED: no leader service",
            (time.monotonic() - t0) * 1000,
        )
        return CycleResult(report, plan, plan_id if written else None, written, agg, result, timings)

    def _compute(self, inputs: PlannerInputs, state: ClusterState) -> tuple[Aggregates, PlanResult | None]:
        inputs = PlannerInputs(
            now_ms=inputs.now_ms,
            window_from_ms=inputs.window_from_ms,
            window_to_ms=inputs.window_to_ms,
            current_lines=inputs.current_lines,
            history_lines=valid_report_lines(inputs.history_lines),
            history_keys=inputs.history_keys,
            owners=inputs.owners,
            broker_states=inputs.broker_states,
        )
        with spans.stage("compute report", {"danube.planner.engine": self._engine.name}):
            agg = self._engine.aggregate(inputs, self.params)
        if live_plan(state.plans, inputs.now_ms) is not None:
            return agg, None
        with spans.stage("compute plan", {"danube.planner.candidates": len(agg.topics)}) as planning:
            result = compute_plan(
                agg.active_scores(),
                candidates(agg, state.owners),
                now_ms=inputs.now_ms,
                limits=self.limits,
                pinned=state.pinned,
                last_moved_ms=last_moves(state.plans, inputs.now_ms),
            )
            spans.annotate(
                planning, {"danube.plan.moves": len(result.moves), "danube.plan.stopped": result.stopped}
            )
        return agg, result

    async def _write(
        self,
        lead: Leadership | None,
        report: dict[str, Any],
        plan_id: str | None,
        plan: dict[str, Any] | None,
        state: ClusterState,
        now: int,
    ) -> bool:
        k = self._keys
        fence: list[Compare] = [lead.fence()] if lead is not None else []
        ops = [Op.put(k.load_report(), report)]
        if plan_id is not None and plan is not None:
            ops.append(Op.put(k.rebalance_plan(plan_id), plan))
        # The requests this cycle answered go in the same transaction; old plans after it.
        requests = [Op.delete(k.rebalance_request(r)) for r in state.requests]
        first = ops + requests[: _TXN_OPS - len(ops)]
        res = await self._store.txn(fence, first)
        if not res.succeeded:
            log.warning("the planner's term ended before its writes: nothing written this cycle")
            return False
        keep = self._cfg.plans_keep - (1 if plan is not None else 0)  # the new plan counts
        stale = plans_to_delete(state.plans, now_ms=now, keep=keep, cooldown_ms=self.limits.cooldown_ms)
        rest = requests[_TXN_OPS - len(ops) :] + [Op.delete(k.rebalance_plan(p)) for p in stale]
        for i in range(0, len(rest), _TXN_OPS):
            if not (await self._store.txn(fence, rest[i : i + _TXN_OPS])).succeeded:
                break
        return True

    async def prune(self, now: int) -> int:
        """Delete load history past ``history_retention_s`` (a failure is logged; the next cycle
        retries). Not fenced: deleting expired history twice is harmless."""
        retention_s = self._cfg.history_retention_s
        if self._history is None or retention_s <= 0:
            return 0
        try:
            n = await self._history.prune(now - int(retention_s * 1000))
        except Exception as exc:
            log.warning("pruning load history failed: %s", exc)
            return 0
        if n:
            log.info("pruned %d load history object(s) older than %.0f s", n, retention_s)
        return n
