"""The load manager's decisions as spans: one span per action it applies.

Each span continues the trace of what asked for the decision, read from the record that asked
(:mod:`danube_common.observability.record_context`):

- ``place {topic}``: a child of the lookup's (or admin create's) span that wrote the placement
  request; the owner and assignment keys it writes carry its context, so the broker's load of
  the topic is its child;
- ``move {topic}`` for an admin's move request: a child of the lookup's MoveTopic span; the
  owner key's ``moving_to`` mark carries its context to the old owner's hand-over;
- ``move {topic}`` of a rebalancing plan, or of a drain: a trace of its own (each move), linked
  to the plan's cycle (its ``traceparent``) or to the admin's drain request;
- ``re-place {topic}`` (its owner died), ``drop move request {topic}``, ``mark drained
  {broker}``: children of the request when there is one, else traces of their own.

Attributes say what was decided and why: the topic, the brokers (``danube.broker.from`` /
``danube.broker.to``), the candidates' load scores, the reason, the term, whether etcd applied
it and the revision it wrote (a new owner epoch). Nothing here runs while tracing is off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Link, Span

from danube_common.observability import record_context, tracing
from danube_load_manager.actions import Outcome
from danube_load_manager.decide import Action, DropMoveRequest, MarkDrained, Move, Place, Replace, Snapshot

_TRACER_NAME = "danube_load_manager"
#: Scores named on one span, at most (the lowest first: the chosen broker and its runners-up).
_MAX_SCORES = 16


@dataclass(frozen=True, slots=True)
class Described:
    """A decision's span, before it starts: name, attributes, the ``traceparent`` of its parent
    (its trace continues there) and of the spans it links to ("" / empty: none)."""

    name: str
    attributes: dict[str, Any]
    parent: str = ""
    links: tuple[tuple[str, dict[str, Any]], ...] = field(default=())


def _scores(scores: tuple[tuple[str, float], ...]) -> list[str]:
    ranked = sorted(scores, key=lambda s: (s[1], s[0]))[:_MAX_SCORES]
    return [f"{broker}={score:.4f}" for broker, score in ranked]


def describe(action: Action, snap: Snapshot, *, term: int, candidate_id: str) -> Described:
    """The span of ``action`` (pure: tested without a tracer)."""
    attrs: dict[str, Any] = {"danube.lm.term": term, "danube.lm.candidate_id": candidate_id}
    if isinstance(action, MarkDrained):
        attrs.update({"danube.lm.action": "mark-drained", "danube.broker.id": action.broker_id})
        return Described(
            f"mark drained {action.broker_id}", attrs, parent=snap.drain_traces.get(action.broker_id, "")
        )
    attrs["danube.topic"] = action.topic
    if isinstance(action, DropMoveRequest):
        attrs.update({"danube.lm.action": "drop-move-request", "danube.lm.reason": action.why})
        return Described(
            f"drop move request {action.topic}", attrs, parent=snap.move_traces.get(action.topic, "")
        )
    if action.scores:
        attrs["danube.lm.scores"] = _scores(action.scores)
    attrs["danube.broker.to"] = action.to
    if isinstance(action, Place):
        attrs["danube.lm.action"] = "place"
        attrs["danube.lm.reason"] = "least loaded active broker" if action.scores else "placement request"
        return Described(f"place {action.topic}", attrs, parent=snap.placement_traces.get(action.topic, ""))
    if isinstance(action, Replace):
        attrs.update(
            {
                "danube.lm.action": "re-place",
                "danube.broker.from": action.dead,
                "danube.ownership.epoch": action.epoch,
                "danube.lm.reason": f"broker {action.dead} is gone (its registration lease ended)",
            }
        )
        return Described(
            f"re-place {action.topic}", attrs, parent=snap.placement_traces.get(action.topic, "")
        )
    assert isinstance(action, Move)
    attrs.update(
        {
            "danube.lm.action": "move",
            "danube.broker.from": action.owner,
            "danube.ownership.epoch": action.epoch,
            "danube.lm.reason": action.reason,
        }
    )
    if action.plan is not None:
        plan_id, index = action.plan
        attrs["danube.plan.id"] = plan_id
        attrs["danube.plan.move_index"] = index
        doc = snap.plans.get(plan_id) or {}
        tp = record_context.traceparent_of(doc)
        links = ((tp, {"danube.plan.id": plan_id}),) if tp else ()
        return Described(f"move {action.topic}", attrs, links=links)
    if action.topic in snap.move_requests:
        return Described(f"move {action.topic}", attrs, parent=snap.move_traces.get(action.topic, ""))
    # A drain: its own trace, linked to the admin's drain request when there is one.
    tp = snap.drain_traces.get(action.owner, "")
    links = ((tp, {"danube.broker.id": action.owner}),) if tp else ()
    return Described(f"move {action.topic}", attrs, links=links)


@contextlib.contextmanager
def applying(action: Action, snap: Snapshot, *, term: int, candidate_id: str) -> Iterator[Span | None]:
    """The current span while ``action`` is applied (its writes carry its context), or None
    when tracing is off. An exception raised in the block is recorded on it."""
    if not tracing.ENABLED:
        yield None
        return
    d = describe(action, snap, term=term, candidate_id=candidate_id)
    links: list[Link] = [ln for tp, attrs in d.links if (ln := record_context.link(tp, attrs)) is not None]
    with tracing.tracer(_TRACER_NAME).start_as_current_span(
        d.name, context=record_context.parent(d.parent), attributes=d.attributes, links=links
    ) as span:
        yield span


def finish(span: Span | None, outcome: Outcome) -> None:
    """Record what etcd made of the decision."""
    if span is None or not span.is_recording():
        return
    span.set_attribute("danube.lm.applied", outcome.applied)
    if outcome.applied and outcome.revision:
        span.set_attribute("danube.etcd.revision", outcome.revision)
