"""Exclusive: the subscription has one consumer, which gets everything."""

from __future__ import annotations

from collections.abc import Sequence

from danube_broker.dispatch.base import Msg, Router, Routing, Target


class ExclusiveRouter(Router):
    def __init__(self) -> None:
        self._consumer: Target | None = None

    def set_consumers(self, consumers: Sequence[Target]) -> None:
        if len(consumers) > 1:
            raise AssertionError(f"an exclusive subscription has {len(consumers)} routable consumers")
        self._consumer = consumers[0] if consumers else None

    def route(self, batch: list[Msg]) -> Routing:
        if self._consumer is None:
            return Routing(unroutable=len(batch))
        return Routing(assignments=[(self._consumer, batch)])
