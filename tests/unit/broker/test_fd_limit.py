"""The broker raises its open-file soft limit to the hard one at start."""

from __future__ import annotations

import resource

import pytest

from danube_broker.fd_limit import raise_fd_limit, raised, segment_files_budget

pytestmark = pytest.mark.unit

INF = resource.RLIM_INFINITY


@pytest.mark.parametrize(
    ("soft", "hard", "want"),
    [(1024, 524288, 524288), (20000, 20000, 20000), (1024, INF, 1024), (INF, INF, INF)],
)
def test_the_soft_limit_asked_for_is_the_hard_one(soft: int, hard: int, want: int) -> None:
    assert raised(soft, hard) == want


def test_raise_sets_the_soft_limit_and_reports_it() -> None:
    calls: list[tuple[int, tuple[int, int]]] = []
    got = raise_fd_limit(lambda _r: (1024, 4096), lambda r, lim: calls.append((r, lim)))
    assert got == (4096, 4096) and calls == [(resource.RLIMIT_NOFILE, (4096, 4096))]


def test_a_refused_raise_keeps_the_old_limit() -> None:
    def refuse(_r: int, _lim: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    assert raise_fd_limit(lambda _r: (1024, 4096), refuse) == (1024, 4096)


def test_nothing_is_set_when_already_at_the_hard_limit() -> None:
    calls: list[object] = []
    assert raise_fd_limit(lambda _r: (4096, 4096), lambda *a: calls.append(a)) == (4096, 4096)
    assert calls == []


@pytest.mark.parametrize(
    ("soft", "budget"), [(20_000, 5_000), (1024, 256), (3, 1), (resource.RLIM_INFINITY, 0)]
)
def test_segment_files_budget_is_a_quarter_of_the_soft_limit(soft: int, budget: int) -> None:
    assert segment_files_budget(soft) == budget
