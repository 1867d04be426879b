"""Sweeps: one workload shape run over a list of values of one dimension (pure logic, no I/O).

``--sweep topics=10,100,1000,10000``: N topics x 1 partition, 1 producer + 1 consumer per topic,
1 KB, reliable, a fixed total rate (default 5,000 msg/s, spread evenly over the producers). The rate
stays the same at every point, so what changes from row to row is the per-topic fixed cost only:
at 10,000 topics each topic carries 0.5 msg/s. 1 KB (not 100 B) so that the 100-topic point is the
W4 shape (``w4-100topics-fanin``) at half its rate.

``--sweep partitions=1,2,4,...,64``: 1 topic x N partitions, N producers (each publishes round-robin
over all partitions, as the SDK's partitioned producer does) and ONE consumer of all N partitions,
1 KB, reliable, a fixed total rate (default 10,000 msg/s). A fixed rate, not max: with the publish
side held constant, ``consumed / published`` and the e2e p99 show whether one consumer of N
partitions keeps up with what N producers publish (at max rate the producers' speed would move with
N too and the comparison would be between two moving figures).

A sweep row is an ordinary run (bench/harness/runner.py) plus what the sweep adds: the value swept,
the time to create the topics, to attach the clients, and the broker memory per topic.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.harness.workload import Workload, WorkloadError

DIMENSIONS = ("topics", "partitions")
DEFAULT_RATE = {"topics": 5000, "partitions": 10000}
MESSAGE_SIZE_BYTES = 1024
#: Most sweep values: topic creation and attach are bounded (see runner), but 100k topics on one
#: laptop-sized broker is not a measurement, it is a stress test.
MAX_VALUE = 100_000


@dataclasses.dataclass(frozen=True)
class Sweep:
    dimension: str  # "topics" | "partitions"
    values: tuple[int, ...]


def parse_sweep(spec: str) -> Sweep:
    """``topics=10,100,1000`` -> Sweep("topics", (10, 100, 1000)); errors say what is allowed."""
    dim, sep, rest = spec.partition("=")
    dim = dim.strip()
    if not sep or dim not in DIMENSIONS:
        raise WorkloadError(
            f"--sweep takes <dimension>=<v1>,<v2>,... with dimension one of {list(DIMENSIONS)}, got {spec!r}"
        )
    values: list[int] = []
    for part in rest.split(","):
        part = part.strip().replace("_", "")
        if not part.isdigit() or not 1 <= int(part) <= MAX_VALUE:
            raise WorkloadError(
                f"--sweep {dim}: values are integers from 1 to {MAX_VALUE:,}, got {part!r} in {spec!r}"
            )
        values.append(int(part))
    if len(set(values)) != len(values):
        raise WorkloadError(f"--sweep {dim}: a value is repeated in {spec!r}")
    return Sweep(dim, tuple(values))


def sweep_workload(
    sweep: Sweep,
    value: int,
    *,
    rate: int | None = None,
    duration_s: float = 10.0,
    warmup_s: float = 2.0,
    reliable: bool = True,
) -> Workload:
    """The workload of one sweep point (see the module docstring for the shapes)."""
    total = DEFAULT_RATE[sweep.dimension] if rate is None else rate
    if total < 0:
        raise WorkloadError(f"--sweep-rate is msg/s in total, >= 0 (0 = max rate), got {total}")
    if sweep.dimension == "topics":
        shape: dict[str, Any] = {"topics": value, "partitions_per_topic": 1, "producers_per_topic": 1}
    else:
        shape = {"topics": 1, "partitions_per_topic": value, "producers_per_topic": value}
    key = f"sweep-{sweep.dimension}-{value}"
    return Workload(
        name=key,
        key=key,
        message_size_bytes=MESSAGE_SIZE_BYTES,
        subscriptions_per_topic=1,
        consumers_per_subscription=1,
        producer_rates=(total,),
        test_duration_s=duration_s,
        warmup_duration_s=warmup_s,
        reliable=reliable,
        # At fixed rates the window only bounds a stall's backlog; at max rate it is the pipelining.
        max_outstanding_per_producer=1000 if total else 5000,
        description=f"sweep {sweep.dimension}={value}",
        **shape,
    )


def memory_per_topic_bytes(rss_before: int | None, rss_after: int | None, topics: int) -> float | None:
    """(broker RSS with the topics and clients - broker RSS before them) / topics; None if unknown."""
    if rss_before is None or rss_after is None or topics < 1:
        return None
    return (rss_after - rss_before) / topics


def progress_points(total: int, *, steps: int = 10) -> set[int]:
    """The counts at which to print progress: about every 1/steps of ``total``, and the last one."""
    if total <= 0:
        return set()
    step = max(1, total // steps)
    return set(range(step, total + 1, step)) | {total}
