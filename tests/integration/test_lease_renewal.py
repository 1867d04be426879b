"""The broker's registration lease on real etcd while its event loop is held (a CPU-bound
callback, as a loop saturated by a thousand busy topics is late): renewed from a thread of its
own, the ack deadline stays ahead the whole time, and a publish that arrived meanwhile is
acknowledged as soon as the loop comes back (no OWNERSHIP_UNCERTAIN).

The control (renewals on the broker's loop, as before) shows the same block letting the
deadline pass: what the test checks is what the thread changes."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from danube_broker.app import BrokerFailure
from danube_common.etcd_server import EtcdProcess
from danube_common.metadata.etcd import EtcdKeepalive, EtcdStore
from danube_common.metadata.lease import KeptLease
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.resources import Resources
from tests.integration.test_reliable_dispatch import batch, producer, publish, reliable_broker, stop
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TTL_S = 2
#: Longer than the TTL: renewals on the held loop would let etcd expire the lease.
BLOCK_S = 2.5


def hold_loop(seconds: float) -> None:
    """Keep the event loop (and, mostly, the GIL) busy, like a long CPU-bound callback."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


class Sampler(threading.Thread):
    """Reads the lease's headroom (deadline - now) every 20 ms, from outside the loop: what an
    ack at that moment would have been judged by."""

    def __init__(self, lease: KeptLease) -> None:
        super().__init__(name="headroom-sampler", daemon=True)
        self.lease = lease
        self.headroom: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            self.headroom.append(self.lease.deadline - time.monotonic())


class Sender(threading.Thread):
    """Publishes one batch over a channel of its own (sync gRPC) while the loop is held."""

    def __init__(self, addr: str, pid: int) -> None:
        super().__init__(name="held-publisher", daemon=True)
        self.addr, self.pid = addr, pid
        self.ack: pb.PublishAck | None = None
        self.error: BaseException | None = None
        self.answered_after_s = 0.0

    def run(self) -> None:
        sent = time.monotonic()
        try:
            with grpc.insecure_channel(self.addr) as channel:
                stub = pb_grpc.ProducerServiceStub(channel)
                self.ack = next(
                    iter(stub.PublishBatches(iter([batch(self.pid, 1, [b"during"])]), timeout=30))
                )
        except BaseException as exc:
            self.error = exc
        self.answered_after_s = time.monotonic() - sent


@pytest.mark.parametrize("in_thread", [True, False], ids=["thread", "loop"])
async def test_a_held_broker_loop_keeps_its_lease_and_acks_right_after(
    etcd_server: EtcdProcess,
    cluster_name: str,
    tmp_path: Path,
    etcd_resources: Resources,
    in_thread: bool,
) -> None:
    b = await reliable_broker(
        etcd_server,
        cluster_name,
        tmp_path / "wal",
        registration_ttl_s=TTL_S,
        registration_renewal_thread=in_thread,
    )
    try:
        topic = f"/default/{unique('held')}"
        pid = (await producer(b, topic)).producer_id
        first = await publish(b, pid, [b"before"])
        assert not first.HasField("error")
        lease = b.registry.reliable.lease
        assert lease is not None and lease.threaded is in_thread
        window = lease.ttl_s - lease.margin_s
        assert BLOCK_S > lease.ttl_s > window > 2 * lease.timing.interval_s

        sampler, sender = Sampler(lease), Sender(b.info.addr, pid)
        sampler.start()
        sender.start()
        hold_loop(BLOCK_S)  # nothing on this loop runs meanwhile: the broker's, and the test's
        surely_alive_on_return = lease.surely_alive()
        sampler.halt.set()
        sampler.join(5)
        low = min(sampler.headroom)
        print(
            f"\nrenewals on the {'thread' if in_thread else 'loop'}: lowest headroom {low:+.3f}s "
            f"over {len(sampler.headroom)} samples in a {BLOCK_S}s block (window {window:.1f}s)"
        )

        if not in_thread:  # the control: the held loop let the deadline pass
            await wait_until(lambda: not sender.is_alive(), timeout_s=30, what="the held publish's answer")
            outcome = sender.error or sender.ack
            print(f"the publish sent while the loop was held: {str(outcome).strip()!r}")
            assert low < 0 and not surely_alive_on_return
            return

        assert low > 0, f"the ack deadline passed while the loop was held ({low:+.3f}s)"
        assert surely_alive_on_return
        assert not lease.lost.is_set() and not b.task.done()
        # The publish that waited for the loop is acknowledged as soon as it runs.
        await wait_until(lambda: not sender.is_alive(), timeout_s=30, what="the held publish's answer")
        assert sender.error is None, f"the publish sent while the loop was held failed: {sender.error!r}"
        assert sender.ack is not None and not sender.ack.HasField("error"), sender.ack
        assert sender.ack.first_offset == 1
        print(
            f"the publish sent while the loop was held was acked {sender.answered_after_s:.2f}s after sending"
        )
        after = await publish(b, pid, [b"after"])
        assert not after.HasField("error") and after.first_offset == 2
        assert await etcd_resources.get_broker(b.cfg.broker_id) is not None, "still registered"
    finally:
        with contextlib.suppress(BrokerFailure):
            await stop(b)
        if b.task.done() and not b.task.cancelled():
            b.task.exception()  # the control's broker may have stopped on its lost lease


def voluntary_switches(native_id: int) -> int:
    """How often thread ``native_id`` of this process went to sleep and was woken (Linux)."""
    for line in Path(f"/proc/self/task/{native_id}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc: not Linux?")


@pytest.mark.parametrize("client", ["blocking", "aio"])
async def test_the_renewal_thread_sleeps_through_the_owners_grpc_traffic(
    etcd_server: EtcdProcess, etcd_store: EtcdStore, client: str
) -> None:
    """The broker's renewal thread wakes for its renewals only. With a grpc.aio channel of its own
    (the control), its loop is woken by the owner loop's gRPC events as well: grpc.aio puts a
    reader on its one completion-queue socket in every loop that uses it."""
    factory: Callable[[], Any]
    if client == "blocking":
        factory = lambda: EtcdKeepalive([etcd_server.endpoint], timeout_s=2.0)  # noqa: E731
    else:
        factory = lambda: EtcdStore([etcd_server.endpoint], request_timeout_s=2.0)  # noqa: E731
    lease = KeptLease(etcd_store, 3, name="test", keepalive_client=factory)
    await lease.start()
    try:
        assert lease.thread is not None and lease.thread.native_id is not None
        tid = lease.thread.native_id
        await lease.wait_renewed(5)  # the thread's client is connected
        renewals_before = lease.renewal_failures
        calls = 400
        t0, before = time.monotonic(), voluntary_switches(tid)
        for i in range(calls):
            await etcd_store.get(f"/__traffic__/{i}")  # gRPC traffic on the owner's loop
        woke, took = voluntary_switches(tid) - before, time.monotonic() - t0
        # A renewal every interval, a handful of wake-ups each.
        allowed = 10 * (int(took / lease.timing.interval_s) + 2)
        print(
            f"\n{client}: the renewal thread woke {woke} times during {calls} calls of the owner ({took:.2f}s)"
        )
        assert lease.renewal_failures == renewals_before and not lease.lost.is_set()
        if client == "blocking":
            assert woke <= allowed, f"the renewal thread woke {woke} times (at most {allowed} expected)"
        else:
            assert woke > calls / 4, "the control no longer shows grpc.aio waking the thread's loop"
    finally:
        await lease.aclose(revoke=True)
