"""The compaction_threshold_bytes policy: validated like retention_size_bytes, one a topic may
set over its namespace's (reliable topics only, refused on a non-reliable one as retention
is), a default reliable topics inherit; and every policy is a field of the wire message."""

from __future__ import annotations

import pytest

from danube_common.errors import InvalidArgument
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.namespace_policies import (
    COMPACTION_NAMES,
    DESCRIPTIONS,
    FIELD_NAMES,
    TOPIC_NAMES,
    NamespacePolicies,
)
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

GIB = 1 << 30


@pytest.mark.parametrize(
    ("value", "ok"), [(0, True), (GIB, True), (1 << 50, True), (-1, False), ((1 << 50) + 1, False)]
)
def test_threshold_is_bounded_like_retention_size(value: int, ok: bool) -> None:
    if ok:
        assert (
            NamespacePolicies().updated({"compaction_threshold_bytes": value}).compaction_threshold_bytes
            == value
        )
    else:
        with pytest.raises(InvalidArgument, match="compaction_threshold_bytes must be between 0 and"):
            NamespacePolicies().updated({"compaction_threshold_bytes": value})


def test_a_topic_may_set_it_and_the_namespace_default_applies_otherwise() -> None:
    assert COMPACTION_NAMES == ("compaction_threshold_bytes",)
    assert "compaction_threshold_bytes" in TOPIC_NAMES and "compaction_threshold_bytes" in FIELD_NAMES
    assert "compaction" in DESCRIPTIONS["compaction_threshold_bytes"]
    own = NamespacePolicies(compaction_threshold_bytes=0).only_limits()  # a topic may set it (0: off)
    ns = NamespacePolicies(compaction_threshold_bytes=GIB, retention_time_s=60)
    assert ns.for_topic({"durability": "fsync"}, None).compaction_threshold_bytes == GIB
    assert ns.for_topic({"durability": "fsync"}, own).compaction_threshold_bytes == 0
    assert NamespacePolicies().for_topic(None, None).compaction_threshold_bytes is None
    assert ns.topic_defaults() == {"retention_time_s": 60, "compaction_threshold_bytes": GIB}
    assert NamespacePolicies.from_json(ns.to_json()) == ns


def test_every_policy_is_a_field_of_the_wire_message() -> None:
    """The admin API and danube-admin carry policies as NamespacePolicies messages (by field
    name, proto3 optional): a policy missing there cannot be set, and breaks get-policies."""
    fields = apb.NamespacePolicies.DESCRIPTOR.fields_by_name
    missing = [n for n in FIELD_NAMES if n not in fields]
    assert not missing, f"add {missing} to NamespacePolicies in proto/DanubeAdmin.proto, then `make proto`"
    assert all(fields[n].has_presence for n in FIELD_NAMES)


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    return res


async def test_a_non_reliable_topic_refuses_it_as_it_refuses_retention(resources: Resources) -> None:
    plain = TopicName.parse("/default/plain")
    await resources.create_topic(plain)
    with pytest.raises(
        InvalidArgument,
        match=r"compaction_threshold_bytes: /default/plain is a non_reliable topic, which keeps nothing "
        r"to compact; compaction applies to reliable topics only",
    ):
        await resources.update_topic_policies(plain, {"compaction_threshold_bytes": GIB})
    assert (await resources.get_topic_policies(plain)).is_empty()
    # Clearing it (nothing to refuse) and the other limits are fine.
    await resources.update_topic_policies(
        plain, {"max_producers_per_topic": 2}, ["compaction_threshold_bytes"]
    )


async def test_a_reliable_partitioned_topic_stores_it_on_every_partition(resources: Resources) -> None:
    parent = TopicName.parse("/default/prices")
    await resources.create_partitioned_topic(parent, 2, dispatch_strategy="reliable")
    own = await resources.update_topic_policies(parent, {"compaction_threshold_bytes": GIB})
    assert own == NamespacePolicies(compaction_threshold_bytes=GIB)
    for name in (parent, parent.partition(0), parent.partition(1)):
        assert (await resources.get_topic_policies(name)).compaction_threshold_bytes == GIB
    cleared = await resources.update_topic_policies(parent, {}, ["compaction_threshold_bytes"])
    assert cleared.is_empty()
