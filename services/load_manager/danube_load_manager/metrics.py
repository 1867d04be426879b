"""The load manager's Prometheus collector: its leadership, what it did while leading, and the
cluster as its view shows it, read when ``/metrics`` is scraped (nothing between scrapes).

Every replica serves these: ``danube_leader_election_state{role="load-manager"}`` is 1 on the
one that acts and 0 on the standbys, and the counters are this replica's (a standby's stay
where its last term left them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import add_samples
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.records import BrokerRecord
from danube_load_manager.decide import DropMoveRequest, MarkDrained, Move, Place, Replace, Snapshot

if TYPE_CHECKING:
    from danube_load_manager.app import LoadManager
    from danube_load_manager.view import ControlView

#: The ``kind`` label of each action.
ACTION_KINDS: dict[type, str] = {
    Place: "place",
    Replace: "replace",
    Move: "move",
    DropMoveRequest: "drop_move_request",
    MarkDrained: "mark_drained",
}
#: Broker states always shown (0 when no broker is in one).
BROKER_STATES = ("active", "draining", "drained")


@dataclass(frozen=True, slots=True)
class LmFigures:
    leading: bool
    term: int
    passes: int
    actions: Mapping[tuple[str, str], int]
    moves: Mapping[str, int]
    #: Effective state of each registered broker.
    broker_states: Mapping[str, str]
    topics: int
    moves_in_flight: int


def broker_states(
    brokers: Mapping[str, BrokerRecord], admin: Mapping[str, tuple[str, int]]
) -> dict[str, str]:
    """Each registered broker's effective state (the broker's own ``draining`` wins, then the
    admin's), by the same rule the planning passes use."""
    snap = Snapshot(
        brokers=brokers,
        admin_states={b: state for b, (state, _rev) in admin.items()},
        admin_state_revisions={},
        reports={},
        owners={},
    )
    return {b: snap.state_of(b) for b in brokers}


def lm_families(f: LmFigures) -> list[Metric]:
    role = (LOAD_MANAGER_ROLE,)
    by_state = dict.fromkeys(BROKER_STATES, 0)
    for state in f.broker_states.values():
        by_state[state] = by_state.get(state, 0) + 1
    return [
        add_samples(mn.LEADER_ELECTION_STATE.family(), {role: int(f.leading)}),
        add_samples(mn.LEADER_TERM.family(), {role: f.term}),
        add_samples(mn.LM_PASSES.family(), {(): f.passes}),
        add_samples(mn.LM_ACTIONS.family(), dict(sorted(f.actions.items()))),
        add_samples(mn.REBALANCING_MOVES.family(), {(k,): v for k, v in sorted(f.moves.items())}),
        add_samples(mn.CLUSTER_BROKERS.family(), {(k,): v for k, v in by_state.items()}),
        add_samples(mn.CLUSTER_TOPICS.family(), {(): f.topics}),
        add_samples(mn.CLUSTER_MOVES_IN_FLIGHT.family(), {(): f.moves_in_flight}),
    ]


FAMILIES = (
    mn.LEADER_ELECTION_STATE,
    mn.LEADER_TERM,
    mn.LM_PASSES,
    mn.LM_ACTIONS,
    mn.REBALANCING_MOVES,
    mn.CLUSTER_BROKERS,
    mn.CLUSTER_TOPICS,
    mn.CLUSTER_MOVES_IN_FLIGHT,
)


class LoadManagerCollector:
    def __init__(self, manager: LoadManager, view: ControlView) -> None:
        self._m = manager
        self._view = view

    def describe(self) -> list[Metric]:
        return [d.family() for d in FAMILIES]

    def collect(self) -> Iterator[Metric]:
        m, v = self._m, self._view
        yield from lm_families(
            LmFigures(
                leading=m.leading,
                term=m.term,
                passes=m.passes,
                actions=m.actions,
                moves=m.moves,
                broker_states=broker_states(v.brokers, v.admin_states),
                topics=len(v.owners),
                moves_in_flight=sum(1 for o in v.owners.values() if o.moving_to),
            )
        )
