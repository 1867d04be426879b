"""The Supervisor's rules over a stand-in cluster (its services' processes are FakeProcs, its
restarts scripted): what is restarted, the back-off while restarts fail, and what resets it.
Real processes: tests/integration/test_local_cluster.py and the etcd_pause fault scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danube_local.cluster import ServiceFailed, ServiceProcess
from danube_local.supervise import Supervisor
from tests.unit.deploy.test_procs import FakeProc

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class StubCluster:
    """services() / restart(name) / stopping, as LocalCluster has them; a restart starts a new
    FakeProc unless ``fail`` names the service (then it raises as LocalCluster does)."""

    def __init__(self, tmp: Path, *services: ServiceProcess) -> None:
        self._services = list(services)
        self.etcd: StubEtcd | None = None
        self.stopping = False
        self.fail: set[str] = set()
        self.restarted: list[str] = []
        self._pid = 1000

    def services(self) -> list[ServiceProcess]:
        return self._services

    def restart(self, name: str, *, timeout_s: float) -> ServiceProcess:
        svc = next(s for s in self._services if s.name == name)
        assert svc.proc is None or svc.proc.poll() is not None, "restart of a running service"
        self.restarted.append(name)
        self._pid += 1
        if name in self.fail:
            svc.proc = FakeProc(self._pid, exited=1)  # type: ignore[assignment]
            raise ServiceFailed(f"{name} exited with code 1 before it was ready", service=name,
                                log_path=svc.log_path, log_tail="etcd unreachable")  # fmt: skip
        svc.proc = FakeProc(self._pid)  # type: ignore[assignment]
        return svc


class StubEtcd:
    """EtcdProcess's proc / start() / log_path; start() fails while ``down``."""

    def __init__(self, tmp: Path, *, exited: int | None) -> None:
        self.proc = FakeProc(1, exited=exited)
        self.log_path = tmp / "etcd.log"
        self.down = False
        self.starts = 0

    def start(self, timeout_s: float) -> StubEtcd:
        self.starts += 1
        if self.down:
            raise RuntimeError("etcd did not become healthy in 30s; see etcd.log")
        self.proc = FakeProc(2)
        return self


def service(tmp: Path, kind: str, name: str, *, exited: int | None = None) -> ServiceProcess:
    svc = ServiceProcess(kind, name, ["x"], tmp / f"{name}.log", tmp / f"{name}.json",
                         broker_id=name.split("-")[-1] if kind == "broker" else None)  # fmt: skip
    svc.proc = FakeProc(1, exited=exited)  # type: ignore[assignment]
    return svc


def supervisor(cluster: StubCluster, clock: Clock, said: list[str], **kw: Any) -> Supervisor:
    return Supervisor(cluster, say=said.append, clock=clock, **kw)  # type: ignore[arg-type]


def test_an_exited_service_is_restarted_once_and_a_stopped_one_left_alone(tmp_path: Path) -> None:
    b1 = service(tmp_path, "broker", "broker-1", exited=1)
    b2 = service(tmp_path, "broker", "broker-2", exited=0)
    b2.stopped = True  # stopped through the cluster on purpose
    lm = service(tmp_path, "load_manager", "load-manager-1")
    never = service(tmp_path, "leader", "leader-1")
    never.proc = None  # never started
    c, said = StubCluster(tmp_path, b1, b2, lm, never), list[str]()
    sup = supervisor(c, Clock(), said)
    assert [s.name for s in sup.exited()] == ["broker-1"]
    assert sup.check() == ["broker-1"] and c.restarted == ["broker-1"]
    assert said == [f"broker 1 exited with code 1: restarted (see {b1.log_path})"]
    assert sup.check() == [] and sup.restarts == {"broker-1": 1}  # running again: nothing to do


