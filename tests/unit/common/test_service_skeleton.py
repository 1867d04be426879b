"""The shared service skeleton: waiting for a stop, the ready record, the id rule."""

from __future__ import annotations

import asyncio

import pytest

from danube_common.service import (
    Ended,
    ServiceFailure,
    ServiceReady,
    check_id,
    check_leader_endpoints,
    run_main,
    wait_for_stop,
)

pytestmark = pytest.mark.unit


def _forever() -> asyncio.Task[None]:
    return asyncio.create_task(asyncio.Event().wait())


async def test_a_requested_stop_ends_the_wait_and_leaves_the_loops_running() -> None:
    stop, loop_task = asyncio.Event(), _forever()
    waiter = asyncio.create_task(wait_for_stop(stop, {loop_task: "the loop", None: "not running"}))
    await asyncio.sleep(0)
    assert not waiter.done()
    stop.set()
    assert await asyncio.wait_for(waiter, timeout=5) is None
    assert not loop_task.done()
    loop_task.cancel()


async def test_a_loop_that_ends_is_reported_with_its_exception() -> None:
    async def crash() -> None:
        raise OSError("watch broke")

    healthy, broken = _forever(), asyncio.create_task(crash())
    ended = await asyncio.wait_for(
        wait_for_stop(asyncio.Event(), {healthy: "the healthy loop", broken: "the watch"}), timeout=5
    )
    assert ended is not None and ended.what == "the watch" and isinstance(ended.error, OSError)
    assert str(ended) == "the watch ended unexpectedly: OSError('watch broke')"
    healthy.cancel()


async def test_a_condition_ends_the_wait_and_names_itself() -> None:
    lost = asyncio.Event()
    loop_task = _forever()
    waiter = asyncio.create_task(
        wait_for_stop(asyncio.Event(), {loop_task: "the loop"}, conditions={lost: "the lease"})
    )
    await asyncio.sleep(0)
    lost.set()
    assert await asyncio.wait_for(waiter, timeout=5) == Ended("the lease")
    loop_task.cancel()


async def test_no_helper_task_outlives_the_wait() -> None:
    stop = asyncio.Event()
    before = asyncio.all_tasks()
    waiter = asyncio.create_task(wait_for_stop(stop, {}, conditions={asyncio.Event(): "never"}))
    await asyncio.sleep(0)
    stop.set()
    await waiter
    assert asyncio.all_tasks() - before - {waiter} == set()


def test_ready_record_of_a_service_without_an_api_and_with_live_state() -> None:
    planner = ServiceReady("planner", "", 7, {"candidate_id": "p1", "engine": "python"}, live=object())
    assert planner.url == "" and planner.admin_url == ""
    assert planner.to_json() == {"service": "planner", "candidate_id": "p1", "engine": "python", "pid": 7}
    broker = ServiceReady("broker", "h:1", 8, {"broker_id": "b1"})
    assert broker.to_json() == {
        "service": "broker",
        "broker_id": "b1",
        "addr": "h:1",
        "url": "http://h:1",
        "pid": 8,
    }


@pytest.mark.parametrize("good", ["b1", "lm-0a1b2c", "A.b_c-d", "x" * 64])
def test_valid_ids(good: str) -> None:
    assert check_id(good, "broker id") == good


@pytest.mark.parametrize("bad", ["", "x" * 65, "a/b", "a b", "é"])
def test_invalid_ids_name_what_they_are(bad: str) -> None:
    with pytest.raises(ValueError, match=r"invalid candidate id .*1-64 letters"):
        check_id(bad, "candidate id")


def test_leader_endpoints() -> None:
    assert check_leader_endpoints(["h:1", "http://g:2"]) == ["h:1", "http://g:2"]
    assert check_leader_endpoints([], required=False) == []
    with pytest.raises(ValueError, match="at least one leader service address"):
        check_leader_endpoints([])
    with pytest.raises(ValueError, match="not HOST:PORT"):
        check_leader_endpoints(["nohost"])


def test_a_service_failure_exits_1() -> None:
    async def fail() -> None:
        raise ServiceFailure("the watch ended unexpectedly")

    async def fine() -> None:
        return None

    assert run_main(fail, etcd_endpoints=["127.0.0.1:1"]) == 1
    assert run_main(fine, etcd_endpoints=["127.0.0.1:1"]) == 0
