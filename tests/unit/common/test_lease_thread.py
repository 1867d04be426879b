"""KeptLease with its renewals on a thread of their own: the owner's loop can be blocked (or just
late) for longer than the lease's window and the lease is still surely alive when it comes back.

The fake: a lease table shared by the owner's store (grant, revoke: on the owner's loop) and the
renewal thread's client (keepalive: on the thread's loop), guarded by a lock, on the monotonic
clock. The client can be made slow, failing or crashing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

import pytest

from danube_common.errors import Unavailable
from danube_common.metadata.lease import KeptLease, RenewalTiming, renewed_deadline
from danube_common.metadata.memory import MemoryStore
from tests.support import wait_until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@dataclass
class Leases:
    """etcd's lease table, as both threads see it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: lease id -> (ttl_s, expires at, monotonic)
    table: dict[int, tuple[int, float]] = field(default_factory=dict)
    unavailable: bool = False
    #: Each keepalive waits this long before etcd "receives" it.
    delay_s: float = 0.0
    #: Raised by every keepalive (a crash of the client, not an etcd failure).
    crash: BaseException | None = None
    #: (sent by the caller at or before, received at, thread name) of each keepalive that arrived.
    received: list[tuple[float, str]] = field(default_factory=list)
    clients_closed: int = 0

    def grant(self, lease_id: int, ttl_s: int) -> None:
        with self.lock:
            self.table[lease_id] = (ttl_s, time.monotonic() + ttl_s)

    def expire(self, lease_id: int) -> None:
        with self.lock:
            self.table.pop(lease_id, None)

    def alive(self, lease_id: int) -> bool:
        with self.lock:
            entry = self.table.get(lease_id)
            return entry is not None and entry[1] > time.monotonic()


class Client:
    """The renewal thread's connection: made on that thread (the factory records which)."""

    def __init__(self, leases: Leases) -> None:
        self.leases = leases
        self.thread = threading.current_thread().name

    async def keepalive(self, lease_id: int) -> int:
        ls = self.leases
        if ls.crash is not None:
            raise ls.crash
        if ls.unavailable:
            raise Unavailable("etcd unreachable (simulated)")
        if ls.delay_s:
            await asyncio.sleep(ls.delay_s)
        now = time.monotonic()
        with ls.lock:
            ls.received.append((now, threading.current_thread().name))
            entry = ls.table.get(lease_id)
            if entry is None or entry[1] <= now:
                ls.table.pop(lease_id, None)
                return 0
            ls.table[lease_id] = (entry[0], now + entry[0])
            return entry[0]

    async def aclose(self) -> None:
        self.leases.clients_closed += 1


class OwnerStore(MemoryStore):
    """The owner's store: grants and revokes go to the shared table too."""

    def __init__(self, leases: Leases) -> None:
        super().__init__()
        self.leases = leases
        self.revoked: list[int] = []

    async def grant_lease(self, ttl_s: int) -> int:
        lease_id = await super().grant_lease(ttl_s)
        self.leases.grant(lease_id, ttl_s)
        return lease_id

    async def revoke_lease(self, lease_id: int) -> None:
        self.revoked.append(lease_id)
        self.leases.expire(lease_id)
        await super().revoke_lease(lease_id)


def threaded(leases: Leases, ttl_s: int = 1, margin_s: float = 0.2) -> tuple[KeptLease, OwnerStore]:
    store = OwnerStore(leases)
    return KeptLease(
        store, ttl_s, name="test", margin_s=margin_s, keepalive_client=lambda: Client(leases)
    ), store


