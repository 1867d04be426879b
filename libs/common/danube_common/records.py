"""The records kept in cluster metadata: brokers, topics and topic ownership (values only, no I/O).

Where each lives is in :mod:`keys`; the operations on them are in :mod:`resources` (namespaces,
topics, brokers) and :mod:`ownership` (owning, releasing and moving a topic).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from danube_common.errors import InvalidArgument
from danube_common.metadata.store import KeyValue

DispatchName = Literal["non_reliable", "reliable"]
DISPATCH_NAMES: tuple[str, ...] = ("non_reliable", "reliable")
BrokerState = Literal["active", "draining", "drained"]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    broker_id: str
    #: host:port clients connect to.
    broker_addr: str
    #: URL handed to clients in lookups (``http://host:port``).
    advertised_url: str
    state: str = "active"
    registered_at_ms: int = 0
    #: host:port of the broker's internal listener (mTLS), which the cluster's own services
    #: dial; "" when it has none (records written before it existed have none either).
    internal_addr: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.internal_addr:
            del d["internal_addr"]  # the record's shape without an internal listener is unchanged
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BrokerRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @property
    def service_addr(self) -> str:
        """host:port the cluster's own services dial: the internal listener, else the client port."""
        return self.internal_addr or self.broker_addr


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    dispatch_strategy: str = "non_reliable"
    #: > 0 only on the parent entry of a partitioned topic.
    partitions: int = 0
    #: For a partition: the partitioned topic it belongs to.
    partition_of: str = ""
    created_at_ms: int = 0
    policies: dict[str, Any] = field(default_factory=dict)
    #: The ``create_revision`` of the topic's metadata key (not stored in it): a topic deleted and
    #: created again under the same name is a new incarnation and never sees the old one's data.
    #: 0: not known (a record built without reading etcd).
    incarnation: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["incarnation"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], *, incarnation: int = 0) -> TopicRecord:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "incarnation"}
        return cls(**fields, incarnation=incarnation)

    @classmethod
    def from_kv(cls, kv: KeyValue) -> TopicRecord:
        return cls.from_json(kv.json(), incarnation=kv.create_revision)


@dataclass(frozen=True, slots=True)
class Ownership:
    topic: str
    broker_id: str
    epoch: int
    #: Set while the owner hands the topic over to this broker (a topic move in progress).
    moving_to: str = ""

    @staticmethod
    def of(topic: str, value: dict[str, Any], epoch: int) -> Ownership:
        return Ownership(topic, value["broker_id"], epoch, str(value.get("moving_to") or ""))


def check_dispatch(name: str) -> str:
    if name not in DISPATCH_NAMES:
        raise InvalidArgument(f"unknown dispatch strategy {name!r}: use one of {', '.join(DISPATCH_NAMES)}")
    return name
