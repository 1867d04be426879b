"""A lease kept alive by a loop we own, with a clear signal when it is lost.

The renewals run either as a task on the owner's event loop (the default), or on a thread of
their own with their own event loop and their own etcd connection (``keepalive_client=``): then
an owner's loop that is late (saturated by work, or blocked by a long callback) does not delay
them, and the lease's ``deadline`` stays fresh however busy the owner is. The broker renews its
registration that way: every acknowledgement depends on it (see ``deadline``), with a blocking
client (``EtcdKeepalive``): a grpc.aio channel on the thread's loop would make that loop share
every gRPC event of the owner's loop (see there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from danube_common.errors import DanubeError
from danube_common.metadata.store import MetadataStore

log = logging.getLogger(__name__)

#: Renewals never come more often than this.
_MIN_INTERVAL_S = 0.2
#: After a failed renewal, the next attempt comes after at most this long.
_MAX_RETRY_S = 0.5
#: How long ``aclose`` waits for the renewal thread to end before leaving it (a daemon).
_THREAD_STOP_S = 5.0


class KeepaliveClient(Protocol):
    """What the renewal thread needs of its own connection to etcd (``EtcdKeepalive``; an
    ``EtcdStore`` is one too). ``keepalive`` may block: the thread's loop runs nothing else."""

    async def keepalive(self, lease_id: int) -> int: ...

    async def aclose(self) -> None: ...


#: Makes the renewal thread's client; called on that thread, inside its event loop.
KeepaliveClientFactory = Callable[[], KeepaliveClient]


@dataclass(frozen=True, slots=True)
class RenewalTiming:
    """When renewals are sent, for a lease of ``ttl_s`` whose owner acts until ``margin_s``
    before the TTL runs out (the *window*: ``ttl_s - margin_s`` after a renewal's send time).

    - ``interval_s``: a quarter of the window (at most TTL/3, as etcd's own clients do), so
      two renewals in a row can fail and the third still lands inside the window;
    - ``retry_s``: a failed renewal is retried soon, not a whole interval later;
    - ``attempt_timeout_s``: half the window. An answer that comes later is worth less than a
      new attempt (the deadline counts from the send time), so waiting longer gains nothing.
    """

    interval_s: float
    retry_s: float
    attempt_timeout_s: float

    @classmethod
    def of(cls, ttl_s: float, margin_s: float) -> RenewalTiming:
        window = max(ttl_s - margin_s, _MIN_INTERVAL_S)
        interval = max(_MIN_INTERVAL_S, min(ttl_s / 3.0, window / 4.0))
        return cls(interval, min(interval / 2.0, _MAX_RETRY_S), max(interval, window / 2.0))


def renewed_deadline(sent: float, remaining_s: float, *, ttl_s: float, margin_s: float) -> float:
    """The deadline a renewal sent at ``sent`` (monotonic) and answered with ``remaining_s``
    of TTL gives: etcd started that TTL when the request reached it, after ``sent``."""
    return sent + min(ttl_s, remaining_s) - margin_s


