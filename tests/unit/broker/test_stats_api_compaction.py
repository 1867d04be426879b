"""The broker's BrokerStatsService for compaction, with stand-in topics: CompactTopic runs the
loaded reliable topic's compaction and answers its figures, refuses a non-reliable topic and
a topic not loaded here (as GetTopicStats does); GetTopicStats carries the compacted view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from danube_broker.compaction import CompactionInfo
from danube_broker.stats import TopicStats
from danube_broker.stats_api import BrokerStatsApi
from danube_common.errors import FailedPrecondition, TopicNotFound, TopicNotOwned
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CTX: Any = None

VIEW = CompactionInfo(
    horizon=500,
    entries=12,
    keys=10,
    bytes=2048,
    compacted_at_ms=1_700_000_000_000,
    duration_s=0.5,
    messages_read=500,
    stored_in="local disk",
)


class FakeReliable:
    """The part of ReliableTopic the stats service uses."""

    def __init__(self, info: CompactionInfo | None = None) -> None:
        self.info = info
        self.compactions = 0
        #: Set: compact() raises it.
        self.fail: Exception | None = None

    async def compact(self) -> CompactionInfo:
        if self.fail is not None:
            raise self.fail
        self.compactions += 1
        self.info = VIEW
        return VIEW

    def compaction_info(self) -> CompactionInfo | None:
        return self.info

    async def uploaded_range(self) -> tuple[int, int] | None:
        return None


@dataclass
class FakeTopic:
    name: str
    reliable: FakeReliable | None

    def stats(self) -> TopicStats:
        return TopicStats(
            topic=self.name,
            dispatch_strategy="reliable" if self.reliable is not None else "non_reliable",
            msgs_in=600,
            bytes_in=60_000,
            msgs_out=0,
            bytes_out=0,
            msgs_dropped=0,
            producers=0,
            consumers=0,
            subscriptions=0,
            next_offset=600,
        )


@dataclass
class FakeRegistry:
    broker_id: str = "b1"
    topics: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    return r


def api(reg: FakeRegistry, res: Resources) -> BrokerStatsApi:
    return BrokerStatsApi(reg, res, None)  # type: ignore[arg-type]  # cfg: only GetBrokerStats reads it


async def test_compact_runs_the_topics_compaction_and_answers_its_figures(res: Resources) -> None:
    rt = FakeReliable()
    reg = FakeRegistry(topics={"/default/prices": FakeTopic("/default/prices", rt)})
    got = await api(reg, res).CompactTopic(apb.CompactTopicRequest(name="/default/prices"), CTX)
    assert rt.compactions == 1
    assert got == apb.CompactionInfo(
        name="/default/prices",
        horizon=500,
        entries=12,
        keys=10,
        bytes=2048,
        compacted_at_ms=1_700_000_000_000,
        duration_s=0.5,
        messages_read=500,
        stored_in="local disk",
    )


async def test_compact_refuses_a_non_reliable_topic(res: Resources) -> None:
    reg = FakeRegistry(topics={"/default/plain": FakeTopic("/default/plain", None)})
    with pytest.raises(FailedPrecondition, match="only reliable topics can be compacted") as info:
        await api(reg, res).CompactTopic(apb.CompactTopicRequest(name="/default/plain"), CTX)
    assert info.value.grpc_status == grpc.StatusCode.FAILED_PRECONDITION


async def test_compact_of_a_topic_not_loaded_here_is_refused_like_stats(res: Resources) -> None:
    stats_api = api(FakeRegistry(), res)
    for call, request in (
        (stats_api.CompactTopic, apb.CompactTopicRequest(name="/default/t")),
        (stats_api.GetTopicStats, apb.TopicStatsRequest(name="/default/t")),
    ):
        with pytest.raises(TopicNotFound, match="does not exist"):
            await call(request, CTX)  # type: ignore[operator]
    await res.create_topic(TopicName.parse("/default/t"))
    await res.assign_if_unowned(TopicName.parse("/default/t"), "b2")
    for call, request in (
        (stats_api.CompactTopic, apb.CompactTopicRequest(name="/default/t")),
        (stats_api.GetTopicStats, apb.TopicStatsRequest(name="/default/t")),
    ):
        with pytest.raises(TopicNotOwned, match="served by broker b2"):
            await call(request, CTX)  # type: ignore[operator]


async def test_compaction_failures_pass_through(res: Resources) -> None:
    rt = FakeReliable()
    rt.fail = FailedPrecondition("topic /default/prices is closing")
    reg = FakeRegistry(topics={"/default/prices": FakeTopic("/default/prices", rt)})
    with pytest.raises(FailedPrecondition, match="is closing"):
        await api(reg, res).CompactTopic(apb.CompactTopicRequest(name="/default/prices"), CTX)


async def test_topic_stats_carry_the_compacted_view(res: Resources) -> None:
    never, done = FakeReliable(), FakeReliable(VIEW)
    reg = FakeRegistry(
        topics={
            "/default/a": FakeTopic("/default/a", never),
            "/default/b": FakeTopic("/default/b", done),
            "/default/plain": FakeTopic("/default/plain", None),
        }
    )
    stats_api = api(reg, res)
    for name in ("/default/a", "/default/plain"):
        st = await stats_api.GetTopicStats(apb.TopicStatsRequest(name=name), CTX)
        assert not st.has_compaction and not st.HasField("compaction")
    st = await stats_api.GetTopicStats(apb.TopicStatsRequest(name="/default/b"), CTX)
    assert st.has_compaction
    assert (st.compaction.name, st.compaction.horizon, st.compaction.keys) == ("/default/b", 500, 10)
    assert (st.compaction.bytes, st.compaction.stored_in) == (2048, "local disk")

    await stats_api.CompactTopic(apb.CompactTopicRequest(name="/default/a"), CTX)
    st = await stats_api.GetTopicStats(apb.TopicStatsRequest(name="/default/a"), CTX)
    assert st.has_compaction and st.compaction.horizon == 500