def block_loop(seconds: float) -> None:
    """Hold the owner's loop (and, mostly, the GIL) like a long CPU-bound callback."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.parametrize("in_thread", [True, False], ids=["thread", "loop"])
async def test_a_blocked_loop_does_not_starve_the_renewals_on_the_thread(in_thread: bool) -> None:
    leases = Leases()
    store = OwnerStore(leases)
    kept = KeptLease(
        store, 1, name="test", margin_s=0.2, keepalive_client=(lambda: Client(leases)) if in_thread else None
    )
    await kept.start()
    # The window is 0.8 s, renewals every 0.2 s; the loop is held for 1.5 s (more than the TTL).
    headroom: list[float] = []
    stop = threading.Event()

    def sample() -> None:  # what an ack at any moment of the block would have seen
        while not stop.wait(0.02):
            headroom.append(kept.deadline - time.monotonic())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    block_loop(1.5)
    stop.set()
    sampler.join()
    alive_on_return = kept.surely_alive()  # before the loop runs anything else
    if in_thread:
        assert alive_on_return, "the thread kept the deadline fresh while the loop was held"
        assert min(headroom) > 0, f"the deadline passed during the block: {min(headroom):.3f}s"
        assert leases.alive(kept.lease_id)
        assert not kept.lost.is_set()
        assert {name for _, name in leases.received} == {"lease-test"}, "renewed from the thread"
    else:  # the control: renewals on the blocked loop let the deadline pass
        assert not alive_on_return
        assert min(headroom) < 0
    await kept.aclose()
    await store.aclose()


async def test_the_deadline_counts_from_the_send_time_of_a_slow_renewal() -> None:
    leases = Leases(delay_s=0.25)  # each renewal reaches "etcd" 0.25 s after it was sent
    kept, store = threaded(leases, ttl_s=2, margin_s=0.5)
    await kept.start()
    await wait_until(lambda: len(leases.received) >= 3, timeout_s=10, what="three slow renewals")
    # etcd restarted the TTL when each renewal arrived: the lease lives until arrival + TTL; the
    # deadline is before that by at least the margin (it counts from the earlier send time).
    last_arrival = max(at for at, _ in leases.received)
    assert kept.deadline + kept.margin_s <= last_arrival + kept.ttl_s
    assert kept.deadline + kept.margin_s <= last_arrival + kept.ttl_s - 0.2, "send time, not answer time"
    assert kept.surely_alive()
    await kept.aclose()
    await store.aclose()


async def test_too_slow_renewals_are_abandoned_and_the_lease_is_lost_after_a_ttl() -> None:
    leases = Leases(delay_s=10.0)  # never answered within an attempt's timeout
    kept, store = threaded(leases, ttl_s=1, margin_s=0.2)
    await kept.start()
    await wait_until(kept.lost.is_set, timeout_s=10, what="lost after a TTL of unanswered renewals")
    assert not kept.surely_alive() and kept.remaining_s() == 0.0
    assert kept.renewal_failures >= 2, "each attempt gave up after its timeout, and was retried"
    assert kept.task is not None
    await wait_until(kept.task.done, timeout_s=5, what="the thread to end")
    assert kept.task.exception() is None, "a lost lease is no crash"
    await kept.aclose()
    assert store.revoked == [], "a lost lease is not revoked"
    await store.aclose()


async def test_lost_when_the_lease_expires_in_etcd() -> None:
    leases = Leases()
    kept, store = threaded(leases)
    lease_id = await kept.start()
    leases.expire(lease_id)
    await wait_until(kept.lost.is_set, timeout_s=5, what="lost set on the owner's loop")
    assert not kept.surely_alive()
    assert kept.thread is not None
    await wait_until(
        lambda: kept.thread is not None and not kept.thread.is_alive(), timeout_s=5, what="thread end"
    )
    assert leases.clients_closed == 1, "the thread closed its own client"
    await kept.aclose()
    await store.aclose()


async def test_lost_when_etcd_is_unreachable_for_a_ttl_and_not_before() -> None:
    leases = Leases()
    kept, store = threaded(leases, ttl_s=2, margin_s=0.5)
    await kept.start()
    leases.unavailable = True
    t0 = time.monotonic()
    await wait_until(lambda: kept.renewal_failures >= 1, timeout_s=5, what="a failed renewal")
    assert not kept.lost.is_set()
    await wait_until(kept.lost.is_set, timeout_s=10, what="lost after a TTL without etcd")
    assert time.monotonic() - t0 >= kept.ttl_s - kept.timing.interval_s
    await kept.aclose()
    await store.aclose()


async def test_a_failed_renewal_is_retried_soon_and_the_deadline_never_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="danube_common.metadata.lease")
    leases = Leases()
    kept, store = threaded(leases, ttl_s=2, margin_s=0.5)
    await kept.start()
    leases.unavailable = True
    await wait_until(lambda: kept.renewal_failures >= 2, timeout_s=5, what="two failed renewals")
    leases.unavailable = False
    n = len(leases.received)
    await wait_until(lambda: len(leases.received) > n, timeout_s=5, what="a renewal after the outage")
    assert kept.surely_alive() and not kept.lost.is_set()
    await wait_until(lambda: "renewed again" in caplog.text, timeout_s=5, what="the recovery logged")
    failures = [r for r in caplog.records if "keep-alive failed" in r.getMessage()]
    assert [r.levelno for r in failures][:1] == [logging.WARNING], "the first failure is a warning"
    assert all(r.levelno == logging.DEBUG for r in failures[1:]), "the retries are quiet"
    await kept.aclose()
    await store.aclose()


async def test_wait_renewed_is_woken_by_a_renewal_on_the_thread() -> None:
    leases = Leases()
    kept, store = threaded(leases)
    await kept.start()
    kept.deadline = 0.0  # as if the last renewal were long ago
    assert not kept.surely_alive()
    assert await kept.wait_renewed(5.0), "the next renewal wakes the owner's loop"
    assert kept.surely_alive()
    await kept.aclose()
    await store.aclose()


async def test_a_lost_lease_ends_the_wait_for_a_renewal_at_once() -> None:
    leases = Leases()
    kept, store = threaded(leases)
    lease_id = await kept.start()
    kept.deadline = 0.0
    leases.expire(lease_id)  # the next renewal hears that it is gone
    t0 = time.monotonic()
    assert not await kept.wait_renewed(20.0)
    assert time.monotonic() - t0 < 10.0, "woken by the loss, not by the timeout"
    assert kept.lost.is_set()
    await kept.aclose()
    await store.aclose()


async def test_aclose_stops_the_thread_and_revokes() -> None:
    leases = Leases()
    kept, store = threaded(leases)
    lease_id = await kept.start()
    await store.put("/k", b"", lease=lease_id)
    await wait_until(lambda: len(leases.received) >= 2, timeout_s=5, what="renewals")
    await kept.aclose()
    assert kept.thread is not None and not kept.thread.is_alive()
    assert leases.clients_closed == 1
    assert store.revoked == [lease_id] and await store.get("/k") is None
    n = len(leases.received)
    await asyncio.sleep(2 * kept.timing.interval_s)  # the absence of renewals: nothing to poll for
    assert len(leases.received) == n, "no renewal after close"
    assert not kept.lost.is_set()
    await kept.aclose()  # a second close is harmless
    assert store.revoked == [lease_id]
    await store.aclose()


async def test_a_crash_on_the_thread_ends_the_supervised_task_with_it() -> None:
    leases = Leases()
    kept, store = threaded(leases)
    await kept.start()
    leases.crash = RuntimeError("bug in the renewal path")
    assert kept.task is not None
    await wait_until(kept.task.done, timeout_s=5, what="the task to end")
    assert isinstance(kept.task.exception(), RuntimeError)
    await kept.aclose()  # still revokes
    assert store.revoked == [kept.lease_id]
    await store.aclose()


async def test_a_client_that_cannot_be_made_fails_start_and_revokes() -> None:
    leases = Leases()
    store = OwnerStore(leases)

    def broken() -> Client:
        raise Unavailable("no etcd channel for you")

    kept = KeptLease(store, 1, name="test", keepalive_client=broken)
    with pytest.raises(Unavailable):
        await kept.start()
    assert store.revoked == [kept.lease_id]
    await store.aclose()


@pytest.mark.parametrize(
    ("ttl_s", "margin_s", "interval_s", "retry_s", "attempt_s"),
    [
        (10, 2.0, 2.0, 0.5, 4.0),  # the broker's defaults: the window is 8 s
        (10, 0.0, 2.5, 0.5, 5.0),  # no margin (uploader, leader)
        (3, 0.6, 0.6, 0.3, 1.2),  # the tests' short TTL
        (30, 6.0, 6.0, 0.5, 12.0),
        (1, 0.5, 0.2, 0.1, 0.25),  # never more often than every 0.2 s
    ],
)
def test_renewal_timing(
    ttl_s: int, margin_s: float, interval_s: float, retry_s: float, attempt_s: float
) -> None:
    t = RenewalTiming.of(ttl_s, margin_s)
    assert (t.interval_s, t.retry_s, t.attempt_timeout_s) == pytest.approx((interval_s, retry_s, attempt_s))
    # Two renewals in a row can fail (each after a whole attempt) and the third still lands in time.
    if ttl_s - margin_s >= 4 * 0.2:
        assert 3 * t.interval_s <= ttl_s - margin_s


def test_renewed_deadline_counts_from_the_send_time() -> None:
    assert renewed_deadline(100.0, 10, ttl_s=10, margin_s=2.0) == 108.0
    assert renewed_deadline(100.0, 4, ttl_s=10, margin_s=2.0) == 102.0, "etcd said less is left"
    assert renewed_deadline(100.0, 30, ttl_s=10, margin_s=2.0) == 108.0, "never more than our TTL"