class KeptLease:
    """Grants a lease and refreshes it (every :class:`RenewalTiming` interval) until closed.

    ``lost`` is set when the lease is gone (expired in etcd, or etcd unreachable for a whole
    TTL); the owner must then stop acting on anything tied to the lease.

    ``deadline`` (``time.monotonic()``) is how long the lease is *surely* alive: the send time of
    the last successful grant or renewal + the TTL - ``margin_s``. etcd starts a renewed TTL only
    when the request reaches it, so the lease cannot expire before ``deadline + margin_s`` even
    if this process is frozen right after (SIGSTOP, a VM pause): the monotonic clock keeps
    running while the process is stopped, so on waking the deadline is already past and the
    owner knows before it touches a socket. (The clock is ``time.monotonic()`` on both sides,
    never an event loop's clock: uvloop's ``loop.time()`` is cached once per loop iteration, and
    the renewal thread has a loop of its own.)

    With ``keepalive_client``, renewals run on a daemon thread with its own event loop and the
    client that factory makes there (its own etcd channel). The thread publishes to the owner's
    loop only through a float (``deadline``, a single assignment: atomic under the GIL), a
    boolean, and ``call_soon_threadsafe`` for the asyncio events (``lost``, renewed). The grant
    and the revoke are made on the owner's loop, through ``store``.
    """

    def __init__(
        self,
        store: MetadataStore,
        ttl_s: int,
        *,
        name: str = "lease",
        margin_s: float = 0.0,
        keepalive_client: KeepaliveClientFactory | None = None,
    ) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.name = name
        self.margin_s = margin_s
        self.timing = RenewalTiming.of(ttl_s, margin_s)
        self.lease_id = 0
        self.lost = asyncio.Event()
        self.deadline = 0.0
        #: Renewal attempts that failed (etcd unreachable, too slow); read by metrics.
        self.renewal_failures = 0
        self._gone = False  # set by the renewing side before it schedules ``lost.set``
        self._closed = False
        self._renewed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._client_factory = keepalive_client
        self._loop: asyncio.AbstractEventLoop | None = None
        # With a renewal thread: its loop, its main task, and its end.
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_task: asyncio.Task[None] | None = None
        self._thread_ended: asyncio.Future[None] | None = None
        self.thread: threading.Thread | None = None

    @property
    def threaded(self) -> bool:
        """Whether renewals run on a thread of their own."""
        return self._client_factory is not None

    async def start(self) -> int:
        self._loop = asyncio.get_running_loop()
        sent = time.monotonic()
        self.lease_id = await self._store.grant_lease(self.ttl_s)
        self.deadline = renewed_deadline(sent, self.ttl_s, ttl_s=self.ttl_s, margin_s=self.margin_s)
        answered = time.monotonic()
        if self._client_factory is None:
            self._task = asyncio.create_task(
                self._keep(self._store, sent, answered), name=f"keepalive-{self.name}"
            )
            return self.lease_id
        try:
            self._task = await self._start_thread(self._client_factory, sent, answered)
        except BaseException:
            with contextlib.suppress(DanubeError):
                await self._store.revoke_lease(self.lease_id)
            raise
        return self.lease_id

    def surely_alive(self) -> bool:
        """The lease cannot have expired yet (see ``deadline``)."""
        return not self._gone and not self.lost.is_set() and time.monotonic() < self.deadline

    def remaining_s(self) -> float:
        """How long the lease is still surely alive (0: not, or lost). Safe from any thread."""
        if self._gone:
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    async def wait_renewed(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the next successful renewal; True if one happened (or
        the lease is surely alive again already)."""
        if self._gone or self.lost.is_set():
            return False
        if self.surely_alive():
            return True
        renewed = self._renewed
        try:
            async with asyncio.timeout(timeout_s):
                await renewed.wait()
        except TimeoutError:
            return False
        return self.surely_alive()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """For supervisors: the keep-alive loop, or (with a renewal thread) the task that ends
        when the thread does (raising what crashed it). It ends by itself only once ``lost`` is
        set, or on a crash."""
        return self._task

    # ---- the renewals (on the owner's loop, or on the renewal thread's)
    async def _keep(self, client: KeepaliveClient, sent: float, answered: float) -> None:
        """Renew until the lease is lost (``sent``/``answered``: the grant's times)."""
        timing = self.timing
        last_ok = answered
        next_at = sent + timing.interval_s
        failed = 0  # attempts failed in a row (the first is logged as a warning, the rest quietly)
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            sent = time.monotonic()
            try:
                async with asyncio.timeout(timing.attempt_timeout_s):
                    remaining = await client.keepalive(self.lease_id)
            except (DanubeError, TimeoutError) as exc:
                self.renewal_failures += 1
                if time.monotonic() - last_ok >= self.ttl_s:
                    log.error(
                        "%s %x lost: etcd unreachable for a whole TTL (%s)",
                        self.name,
                        self.lease_id,
                        str(exc) or "no answer in time",
                    )
                    self._mark_lost()
                    return
                failed += 1
                log.log(
                    logging.WARNING if failed == 1 else logging.DEBUG,
                    "%s %x keep-alive failed, retrying every %.1fs: %s",
                    self.name,
                    self.lease_id,
                    timing.retry_s,
                    str(exc) or "no answer in time",
                )
                next_at = time.monotonic() + timing.retry_s
                continue
            if remaining <= 0:
                log.error("%s %x expired in etcd", self.name, self.lease_id)
                self._mark_lost()
                return
            if failed:
                log.info(
                    "%s %x renewed again after %d failed attempt(s), %.1fs since the last renewal",
                    self.name,
                    self.lease_id,
                    failed,
                    time.monotonic() - last_ok,
                )
                failed = 0
            last_ok = time.monotonic()
            deadline = renewed_deadline(sent, remaining, ttl_s=self.ttl_s, margin_s=self.margin_s)
            if deadline > self.deadline:  # only this loop writes it (after start)
                self.deadline = deadline
            if not self._to_owner(self._wake_renewed):
                return  # the owner's loop is gone: nobody to renew for
            next_at = sent + timing.interval_s

    def _wake_renewed(self) -> None:
        """On the owner's loop: wake whoever waits for a renewal."""
        self._renewed.set()
        self._renewed = asyncio.Event()

    def _mark_lost(self) -> None:
        self._gone = True
        self._to_owner(self._lost_on_owner)

    def _lost_on_owner(self) -> None:
        """On the owner's loop: say so, and let whoever waits for a renewal stop waiting."""
        self.lost.set()
        self._wake_renewed()

    def _to_owner(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on the owner's loop (soon, from the renewal thread); False if that loop is
        closed."""
        if not self.threaded:
            fn()
            return True
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the owner's loop is closed
            return False
        return True

    # ---- the renewal thread
    async def _start_thread(
        self, factory: KeepaliveClientFactory, sent: float, answered: float
    ) -> asyncio.Task[None]:
        started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]]
        started = concurrent.futures.Future()
        #: Settled on the owner's loop when the thread ends (with what crashed it, if anything).
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        thread = threading.Thread(
            target=self._thread_main,
            args=(factory, sent, answered, started, ended),
            name=f"lease-{self.name}",
            daemon=True,
        )
        self._thread_ended = ended
        self.thread = thread
        thread.start()
        thread_loop, thread_task = await asyncio.wrap_future(started)
        self._thread_loop, self._thread_task = thread_loop, thread_task
        return asyncio.create_task(self._until_thread_ends(ended), name=f"keepalive-{self.name}")

    def _thread_main(
        self,
        factory: KeepaliveClientFactory,
        sent: float,
        answered: float,
        started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]],
        ended: asyncio.Future[None],
    ) -> None:
        error: BaseException | None = None
        try:
            asyncio.run(self._thread_keep(factory, sent, answered, started))
        except asyncio.CancelledError:  # asked to stop (aclose)
            pass
        except BaseException as exc:
            if started.done():  # reported to the owner's supervisor through ``task``
                error = exc
            else:  # reported by start()
                started.set_exception(exc)

        def settle() -> None:
            if ended.done():
                return
            if error is None:
                ended.set_result(None)
            else:
                ended.set_exception(error)

        self._to_owner(settle)

    async def _thread_keep(
        self,
        factory: KeepaliveClientFactory,
        sent: float,
        answered: float,
        started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]],
    ) -> None:
        client = factory()  # here: its channel belongs to this thread's loop
        try:
            task = asyncio.current_task()
            assert task is not None
            if not started.set_running_or_notify_cancel():
                return  # start() was cancelled meanwhile (it revokes the lease)
            started.set_result((asyncio.get_running_loop(), task))
            await self._keep(client, sent, answered)
        finally:
            await client.aclose()

    @staticmethod
    async def _until_thread_ends(ended: asyncio.Future[None]) -> None:
        await asyncio.shield(ended)  # cancelling this task leaves ``ended`` to the thread

    async def _stop_thread(self) -> None:
        loop, task, ended = self._thread_loop, self._thread_task, self._thread_ended
        self._thread_task = None
        if loop is None or task is None or ended is None:
            return
        with contextlib.suppress(RuntimeError):  # its loop already ended (lease lost)
            loop.call_soon_threadsafe(task.cancel)
        try:
            async with asyncio.timeout(_THREAD_STOP_S):
                await asyncio.shield(ended)
        except TimeoutError:
            log.warning(
                "%s %x: the renewal thread did not stop in %.0fs", self.name, self.lease_id, _THREAD_STOP_S
            )
        except Exception as exc:  # it crashed: the supervisor was told through ``task``
            log.debug("%s renewal thread had failed: %r", self.name, exc)
        else:
            if self.thread is not None:
                self.thread.join(timeout=1.0)  # it settled ``ended`` as its last act: returning now

    async def aclose(self, *, revoke: bool = True) -> None:
        """Stop refreshing; revoke so that keys tied to the lease disappear at once."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # a crash the supervisor was told of: still revoke
                log.warning("%s %x: its renewals had crashed: %r", self.name, self.lease_id, exc)
        await self._stop_thread()
        closed, self._closed = self._closed, True
        if revoke and not closed and self.lease_id and not self._gone and not self.lost.is_set():
            try:
                await self._store.revoke_lease(self.lease_id)
            except DanubeError as exc:
                log.warning("could not revoke %s %x (it will expire): %s", self.name, self.lease_id, exc)
