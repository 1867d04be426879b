"""Workload files: OpenMessaging-Benchmark field names, a few adapted to a short local run.

OMB fields kept as they are: ``name, topics, partitionsPerTopic, messageSize, producersPerTopic,
subscriptionsPerTopic, consumerPerSubscription, producerRate`` (msg/s in total over all producers;
0 = as fast as possible). Adapted: ``testDurationSeconds`` / ``warmupDurationSeconds`` (OMB has
minutes) and ``consumerBacklogSizeMessages`` (OMB: GB). Ours: ``producerRates`` (a list: one run per
rate), ``reliable`` (the topics' dispatch: reliable = stored and acked per subscription, or in memory)
and ``maxOutstandingPerProducer`` (the pipelining bound: sends awaiting their ack, per producer).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

FIELDS = {
    "name": str,
    "topics": int,
    "partitionsPerTopic": int,
    "messageSize": int,
    "producersPerTopic": int,
    "subscriptionsPerTopic": int,
    "consumerPerSubscription": int,
    "producerRate": int,
    "producerRates": list,
    "testDurationSeconds": float,
    "warmupDurationSeconds": float,
    "consumerBacklogSizeMessages": int,
    "reliable": bool,
    "maxOutstandingPerProducer": int,
    "description": str,
}


class WorkloadError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    topics: int = 1
    partitions_per_topic: int = 1
    message_size_bytes: int = 1024
    producers_per_topic: int = 1
    subscriptions_per_topic: int = 1
    consumers_per_subscription: int = 1
    producer_rates: tuple[int, ...] = (0,)  # msg/s in total; 0 = max rate
    test_duration_s: float = 10.0
    warmup_duration_s: float = 2.0
    backlog_messages: int = 0  # > 0: build this backlog with consumers attached but idle, then drain
    reliable: bool = False
    max_outstanding_per_producer: int = 5000
    description: str = ""
    key: str = ""  # the file's stem (w1, w2 ... are prefixes of it)

    @property
    def consumes(self) -> bool:
        return self.subscriptions_per_topic > 0 and self.consumers_per_subscription > 0

    def with_durations(self, *, duration_s: float | None, warmup_s: float | None) -> Workload:
        return dataclasses.replace(
            self,
            test_duration_s=self.test_duration_s if duration_s is None else duration_s,
            warmup_duration_s=self.warmup_duration_s if warmup_s is None else warmup_s,
        )


def parse_workload(data: dict[str, Any], *, key: str = "") -> Workload:
    """Validate a workload mapping (as loaded from YAML); errors say which field and what is allowed."""
    if not isinstance(data, dict):
        raise WorkloadError(f"a workload is a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise WorkloadError(f"unknown workload field(s) {unknown}; allowed: {sorted(FIELDS)}")
    for field, typ in FIELDS.items():
        if field not in data:
            continue
        value = data[field]
        ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
        if typ is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise WorkloadError(f"{field} must be {typ.__name__}, got {value!r}")
    if "name" not in data:
        raise WorkloadError("a workload needs a name")
    if "producerRate" in data and "producerRates" in data:
        raise WorkloadError("give producerRate (one run) or producerRates (one run per rate), not both")
    rates = data.get("producerRates", [data.get("producerRate", 0)])
    if not rates or any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in rates):
        raise WorkloadError(f"producer rates are msg/s as integers >= 0 (0 = max rate), got {rates!r}")
    wl = Workload(
        name=data["name"],
        topics=data.get("topics", 1),
        partitions_per_topic=data.get("partitionsPerTopic", 1),
        message_size_bytes=data.get("messageSize", 1024),
        producers_per_topic=data.get("producersPerTopic", 1),
        subscriptions_per_topic=data.get("subscriptionsPerTopic", 1),
        consumers_per_subscription=data.get("consumerPerSubscription", 1),
        producer_rates=tuple(rates),
        test_duration_s=float(data.get("testDurationSeconds", 10.0)),
        warmup_duration_s=float(data.get("warmupDurationSeconds", 2.0)),
        backlog_messages=data.get("consumerBacklogSizeMessages", 0),
        reliable=data.get("reliable", False),
        max_outstanding_per_producer=data.get("maxOutstandingPerProducer", 5000),
        description=data.get("description", ""),
        key=key or data["name"],
    )
    _check(wl)
    return wl


def _check(wl: Workload) -> None:
    for label, value, low in (
        ("topics", wl.topics, 1),
        ("partitionsPerTopic", wl.partitions_per_topic, 1),
        ("producersPerTopic", wl.producers_per_topic, 1),
        ("subscriptionsPerTopic", wl.subscriptions_per_topic, 0),
        ("consumerPerSubscription", wl.consumers_per_subscription, 0),
        ("consumerBacklogSizeMessages", wl.backlog_messages, 0),
        ("maxOutstandingPerProducer", wl.max_outstanding_per_producer, 1),
    ):
        if value < low:
            raise WorkloadError(f"{label} must be >= {low}, got {value}")
    if wl.message_size_bytes < 8:
        raise WorkloadError(f"messageSize must be >= 8 (the send timestamp), got {wl.message_size_bytes}")
    if wl.test_duration_s <= 0 or wl.warmup_duration_s < 0:
        raise WorkloadError("testDurationSeconds must be > 0 and warmupDurationSeconds >= 0")
    if wl.backlog_messages and not wl.consumes:
        raise WorkloadError("a backlog workload needs subscriptions and consumers to drain it")


def load_workload(path: Path) -> Workload:
    with open(path) as f:
        data = yaml.safe_load(f)
    try:
        return parse_workload(data, key=Path(path).stem)
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: {exc}") from exc


def find_workloads(directory: Path, selectors: list[str]) -> list[Workload]:
    """Workloads whose file stem equals a selector or starts with ``selector-`` (``w1`` picks
    ``w1-1topic-1part-1kb.yaml``); ``all`` picks every file. Unknown selectors are errors."""
    files = sorted(directory.glob("*.yaml"))
    if selectors == ["all"]:
        return [load_workload(f) for f in files]
    out: list[Workload] = []
    for sel in selectors:
        matches = [f for f in files if f.stem == sel or f.stem.startswith(sel + "-")]
        if not matches:
            raise WorkloadError(f"no workload {sel!r} in {directory}; have: {[f.stem for f in files]}")
        out.extend(load_workload(f) for f in matches if load_workload(f) not in out)
    return out
