"""The consumer queue: bounded in messages, holds batches, takes frames across chunks."""

from __future__ import annotations

import pytest

from danube_broker.dispatch.queue import BoundedBatchQueue

pytestmark = pytest.mark.unit


def test_offer_keeps_the_prefix_that_fits() -> None:
    q: BoundedBatchQueue[int] = BoundedBatchQueue(5)
    assert q.offer([1, 2, 3]) == 3
    assert q.offer([4, 5, 6, 7]) == 2
    assert q.offer([8]) == 0
    assert len(q) == 5 and q.free == 0
    assert q.take(10) == [1, 2, 3, 4, 5]
    assert q.free == 5


def test_a_whole_batch_is_kept_by_reference_and_handed_back_without_copy() -> None:
    q: BoundedBatchQueue[int] = BoundedBatchQueue(100)
    batch = list(range(10))
    q.offer(batch)
    assert q.take(10) is batch


def test_take_spans_chunks_and_splits_them() -> None:
    q: BoundedBatchQueue[int] = BoundedBatchQueue(100)
    q.offer([0, 1, 2])
    q.offer([3, 4, 5, 6])
    q.offer([7])
    assert q.take(2) == [0, 1]
    assert q.take(4) == [2, 3, 4, 5]
    assert q.take(10) == [6, 7]
    assert q.take(10) == [] and len(q) == 0


def test_space_callback_fires_when_items_leave() -> None:
    calls = []
    q: BoundedBatchQueue[int] = BoundedBatchQueue(3, on_space=lambda: calls.append(len(q)))
    q.offer([1, 2, 3])
    assert calls == []
    q.take(1)
    assert calls == [2]
    assert q.clear() == 2
    assert calls == [2, 0]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedBatchQueue(0)