def test_uploaders_come_back_before_the_brokers_that_use_them(tmp_path: Path) -> None:
    c = StubCluster(
        tmp_path,
        service(tmp_path, "lookup", "lookup", exited=1),
        service(tmp_path, "broker", "broker-1", exited=1),
        service(tmp_path, "wal_uploader", "wal-uploader-1", exited=1),
    )
    assert supervisor(c, Clock(), []).check() == ["wal-uploader-1", "lookup", "broker-1"]


def test_a_failing_restart_backs_off_doubling_to_the_cap_and_recovers(tmp_path: Path) -> None:
    b1 = service(tmp_path, "broker", "broker-1", exited=1)
    c, said, clock = StubCluster(tmp_path, b1), list[str](), Clock()
    c.fail.add("broker-1")
    sup = supervisor(c, clock, said, min_backoff_s=1.0, max_backoff_s=4.0)
    waits = []
    for _ in range(5):
        assert sup.check() == []
        waits.append(said[-1].rsplit("trying again in ", 1)[1])
        assert sup.check() == []  # not before the back-off has passed
        clock.now += float(waits[-1].rstrip("s"))
    assert waits == ["1s", "2s", "4s", "4s", "4s"]
    assert said[0] == (
        "warning: broker 1 did not come back (broker-1 exited with code 1 before it was ready); trying again in 1s"
    )
    assert len(c.restarted) == 5
    c.fail.clear()
    assert sup.check() == ["broker-1"] and sup.restarts == {"broker-1": 1}


def test_staying_up_resets_the_back_off(tmp_path: Path) -> None:
    b1 = service(tmp_path, "broker", "broker-1", exited=1)
    c, said, clock = StubCluster(tmp_path, b1), list[str](), Clock()
    sup = supervisor(c, clock, said, min_backoff_s=1.0, max_backoff_s=30.0, healthy_after_s=60.0)
    c.fail.add("broker-1")
    for _ in range(3):  # 1 s, 2 s, 4 s
        sup.check()
        clock.now += 10
    c.fail.clear()
    assert sup.check() == ["broker-1"]

    def exit_and_fail_once() -> str:
        b1.proc.returncode = 1  # type: ignore[union-attr]
        c.fail.add("broker-1")
        sup.check()
        c.fail.clear()
        return said[-1].rsplit("trying again in ", 1)[1]

    clock.now += 5  # up only briefly: the next failure continues the series
    assert exit_and_fail_once() == "8s"
    clock.now += 8
    assert sup.check() == ["broker-1"]
    clock.now += 61  # up past healthy_after_s: the series starts over
    sup.check()
    assert exit_and_fail_once() == "1s"


def test_nothing_is_restarted_while_the_cluster_stops(tmp_path: Path) -> None:
    c = StubCluster(tmp_path, service(tmp_path, "broker", "broker-1", exited=1))
    c.stopping = True
    assert supervisor(c, Clock(), []).check() == [] and c.restarted == []


def test_our_etcd_comes_back_first_with_its_own_back_off(tmp_path: Path) -> None:
    c = StubCluster(tmp_path, service(tmp_path, "broker", "broker-1", exited=1))
    c.etcd = StubEtcd(tmp_path, exited=-9)
    c.etcd.down = True
    said: list[str] = []
    clock = Clock()
    sup = supervisor(c, clock, said, min_backoff_s=2.0)
    assert sup.check() == ["broker-1"]  # the broker's restart does not wait for etcd's
    assert (
        said[0]
        == "warning: etcd did not come back (etcd did not become healthy in 30s; see etcd.log); trying again in 2s"
    )
    assert sup.check() == [] and c.etcd.starts == 1
    clock.now += 2
    c.etcd.down = False
    assert (
        sup.check() == ["etcd"]
        and said[-1] == f"etcd exited with code -9: restarted (see {tmp_path / 'etcd.log'})"
    )
    assert sup.check() == [] and c.etcd.starts == 2
    c.etcd.proc = None  # stopped through the cluster (EtcdProcess.stop): left alone
    assert sup.check() == [] and c.etcd.starts == 2
