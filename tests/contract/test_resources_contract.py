"""Resources on both stores: operations that work on the fake must work on etcd too."""

from __future__ import annotations

import pytest

from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore
from danube_common.resources import Resources
from danube_common.topic_name import TopicName


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.unit),
        pytest.param("etcd", marks=pytest.mark.integration),
    ]
)
def res(request: pytest.FixtureRequest, cluster_name: str) -> Resources:
    store: MetadataStore = request.getfixturevalue(
        "memory_store" if request.param == "memory" else "etcd_store"
    )
    return Resources(store, Keys(cluster_name))


async def test_small_partitioned_topic(res: Resources) -> None:
    await res.create_namespace("default")
    await res.create_partitioned_topic(TopicName("default", "p"), 8)
    assert len(await res.topic_partitions(TopicName("default", "p"))) == 8


@pytest.mark.parametrize("partitions", [127, 200, 1024])
async def test_partitioned_topic_up_to_the_allowed_maximum(
    res: Resources, partitions: int, request: pytest.FixtureRequest
) -> None:
    await res.create_namespace("default")
    await res.create_partitioned_topic(TopicName("default", "big"), partitions)
    assert len(await res.topic_partitions(TopicName("default", "big"))) == partitions
