"""Pure helpers of the object store: ranges, multipart plans, retry delays."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.objstore import InvalidObjectRange, backoff_delays, plan_parts
from danube_common.objstore.base import check_range, clamp_range

pytestmark = pytest.mark.unit

MIB = 1024 * 1024

# ---------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("start", "end", "size", "expected"),
    [
        (None, None, 10, (0, 10)),
        (0, 5, 10, (0, 5)),
        (3, None, 10, (3, 10)),
        (3, 100, 10, (3, 10)),  # end clamped
        (10, None, 10, (10, 10)),  # start at the end: empty
        (10, 20, 10, (10, 10)),
        (0, None, 0, (0, 0)),
        (4, 4, 10, (4, 4)),
    ],
)
def test_range_rules(start: int | None, end: int | None, size: int, expected: tuple[int, int]) -> None:
    lo, hi = check_range("k", start, end)
    assert clamp_range("k", lo, hi, size) == expected


@pytest.mark.parametrize(("start", "end"), [(-1, None), (0, -5), (5, 4)])
def test_bad_range_arguments(start: int, end: int | None) -> None:
    with pytest.raises(InvalidObjectRange, match=r"half-open|must not exceed") as err:
        check_range("k", start, end)
    assert not err.value.retryable


def test_start_past_the_end_is_an_error() -> None:
    with pytest.raises(InvalidObjectRange, match=r"past the end of 'k' \(10 bytes\)"):
        clamp_range("k", 11, None, 10)


@given(st.integers(0, 200), st.one_of(st.none(), st.integers(0, 300)), st.integers(0, 200))
def test_ranges_agree_with_python_slicing(start: int, end: int | None, size: int) -> None:
    data = bytes(range(256))[:size]
    if end is not None and end < start:
        with pytest.raises(InvalidObjectRange):
            check_range("k", start, end)
        return
    lo, hi = check_range("k", start, end)
    if lo > size:
        with pytest.raises(InvalidObjectRange):
            clamp_range("k", lo, hi, size)
        return
    a, b = clamp_range("k", lo, hi, size)
    assert data[a:b] == data[start:end]


# ---------------------------------------------------------------- multipart plans


def test_plan_parts_examples() -> None:
    assert plan_parts(12 * MIB + 1, 5 * MIB) == [(0, 5 * MIB), (5 * MIB, 5 * MIB), (10 * MIB, 2 * MIB + 1)]
    assert plan_parts(10 * MIB, 5 * MIB) == [(0, 5 * MIB), (5 * MIB, 5 * MIB)]
    assert plan_parts(1, 5 * MIB) == [(0, 1)]
    assert plan_parts(0, 5 * MIB) == [(0, 0)]


def test_plan_parts_grows_the_part_size_to_fit_the_part_limit() -> None:
    parts = plan_parts(100 * MIB, 5 * MIB, max_parts=7)
    assert len(parts) <= 7
    assert parts[0][1] % MIB == 0 and parts[0][1] >= 100 * MIB / 7


@given(st.integers(0, 10**10), st.integers(1, 10**9), st.integers(1, 10_000))
def test_plan_parts_covers_the_file_exactly(size: int, part_size: int, max_parts: int) -> None:
    parts = plan_parts(size, part_size, max_parts=max_parts)
    assert len(parts) <= max(max_parts, 1)
    assert parts[0][0] == 0
    for (off, length), (nxt, _) in itertools.pairwise(parts):
        assert off + length == nxt
        assert length == parts[0][1]  # every part but the last has the same size
    assert parts[-1][0] + parts[-1][1] == size
    assert all(length > 0 for _, length in parts) or size == 0


# ---------------------------------------------------------------- backoff


def test_backoff_nominal_values_are_exponential_and_capped() -> None:
    delays = list(backoff_delays(initial_s=0.1, max_s=1.0, multiplier=2.0, attempts=7, rand=lambda: 0.0))
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def _const(value: float) -> Callable[[], float]:
    return lambda: value


def test_backoff_jitter_only_shortens_within_its_fraction() -> None:
    for r in (0.0, 0.3, 0.999):
        delays = list(backoff_delays(initial_s=1.0, max_s=8.0, jitter=0.5, attempts=5, rand=_const(r)))
        nominal = [1.0, 2.0, 4.0, 8.0, 8.0]
        for d, n in zip(delays, nominal, strict=True):
            assert n * 0.5 < d <= n


def test_backoff_is_endless_without_attempts_and_empty_with_zero() -> None:
    assert len(list(itertools.islice(backoff_delays(), 1000))) == 1000
    assert list(backoff_delays(attempts=0)) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_s": -1.0},
        {"initial_s": 2.0, "max_s": 1.0},
        {"multiplier": 0.5},
        {"jitter": 1.5},
        {"attempts": -1},
    ],
)
def test_backoff_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff_delays"):
        next(backoff_delays(**kwargs))  # type: ignore[arg-type]
