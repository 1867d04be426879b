"""Failover: many consumers, one active (the earliest-attached routable one) gets everything.

When the active consumer's stream ends it stops being routable and the next one in attach
order becomes active at once; standby consumers receive nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from danube_broker.dispatch.base import Msg, Router, Routing, Target


class FailoverRouter(Router):
    def __init__(self) -> None:
        self._active: Target | None = None

    @property
    def active(self) -> Target | None:
        return self._active

    def set_consumers(self, consumers: Sequence[Target]) -> None:
        self._active = consumers[0] if consumers else None

    def route(self, batch: list[Msg]) -> Routing:
        if self._active is None:
            return Routing(unroutable=len(batch))
        return Routing(assignments=[(self._active, batch)])
