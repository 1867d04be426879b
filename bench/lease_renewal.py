"""The registration lease on a saturated event loop: renewals on the loop vs on their own thread.

    .venv/bin/python bench/lease_renewal.py [--tasks 1000] [--slice-ms 1] [--seconds 20]
        [--ttl-s 10] [--margin-s 2]

One real etcd; for each mode (``loop``: renewals as a task of the owner's event loop, as before;
``thread``: on a thread with its own loop and etcd channel), in the same run: a ``KeptLease`` is
granted on a uvloop loop that ``--tasks`` busy coroutines keep saturated (each burns
``--slice-ms`` of CPU, then yields: one loop round takes about tasks x slice, as with a thousand
busy topics), for ``--seconds``. A thread samples the lease's headroom (deadline - now) every
10 ms: at a sample where it is <= 0 a publish would have waited for a renewal, then been
refused with OWNERSHIP_UNCERTAIN. Printed per mode: the lowest headroom, the share of samples past
the deadline, the renewals made and the longest gap between two successful renewals' send times
(the start and the end of the run count as ends of a gap).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from danube_common.etcd_server import EtcdProcess  # noqa: E402
from danube_common.metadata.etcd import EtcdStore  # noqa: E402
from danube_common.metadata.lease import KeptLease  # noqa: E402


class Counting:
    """A keepalive client that records the send time of each successful renewal."""

    def __init__(self, store: EtcdStore, sent: list[float]) -> None:
        self._store, self._sent = store, sent

    async def keepalive(self, lease_id: int) -> int:
        t = time.monotonic()
        ttl = await self._store.keepalive(lease_id)
        if ttl > 0:
            self._sent.append(t)
        return ttl

    async def aclose(self) -> None:
        await self._store.aclose()


async def busy(slice_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        end = time.monotonic() + slice_s
        while time.monotonic() < end:
            pass
        await asyncio.sleep(0)


async def phase(mode: str, endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    store = EtcdStore([endpoint])
    sent: list[float] = []
    factory = (lambda: Counting(EtcdStore([endpoint]), sent)) if mode == "thread" else None
    lease = KeptLease(
        store, args.ttl_s, name=f"bench-{mode}", margin_s=args.margin_s, keepalive_client=factory
    )
    if mode == "loop":  # count on the loop's own store
        original = store.keepalive

        async def counted(lease_id: int) -> int:
            t = time.monotonic()
            ttl = await original(lease_id)
            if ttl > 0:
                sent.append(t)
            return ttl

        store.keepalive = counted  # type: ignore[method-assign]
    await lease.start()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(busy(args.slice_ms / 1000, stop)) for _ in range(args.tasks)]
    headroom: list[float] = []
    halt = threading.Event()

    def sample() -> None:
        while not halt.wait(0.01):
            headroom.append(lease.deadline - time.monotonic())

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    sampler.start()
    await asyncio.sleep(args.seconds)  # the measurement: a saturated interval of a set length
    t_end = time.monotonic()
    halt.set()
    sampler.join()
    stop.set()
    await asyncio.gather(*tasks)
    lost = lease.lost.is_set()
    await lease.aclose(revoke=not lost)
    await store.aclose()
    in_run = [t for t in sent if t >= t0]
    marks = [t0, *(t for t in in_run if t < t_end), t_end]  # no renewal at all: the whole run
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    return {
        "mode": mode,
        "interval_s": round(lease.timing.interval_s, 3),
        "window_s": args.ttl_s - args.margin_s,
        "lowest_headroom_s": round(min(headroom), 3),
        "past_deadline_share": round(sum(1 for h in headroom if h <= 0) / len(headroom), 4),
        "renewals": len(in_run),
        "longest_renewal_gap_s": round(max(gaps), 3),
        "lost": lost,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--slice-ms", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ttl-s", type=int, default=10)
    parser.add_argument("--margin-s", type=float, default=2.0)
    args = parser.parse_args()
    etcd = EtcdProcess().start()
    try:
        results = [uvloop.run(phase(mode, etcd.endpoint, args)) for mode in ("loop", "thread")]
    finally:
        etcd.stop()
    for r in results:
        print(json.dumps(r))
    loop, thread = results
    print(
        f"past the deadline: loop {loop['past_deadline_share']:.1%} of the time, thread "
        f"{thread['past_deadline_share']:.1%}; longest renewal gap loop/thread = "
        f"{loop['longest_renewal_gap_s'] / thread['longest_renewal_gap_s']:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
