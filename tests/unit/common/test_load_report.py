"""The load report's listing: the busiest topics first, ties by name, the same as one full sort."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.load import TopicLoad, busiest

pytestmark = pytest.mark.unit

rates = st.sampled_from([0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 100.0])
loads = st.builds(
    TopicLoad,
    topic=st.sampled_from([f"/default/t{i}" for i in range(30)]),
    msg_rate_in=rates,
    byte_rate_in=rates,
    msg_rate_out=rates,
    byte_rate_out=rates,
    backlog=st.integers(0, 5),
)


@given(st.lists(loads, max_size=40), st.integers(-1, 45))
def test_busiest_is_a_full_sort_by_weight_then_name(topics: list[TopicLoad], n: int) -> None:
    assert busiest(topics, n) == sorted(topics, key=lambda t: (-t.weight, t.topic))[: max(0, n)]
