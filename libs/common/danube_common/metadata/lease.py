"""A lease kept alive by a loop we own, with a clear signal when it is lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from danube_common.errors import DanubeError
from danube_common.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class KeptLease:
    """Grants a lease and refreshes it every ``ttl_s / 3`` seconds until closed.

    ``lost`` is set when the lease is gone (expired in etcd, or etcd unreachable for a
    whole TTL); the owner must then stop acting on anything tied to the lease.

    ``deadline`` (event-loop time, i.e. the monotonic clock) is how long the lease is *surely*
    alive: the send time of the last successful grant or renewal + the TTL - ``margin_s``. etcd
    starts a renewed TTL only when the request reaches it, so the lease cannot expire before
    ``deadline + margin_s`` even if this process is frozen right after (SIGSTOP, a VM pause):
    the monotonic clock keeps running while the process is stopped, so on waking the deadline
    is already past and the owner knows before it touches a socket.
    """

    def __init__(
        self, store: MetadataStore, ttl_s: int, *, name: str = "lease", margin_s: float = 0.0
    ) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.name = name
        self.margin_s = margin_s
        self.lease_id = 0
        self.lost = asyncio.Event()
        self.deadline = 0.0
        self._renewed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        sent = asyncio.get_running_loop().time()
        self.lease_id = await self._store.grant_lease(self.ttl_s)
        self._renew(sent, self.ttl_s)
        self._task = asyncio.create_task(self._run(), name=f"keepalive-{self.name}")
        return self.lease_id

    def _renew(self, sent: float, remaining_s: float) -> None:
        self.deadline = max(self.deadline, sent + min(self.ttl_s, remaining_s) - self.margin_s)
        self._renewed.set()
        self._renewed = asyncio.Event()

    def surely_alive(self) -> bool:
        """The lease cannot have expired yet (see ``deadline``)."""
        return not self.lost.is_set() and asyncio.get_running_loop().time() < self.deadline

    async def wait_renewed(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the next successful renewal; True if one happened."""
        if self.lost.is_set():
            return False
        renewed = self._renewed
        try:
            async with asyncio.timeout(timeout_s):
                await renewed.wait()
        except TimeoutError:
            return False
        return self.surely_alive()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The keep-alive loop, for supervisors."""
        return self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_ok = loop.time()
        interval = max(self.ttl_s / 3.0, 0.2)
        while True:
            await asyncio.sleep(interval)
            sent = loop.time()
            try:
                remaining = await self._store.keepalive(self.lease_id)
            except DanubeError as exc:
                if loop.time() - last_ok >= self.ttl_s:
                    log.error(
                        "%s %x lost: etcd unreachable for a whole TTL (%s)", self.name, self.lease_id, exc
                    )
                    self.lost.set()
                    return
                log.warning("%s %x keep-alive failed, retrying: %s", self.name, self.lease_id, exc)
                continue
            if remaining <= 0:
                log.error("%s %x expired in etcd", self.name, self.lease_id)
                self.lost.set()
                return
            last_ok = loop.time()
            self._renew(sent, remaining)

    async def aclose(self, *, revoke: bool = True) -> None:
        """Stop refreshing; revoke so that keys tied to the lease disappear at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self.lease_id and not self.lost.is_set():
            try:
                await self._store.revoke_lease(self.lease_id)
            except DanubeError as exc:
                log.warning("could not revoke %s %x (it will expire): %s", self.name, self.lease_id, exc)
