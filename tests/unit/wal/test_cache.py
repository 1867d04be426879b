"""The tail cache: slicing reads, byte limits, eviction by bytes, retention."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danube_broker.wal.cache import _WINDOW_MAX, ENTRY_OVERHEAD_BYTES, CacheBudget, TailCache
from danube_broker.wal.model import LogEntry

pytestmark = pytest.mark.unit


def fill(cache: TailCache, first: int, sizes: list[int]) -> list[LogEntry]:
    entries = [LogEntry(first + i, first + i, b"x" * n) for i, n in enumerate(sizes)]
    cache.extend(first, [e.record for e in entries], [e.publish_time_ms for e in entries], sizes)
    return entries


def test_reads_slice_by_count_and_bytes() -> None:
    cache = TailCache(1 << 20, 10)
    assert cache.read(10, 5, 100) == []
    assert cache.read(9, 5, 100) is None
    entries = fill(cache, 10, [10, 20, 30, 40])
    assert cache.read(10, 10, 1000) == entries
    assert cache.read(11, 2, 1000) == entries[1:3]
    assert cache.read(10, 10, 30) == entries[:2]  # 10 + 20 fits, + 30 does not
    assert cache.read(10, 10, 29) == entries[:1]
    assert cache.read(13, 10, 1) == entries[3:]  # at least one, even if bigger
    assert cache.read(14, 10, 1000) == []
    assert cache.read(9, 10, 1000) is None
    assert (cache.start_offset, cache.end_offset, len(cache), cache.record_bytes) == (10, 14, 4, 100)


def test_evicts_oldest_by_bytes_including_overhead() -> None:
    per = 50 + ENTRY_OVERHEAD_BYTES
    cache = TailCache(per * 10, 0)
    entries: list[LogEntry] = []
    for i in range(0, 100, 7):
        entries += fill(cache, i, [50] * 7)
        assert len(cache) <= 10
    assert len(cache) == 10
    assert cache.start_offset == 105 - 10
    assert cache.read(cache.start_offset, 100, 1 << 30) == entries[-10:]
    assert cache.read(cache.start_offset - 1, 1, 100) is None


def test_compaction_keeps_reads_right() -> None:
    cache = TailCache((8 + ENTRY_OVERHEAD_BYTES) * 100, 0)
    entries: list[LogEntry] = []
    for i in range(0, 20_000, 50):
        entries += fill(cache, i, [8] * 50)
        assert cache.end_offset == i + 50
    assert len(cache) == 100  # exactly what the cap allows: never reset by a compaction
    assert len(cache._recs) < 10_000  # compacted, not grown without bound
    assert cache.read(19_950, 100, 1 << 30) == entries[19_950:]
    assert cache.read(cache.start_offset, 1, 100) == [entries[cache.start_offset]]


def test_gap_resets_and_zero_cap_holds_nothing() -> None:
    cache = TailCache(1 << 20, 0)
    fill(cache, 0, [1, 1])
    later = fill(cache, 5, [1])
    assert cache.start_offset == 5 and cache.read(5, 10, 10) == later
    off = TailCache(0, 0)
    fill(off, 0, [1, 2, 3])
    assert (off.start_offset, off.end_offset) == (3, 3)
    assert off.read(0, 10, 10) is None and off.read(3, 10, 10) == []


def test_drop_before() -> None:
    cache = TailCache(1 << 20, 0)
    entries = fill(cache, 0, [1] * 10)
    cache.drop_before(4)
    assert cache.start_offset == 4 and cache.read(4, 100, 100) == entries[4:]
    assert cache.read(3, 1, 1) is None
    cache.drop_before(2)  # already gone: no change
    assert cache.start_offset == 4
    cache.drop_before(50)
    assert (cache.start_offset, cache.end_offset, len(cache)) == (10, 10, 0)


def test_fan_out_reads_share_entries_and_results_are_private() -> None:
    cache = TailCache(1 << 20, 0)
    fill(cache, 0, [3] * 10)
    a = cache.read(2, 5, 1000)
    b = cache.read(2, 5, 1000)
    assert a == b and all(x is y for x, y in zip(a or [], b or [], strict=True))
    assert a is not b
    (a or []).clear()  # a caller's list is its own
    assert cache.read(2, 5, 1000) == b
    fill(cache, 10, [3] * 5)
    c = cache.read(4, 100, 1000)
    assert c is not None and c[0] is (b or [])[2] and [e.offset for e in c] == list(range(4, 15))


@settings(max_examples=200)
@given(
    cap=st.integers(0, 3000),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("extend"), st.lists(st.integers(0, 120), min_size=1, max_size=20)),
            st.tuples(
                st.just("read"), st.tuples(st.integers(-5, 60), st.integers(1, 30), st.integers(1, 500))
            ),
            st.tuples(st.just("drop"), st.integers(0, 400)),
        ),
        max_size=60,
    ),
)
def test_matches_a_plain_list_model(cap: int, ops: list[tuple[str, object]]) -> None:
    cache = TailCache(cap, 0)
    model: list[LogEntry] = []  # every entry ever added
    for op, arg in ops:
        if op == "extend":
            assert isinstance(arg, list)
            model += fill(cache, len(model), arg)
        elif op == "drop":
            assert isinstance(arg, int)
            cache.drop_before(min(arg, len(model)))
        else:
            assert isinstance(arg, tuple)
            back, n, max_bytes = arg
            start = cache.end_offset - back
            got = cache.read(start, n, max_bytes)
            if start < cache.start_offset:
                assert got is None
                continue
            want: list[LogEntry] = []
            total = 0
            for e in model[start : start + n]:
                if want and total + len(e.record) > max_bytes:
                    break
                want.append(e)
                total += len(e.record)
            assert got == want
        held = len(cache)
        assert cache.record_bytes + ENTRY_OVERHEAD_BYTES * held <= cap or (cap == 0 and held == 0)
        assert cache.end_offset == len(model)


def test_sliding_reads_over_a_long_tail() -> None:
    cache = TailCache(1 << 30, 0)
    entries: list[LogEntry] = []
    got: list[LogEntry] = []
    for i in range(0, 60_000, 1000):
        entries += fill(cache, i, [1] * 1000)
        while len(got) < len(entries) - 300:
            # Two subscriptions: one at the tail, one lagging; both must see the right entries.
            lag = max(0, len(got) - 5000)
            assert cache.read(lag, 10, 1 << 20) == entries[lag : lag + 10]
            got += cache.read(len(got), 700, 1 << 20) or []
    assert got == entries[: len(got)]


def test_a_shared_budget_caps_all_caches_together_and_the_largest_gives_back_first() -> None:
    per = 100 + ENTRY_OVERHEAD_BYTES  # held bytes of one 100-byte record
    budget = CacheBudget(20 * per)
    big, small = TailCache(1 << 20, 0, budget), TailCache(1 << 20, 0, budget)
    fill(small, 0, [100] * 5)
    fill(big, 0, [100] * 14)
    assert budget.used == 19 * per and budget.trims == 0
    fill(big, 14, [100] * 3)  # 22 records: over the budget, trimmed to 90% (18)
    assert budget.trims == 1 and budget.used <= 18 * per
    assert budget.used == big.held + small.held
    assert len(small) == 5  # the largest cache gave back
    assert big.read(0, 10, 1 << 20) is None  # its oldest records are gone: read from disk
    assert [e.offset for e in big.read(16, 10, 1 << 20) or []] == [16]  # its newest stay
    for i in range(40):  # keep appending to both: never over the budget after a call
        fill(small if i % 2 else big, small.end_offset if i % 2 else big.end_offset, [100])
        assert budget.used == big.held + small.held <= budget.total_bytes
    small.release()  # a closed log's cache leaves the budget
    assert budget.used == big.held and len(small) == 0


def test_a_cache_trimmed_to_nothing_holds_no_records() -> None:
    budget = CacheBudget(10 * (100 + ENTRY_OVERHEAD_BYTES))
    a, b = TailCache(1 << 20, 0, budget), TailCache(1 << 20, 0, budget)
    fill(a, 0, [100] * 3)
    fill(b, 0, [1500])  # over the budget with a: b, the largest, gives back its only record
    assert len(b) == 0 and b.start_offset == b.end_offset == 1 and b.read(0, 1, 1 << 20) is None
    assert b._recs == []  # the evicted bytes objects are freed, not kept until a compaction
    fill(b, 1, [10])
    assert [e.offset for e in b.read(1, 5, 1 << 20) or []] == [1]


def test_the_kept_window_of_built_entries_stays_small_and_is_shared_by_fan_out_readers() -> None:
    cache = TailCache(1 << 30, 0)
    fill(cache, 0, [10] * 20_000)
    offset = 0
    while offset < 20_000:  # one subscription reading the whole tail, 500 at a time
        got = cache.read(offset, 500, 1 << 20) or []
        offset = got[-1].offset + 1
        assert len(cache._win) <= _WINDOW_MAX  # objects the garbage collector walks
    a = cache.read(19_000, 100, 1 << 20) or []
    b = cache.read(19_000, 100, 1 << 20) or []
    assert a and all(x is y for x, y in zip(a, b, strict=True))  # a second reader shares them
