"""The load manager's picture of the cluster: a watch-fed cache of what placement depends on.

Listed once (brokers, admin states, load reports, owners, placement and move requests), then
followed with one watch on the cluster root from the smallest listing revision, so no change is
missed (a change seen both in a listing and in the watch is applied twice, which is harmless:
every entry is "the key's latest value"). After a compaction it lists again. Any decision taken
from this cache is applied with a transaction that re-checks what it relied on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from danube_common.keys import Keys
from danube_common.load import LoadReport
from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.observability.record_context import traceparent_of
from danube_common.records import BrokerRecord, Ownership
from danube_load_manager.decide import Snapshot


class ControlView(WatchedCache):
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        super().__init__(store, keys.root, what="load manager view")
        self._keys = keys
        self.brokers: dict[str, BrokerRecord] = {}
        self.admin_states: dict[str, tuple[str, int]] = {}
        self.reports: dict[str, LoadReport] = {}
        self.owners: dict[str, Ownership] = {}
        #: Kept with ``owners`` (so a pass does not walk every topic): topics per broker, and
        #: the topics mid-move.
        self.topic_counts: dict[str, int] = {}
        self.moving: set[str] = set()
        self.unassigned: set[str] = set()
        self.move_requests: dict[str, str] = {}
        #: plan_id -> (plan document, mod_revision)
        self.plans: dict[str, tuple[dict[str, Any], int]] = {}
        #: The ``traceparent`` of each placement request, move request and admin state that has one.
        self.placement_traces: dict[str, str] = {}
        self.move_traces: dict[str, str] = {}
        self.drain_traces: dict[str, str] = {}

    # ------------------------------------------------------------------ the cache
    def _listed_prefixes(self) -> Sequence[str]:
        k = self._keys
        return (
            k.rebalance_plans_prefix(),
            k.brokers_prefix(),
            k.broker_states_prefix(),
            k.load_prefix(),
            k.owners_prefix(),
            k.unassigned_prefix(),
            k.move_requests_prefix(),
        )

    def _reset(self) -> None:
        self.brokers, self.admin_states, self.reports = {}, {}, {}
        self.owners, self.unassigned, self.move_requests, self.plans = {}, set(), {}, {}
        self.topic_counts, self.moving = {}, set()
        self.placement_traces, self.move_traces, self.drain_traces = {}, {}, {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        k = self._keys
        if key.startswith(k.brokers_prefix()):
            broker_id = key[len(k.brokers_prefix()) :]
            if "/" not in broker_id:
                self.brokers[broker_id] = BrokerRecord.from_json(item.json())
        elif key.startswith(k.broker_states_prefix()):
            value = item.json() or {}
            broker_id = key[len(k.broker_states_prefix()) :]
            self.admin_states[broker_id] = (str(value.get("state", "active")), revision)
            _keep(self.drain_traces, broker_id, value)
        elif key.startswith(k.load_prefix()):
            report = LoadReport.from_json(item.json())
            self.reports[report.broker_id] = report
        elif (topic := k.parse_owner(key)) is not None:
            own = Ownership.of(str(topic), item.json(), revision)
            self._forget_owner(self.owners.get(own.topic))
            self.owners[own.topic] = own
            self.topic_counts[own.broker_id] = self.topic_counts.get(own.broker_id, 0) + 1
            if own.moving_to:
                self.moving.add(own.topic)
        elif (topic := k.parse_topic_suffix(k.unassigned_prefix(), key)) is not None:
            self.unassigned.add(str(topic))
            _keep(self.placement_traces, str(topic), item.json())
        elif (topic := k.parse_topic_suffix(k.move_requests_prefix(), key)) is not None:
            value = item.json() or {}
            self.move_requests[str(topic)] = str(value.get("to") or "")
            _keep(self.move_traces, str(topic), value)
        elif key.startswith(k.rebalance_plans_prefix()):
            doc = item.json()
            if isinstance(doc, dict):
                self.plans[key[len(k.rebalance_plans_prefix()) :]] = (doc, revision)

    def _delete(self, key: str) -> None:
        k = self._keys
        if key.startswith(k.brokers_prefix()):
            self.brokers.pop(key[len(k.brokers_prefix()) :], None)
        elif key.startswith(k.broker_states_prefix()):
            self.admin_states.pop(key[len(k.broker_states_prefix()) :], None)
            self.drain_traces.pop(key[len(k.broker_states_prefix()) :], None)
        elif key.startswith(k.load_prefix()):
            self.reports.pop(key[len(k.load_prefix()) :], None)
        elif (topic := k.parse_owner(key)) is not None:
            self._forget_owner(self.owners.pop(str(topic), None))
        elif (topic := k.parse_topic_suffix(k.unassigned_prefix(), key)) is not None:
            self.unassigned.discard(str(topic))
            self.placement_traces.pop(str(topic), None)
        elif (topic := k.parse_topic_suffix(k.move_requests_prefix(), key)) is not None:
            self.move_requests.pop(str(topic), None)
            self.move_traces.pop(str(topic), None)
        elif key.startswith(k.rebalance_plans_prefix()):
            self.plans.pop(key[len(k.rebalance_plans_prefix()) :], None)

    def _forget_owner(self, own: Ownership | None) -> None:
        if own is None:
            return
        self.moving.discard(own.topic)
        left = self.topic_counts.get(own.broker_id, 0) - 1
        if left > 0:
            self.topic_counts[own.broker_id] = left
        else:
            self.topic_counts.pop(own.broker_id, None)

    # ------------------------------------------------------------------ readers
    def snapshot(self) -> Snapshot:
        return Snapshot(
            brokers=dict(self.brokers),
            admin_states={b: s for b, (s, _) in self.admin_states.items()},
            admin_state_revisions={b: r for b, (_, r) in self.admin_states.items()},
            reports=dict(self.reports),
            owners=dict(self.owners),
            counts=dict(self.topic_counts),
            moving=frozenset(self.moving),
            unassigned=frozenset(self.unassigned),
            move_requests=dict(self.move_requests),
            plans={p: doc for p, (doc, _) in self.plans.items()},
            plan_revisions={p: rev for p, (_, rev) in self.plans.items()},
            placement_traces=dict(self.placement_traces),
            move_traces=dict(self.move_traces),
            drain_traces=dict(self.drain_traces),
        )


def _keep(traces: dict[str, str], name: str, value: object) -> None:
    """Remember the ``traceparent`` a record carries (forget an older one if it has none)."""
    tp = traceparent_of(value)
    if tp:
        traces[name] = tp
    else:
        traces.pop(name, None)
