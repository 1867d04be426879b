"""Non-reliable (at-most-once) delivery of a published batch to every subscription.

Each subscription routes the batch and offers the parts to its consumers' bounded queues.
What does not fit is handled by the slow-consumer policy:

- ``drop``: dropped at once and counted. Publishing never waits for consumers; the whole
  path is synchronous, so batches reach queues in publish (offset) order.
- ``block``: the publish waits until consumers make room, up to the block timeout, then
  drops what is still left. The topic serialises publishes while one is blocked so order is
  kept (see :class:`danube_broker.topic_storage.InMemoryStorage`), and the producer's ack
  waits with it: back-pressure reaches the producer.

Messages published while a subscription has no routable consumer (none streaming or about to)
are dropped (counted); there is no backlog on non-reliable topics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from danube_broker.dispatch.base import Msg
from danube_broker.subscription import Subscription

SubscriptionsView = Callable[[], Mapping[str, Subscription]]


class NonReliableDispatch:
    def __init__(self, subscriptions: SubscriptionsView, *, block: bool, block_timeout_s: float) -> None:
        self._subscriptions = subscriptions
        self.block = block
        self._block_timeout_s = block_timeout_s
        #: Set whenever a consumer queue frees space or the consumer set changes (block policy).
        self._space = asyncio.Event()

    def notify_space(self) -> None:
        self._space.set()

    @property
    def on_space(self) -> Callable[[], None] | None:
        """What consumer queues call when they free space (nothing to do under ``drop``)."""
        return self.notify_space if self.block else None

    def dispatch_now(self, batch: list[Msg], nbytes: int) -> list[tuple[Subscription, list[Msg]]]:
        """Offer ``batch`` to every subscription; return (subscription, overflow) pairs."""
        pending: list[tuple[Subscription, list[Msg]]] = []
        for sub in list(self._subscriptions().values()):
            overflow = sub.offer(batch, nbytes)
            if overflow:
                pending.append((sub, overflow))
        return pending

    async def dispatch(self, batch: list[Msg], nbytes: int) -> None:
        if not self.block:
            for sub, overflow in self.dispatch_now(batch, nbytes):
                sub.drop(overflow)
            return
        self._space.clear()
        pending = self.dispatch_now(batch, nbytes)
        if pending:
            await self._wait_for_room(pending)

    async def _wait_for_room(self, pending: list[tuple[Subscription, list[Msg]]]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._block_timeout_s
        try:
            while pending:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                async with asyncio.timeout(remaining):
                    await self._space.wait()
                self._space.clear()
                retry: list[tuple[Subscription, list[Msg]]] = []
                for sub, msgs in pending:
                    overflow = sub.offer(msgs, None)
                    if overflow:
                        retry.append((sub, overflow))
                pending = retry
        except TimeoutError:
            pass
        for sub, msgs in pending:
            sub.drop(msgs)
