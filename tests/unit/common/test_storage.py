"""Segment descriptors and object keys (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.storage import SegmentDescriptor, check_disjoint, find, gaps, object_key, parse_object_key
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

T = TopicName("default", "orders")


def d(start: int, nxt: int) -> SegmentDescriptor:
    return SegmentDescriptor(str(T), start, nxt, object_key(T, start, nxt), 10, 0)


def test_object_keys_are_deterministic_and_parse_back() -> None:
    key = object_key(T, 100, 250)
    assert key == "default/orders/00000000000000000100-00000000000000000250.wal"
    assert parse_object_key(key) == (T, 100, 250)
    assert parse_object_key("default/orders/junk.wal") is None
    with pytest.raises(ValueError, match="at least one offset"):
        object_key(T, 5, 5)


def test_overlaps_are_refused_and_gaps_found() -> None:
    ds = check_disjoint([d(10, 20), d(0, 10), d(30, 40)])
    assert [x.start_offset for x in ds] == [0, 10, 30]
    assert gaps(ds, first=0, end=45) == [(20, 30), (40, 45)]
    assert gaps(ds, first=5, end=15) == []
    with pytest.raises(ValueError, match="overlapping"):
        check_disjoint([d(0, 10), d(5, 20)])


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20), st.integers(0, 1200))
def test_find_agrees_with_a_linear_scan(sizes: list[int], offset: int) -> None:
    ds, at = [], 0
    for i, size in enumerate(sizes):
        if i % 3 == 2:  # leave holes
            at += size
            continue
        ds.append(d(at, at + size))
        at += size
    linear = next((x for x in ds if x.covers(offset)), None)
    assert find(ds, offset) == linear


def test_descriptor_json_round_trip() -> None:
    x = SegmentDescriptor(str(T), 0, 10, object_key(T, 0, 10), 1234, 99, 5, 6, "b1", sealed=False)
    assert SegmentDescriptor.from_json(x.to_json() | {"future_field": 1}) == x
