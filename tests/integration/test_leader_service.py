"""`danube-leader` as real processes on a real etcd: election, fail-over, fencing, watches.

Two replicas share one etcd; candidates talk to them through the client library
(danube_common.leadership.Elector). Replicas are killed with SIGKILL (their leases then
expire after the TTL) or stopped with SIGTERM (they revoke at once). Timings are printed
(run with -s to see them); the assertions are about order and terms, with deadlines loose
enough for a busy 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from danube_common.errors import MD_ERROR_CODE
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.leadership import Candidacy, Elector, LeaderInfo, Leadership, read_leader, read_leaders
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.store import Op
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ROLE = "load-manager"
TTL_S = 2


class LeaderProc:
    """One `python -m danube_leader` process with its ready file and log."""

    def __init__(
        self, etcd: EtcdProcess, cluster: str, workdir: Path, name: str, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.ready = workdir / f"{name}.json"
        self.log = workdir / f"{name}.log"
        self.addr = ""
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "danube_leader",
                    "--listen",
                    "127.0.0.1:0",
                    "--ready-file",
                    str(self.ready),
                    "--etcd-endpoints",
                    etcd.endpoint,
                    "--cluster",
                    cluster,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "DANUBE_LEADER_HEARTBEAT_INTERVAL_S": "0.5", **(env or {})},
            )

    async def wait_ready(self) -> LeaderProc:
        await wait_until(
            lambda: self.ready.exists() or self.proc.poll() is not None,
            timeout_s=30,
            what=f"{self.name} ready",
        )
        assert self.proc.poll() is None, f"{self.name} exited: {self.log.read_text()}"
        info = json.loads(self.ready.read_text())
        assert set(info) == {"service", "addr", "url", "pid"}
        assert info["service"] == "leader" and info["pid"] == self.proc.pid
        assert info["url"] == f"http://{info['addr']}" and not info["addr"].endswith(":0")
        self.addr = info["addr"]
        return self

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def procs(etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path) -> Iterator[list[LeaderProc]]:
    started: list[LeaderProc] = []
    yield started
    for p in started:
        p.cleanup()


async def start_replicas(
    etcd: EtcdProcess,
    cluster: str,
    workdir: Path,
    procs: list[LeaderProc],
    n: int,
    env: dict[str, str] | None = None,
) -> list[LeaderProc]:
    new = [LeaderProc(etcd, cluster, workdir, f"leader-{len(procs) + i}", env) for i in range(n)]
    procs.extend(new)
    return [await p.wait_ready() for p in new]


@pytest.fixture
async def electors() -> AsyncIterator[list[Elector]]:
    made: list[Elector] = []
    yield made
    for e in made:
        await e.aclose()


def elector(made: list[Elector], *addrs: str, heartbeat_deadline_s: float = 2.0) -> Elector:
    e = Elector(
        list(addrs),
        rpc_timeout_s=5.0,
        heartbeat_deadline_s=heartbeat_deadline_s,
        backoff_base_s=0.05,
        backoff_cap_s=0.5,
    )
    made.append(e)
    return e


async def next_lead(c: Candidacy, timeout_s: float) -> Leadership:
    async with asyncio.timeout(timeout_s):
        return await anext(c)


async def fenced_put(store: EtcdStore, lead: Leadership, key: str) -> bool:
    res = await store.txn([lead.fence()], [Op.put(key, f"term {lead.term}")])
    return res.succeeded


class LeaderLog:
    """Every leader a WatchLeader stream reports, for invariant checks."""

    def __init__(self, e: Elector, role: str) -> None:
        self.seen: list[LeaderInfo | None] = []
        self._task = asyncio.create_task(self._run(e, role))

    async def _run(self, e: Elector, role: str) -> None:
        async for info in e.watch_leader(role):
            self.seen.append(info)

    def terms(self) -> list[int]:
        return [i.term for i in self.seen if i is not None]

    def leaders(self) -> list[str]:
        return [i.candidate_id for i in self.seen if i is not None]

    async def aclose(self) -> None:
        """Stop watching; a watch that had failed re-raises its error here."""
        self._task.cancel()
        (result,) = await asyncio.gather(self._task, return_exceptions=True)
        if isinstance(result, Exception):
            raise result


async def test_kill9_of_a_replica_fails_over_with_a_larger_term_and_fences_the_old_one(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    a, b = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 2)
    watch = LeaderLog(elector(electors, b.addr), ROLE)
    try:
        c1 = elector(electors, a.addr, b.addr).campaign(
            ROLE, candidate_id="c1", ttl_s=TTL_S, metadata={"addr": "10.0.0.1:7000"}
        )
        lead1 = await next_lead(c1, 10)
        assert lead1.replica == a.addr and lead1.key == keys.leader_candidate(ROLE, "c1")
        c2 = elector(electors, b.addr, a.addr).campaign(ROLE, candidate_id="c2", ttl_s=TTL_S)
        await wait_until(lambda: c2.state == "waiting", timeout_s=10, what="c2 waiting on B")
        assert c2.replica == b.addr and c2.leader is not None and c2.leader.term == lead1.term
        assert await fenced_put(etcd_store, lead1, keys.load_report())
        stored = await read_leader(etcd_store, keys, ROLE)
        assert stored is not None and stored.metadata == {"addr": "10.0.0.1:7000"}

        a.kill9()
        t0 = time.monotonic()
        await wait_until(lead1.lost.is_set, timeout_s=5, what="c1 to see its term lost")
        t_lost = time.monotonic() - t0
        lead2 = await next_lead(c2, TTL_S + 8)
        t_elected = time.monotonic() - t0
        print(
            f"\nkill -9 of replica A: c1 lost after {t_lost:.2f}s, c2 elected after {t_elected:.2f}s (TTL {TTL_S}s)"
        )
        assert lead2.term > lead1.term and lead2.replica == b.addr
        assert lead1.is_lost, "the old term was lost before the new one was handed out"

        # The old term's fence fails in a real etcd transaction; the new one's holds.
        assert not await fenced_put(etcd_store, lead1, keys.load_report())
        assert await fenced_put(etcd_store, lead2, keys.load_report())

        # c1 campaigns again through B (refused while its old key lived), and waits behind c2.
        await wait_until(
            lambda: c1.state == "waiting" and c1.replica == b.addr,
            timeout_s=TTL_S + 10,
            what="c1 to campaign again through B",
        )
        assert c1.leader is not None and c1.leader.candidate_id == "c2"
        again = await etcd_store.get(keys.leader_candidate(ROLE, "c1"))
        assert again is not None and again.create_revision > lead2.term

        await wait_until(lambda: watch.leaders()[-1:] == ["c2"], timeout_s=5, what="the watch to see c2")
        assert watch.terms() == sorted(set(watch.terms())), f"terms must strictly increase: {watch.seen}"
        assert watch.leaders() == ["c1", "c2"]
    finally:
        await watch.aclose()


async def test_a_frozen_replica_is_left_by_its_candidates_and_its_leases_expire(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    a, b = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 2)
    ttl = 4  # above the client's heartbeat deadline, so the candidate knows before the lease ends
    c1 = elector(electors, a.addr, b.addr, heartbeat_deadline_s=1.5).campaign(
        ROLE, candidate_id="c1", ttl_s=ttl
    )
    lead1 = await next_lead(c1, 10)
    c2 = elector(electors, b.addr).campaign(ROLE, candidate_id="c2", ttl_s=ttl)
    await wait_until(lambda: c2.state == "waiting", timeout_s=10, what="c2 waiting")

    a.proc.send_signal(signal.SIGSTOP)  # no crash, no reset: only silence
    t0 = time.monotonic()
    await wait_until(lead1.lost.is_set, timeout_s=10, what="c1 to give up on the silent replica")
    t_lost = time.monotonic() - t0
    assert c2.current is None, "c1 noticed before its lease could expire"
    lead2 = await next_lead(c2, ttl + 8)
    t_elected = time.monotonic() - t0
    print(
        f"\nSIGSTOP of replica A: c1 lost after {t_lost:.2f}s, c2 elected after {t_elected:.2f}s (TTL {ttl}s)"
    )
    assert lead2.term > lead1.term
    assert not await fenced_put(etcd_store, lead1, keys.load_report())
    await wait_until(lambda: c1.state == "waiting" and c1.replica == b.addr, timeout_s=15, what="c1 on B")


CANDIDATE = """
import asyncio, sys
from danube_common.leadership import Elector

async def main() -> None:
    elector = Elector(sys.argv[1].split(","), heartbeat_deadline_s=3.0)
    async for lead in elector.lead(sys.argv[2], candidate_id=sys.argv[3], ttl_s=int(sys.argv[4])):
        print("ELECTED", lead.term, flush=True)

asyncio.run(main())
"""


def spawn_candidate(log: Path, addr: str, candidate_id: str, ttl_s: int) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", CANDIDATE, addr, ROLE, candidate_id, str(ttl_s)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
async def test_a_crashed_or_frozen_candidate_loses_the_role_well_before_its_ttl(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
    sig: signal.Signals,
) -> None:
    fast_keepalive = {"DANUBE_LEADER_KEEPALIVE_TIME_S": "1", "DANUBE_LEADER_KEEPALIVE_TIMEOUT_S": "1"}
    (a,) = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 1, env=fast_keepalive)
    ttl = 30  # long: only the replica noticing the candidate is gone can hand over quickly
    candidate = spawn_candidate(tmp_path / "candidate.log", a.addr, "remote", ttl)
    try:

        async def remote_leads() -> bool:
            info = await read_leader(etcd_store, keys, ROLE)
            return info is not None and info.candidate_id == "remote"

        await wait_until(remote_leads, timeout_s=30, what="the candidate process to lead")
        c2 = elector(electors, a.addr).campaign(ROLE, candidate_id="local", ttl_s=ttl)
        await wait_until(lambda: c2.state == "waiting", timeout_s=10, what="local waiting")

        candidate.send_signal(sig)
        t0 = time.monotonic()
        lead2 = await next_lead(c2, 15)
        elapsed = time.monotonic() - t0
        print(f"\ncandidate {sig.name}: next elected after {elapsed:.2f}s (TTL {ttl}s)")
        assert elapsed < ttl / 3
        assert lead2.candidate_id == "local"
        assert await etcd_store.get(keys.leader_candidate(ROLE, "remote")) is None
    finally:
        candidate.kill()
        candidate.wait(timeout=10)


async def test_cancelling_a_campaign_elects_the_next_at_once(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    (a,) = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 1)
    ttl = 30  # long: only a revoke can hand over quickly
    c1 = elector(electors, a.addr).campaign(ROLE, candidate_id="c1", ttl_s=ttl)
    lead1 = await next_lead(c1, 10)
    c2 = elector(electors, a.addr).campaign(ROLE, candidate_id="c2", ttl_s=ttl)
    await wait_until(lambda: c2.state == "waiting", timeout_s=10, what="c2 waiting")

    t0 = time.monotonic()
    await c1.aclose()
    assert lead1.is_lost
    lead2 = await next_lead(c2, 10)
    elapsed = time.monotonic() - t0
    print(f"\ncancelled campaign: next elected after {elapsed:.3f}s (TTL {ttl}s)")
    assert elapsed < ttl / 3, "the lease must be revoked, not left to expire"
    assert lead2.term > lead1.term
    assert await etcd_store.get(lead1.key) is None


async def test_sigterm_revokes_so_the_candidate_moves_to_the_other_replica(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    a, b = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 2)
    ttl = 30
    c1 = elector(electors, a.addr, b.addr).campaign(ROLE, candidate_id="c1", ttl_s=ttl)
    lead1 = await next_lead(c1, 10)
    c2 = elector(electors, b.addr).campaign(ROLE, candidate_id="c2", ttl_s=ttl)
    await wait_until(lambda: c2.state == "waiting", timeout_s=10, what="c2 waiting")

    t0 = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    lead2 = await next_lead(c2, 15)
    elapsed = time.monotonic() - t0
    print(f"\nSIGTERM of replica A: next elected after {elapsed:.2f}s (TTL {ttl}s)")
    assert elapsed < ttl / 3 and lead2.term > lead1.term
    assert lead1.is_lost
    assert await asyncio.to_thread(a.proc.wait, 15) == 0
    assert not a.ready.exists()
    # Its key was revoked, so c1 is accepted at once on B and waits behind c2.
    await wait_until(lambda: c1.state == "waiting" and c1.replica == b.addr, timeout_s=10, what="c1 on B")


async def test_terms_strictly_increase_through_handovers(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    a, b = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 2)
    watch = LeaderLog(elector(electors, a.addr, b.addr), ROLE)
    try:
        pool: list[Candidacy] = []
        counter = 0

        def add_candidate() -> None:
            nonlocal counter
            addrs = (a.addr, b.addr) if counter % 2 == 0 else (b.addr, a.addr)
            pool.append(elector(electors, *addrs).campaign(ROLE, candidate_id=f"c{counter}", ttl_s=30))
            counter += 1

        for _ in range(3):
            add_candidate()
        handed: list[Leadership] = []
        for _round in range(6):

            def new_leader() -> Leadership | None:
                for c in pool:
                    if c.current is not None and not c.current.is_lost and c.current not in handed:
                        return c.current
                return None

            lead = await wait_until(new_leader, timeout_s=15, what="the next leader")
            live = [c.current for c in pool if c.current is not None and not c.current.is_lost]
            assert live == [lead], f"one live leadership at a time, got {live}"
            assert all(h.is_lost for h in handed), "every earlier term was lost first"
            assert not handed or lead.term > handed[-1].term
            stored = await read_leader(etcd_store, keys, ROLE)
            assert stored is not None and (stored.key, stored.term) == (lead.key, lead.term)
            assert await fenced_put(etcd_store, lead, keys.load_report())
            if handed:
                assert not await fenced_put(etcd_store, handed[-1], keys.load_report())
            handed.append(lead)
            holder = next(c for c in pool if c.current is lead)
            pool.remove(holder)
            await holder.aclose()
            add_candidate()

        terms = [h.term for h in handed]
        assert terms == sorted(set(terms)), f"ELECTED terms must strictly increase: {terms}"
        await wait_until(
            lambda: handed[-1].term in watch.terms(), timeout_s=5, what="the watch to see the last leader"
        )
        assert watch.terms() == sorted(set(watch.terms())), f"watched terms: {watch.terms()}"
        # The watch saw only handed-out terms, plus perhaps the successor of the last one.
        extra = set(watch.terms()) - {h.term for h in handed}
        assert len(extra) <= 1 and all(t > handed[-1].term for t in extra), watch.seen
    finally:
        await watch.aclose()


async def test_grpc_surface_get_list_duplicates_and_bad_input(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    cluster_name: str,
    keys: Keys,
    tmp_path: Path,
    procs: list[LeaderProc],
    electors: list[Elector],
) -> None:
    (a,) = await start_replicas(etcd_server, cluster_name, tmp_path, procs, 1)
    e = elector(electors, a.addr)
    assert await e.get_leader(ROLE) is None
    c = e.campaign(ROLE, candidate_id="lm-1", ttl_s=TTL_S, metadata={"addr": "h:1"})
    lead = await next_lead(c, 10)
    p = e.campaign("spark-planner", candidate_id="sp-1", ttl_s=TTL_S)
    await next_lead(p, 10)

    info = await e.get_leader(ROLE)
    assert info == LeaderInfo(ROLE, "lm-1", lead.term, lead.key, {"addr": "h:1"})
    listed = await e.list_leaders()
    assert {r: i.candidate_id for r, i in listed.items()} == {ROLE: "lm-1", "spark-planner": "sp-1"}
    assert listed == await read_leaders(etcd_store, keys), "the service and etcd agree"

    async with grpc.aio.insecure_channel(a.addr) as channel:
        stub = lpb_grpc.LeaderElectionStub(channel)
        nobody = await stub.GetLeader(lpb.GetLeaderRequest(role="nobody-leads"), timeout=5)
        assert nobody.role == "nobody-leads" and nobody.candidate_id == "" and nobody.term == 0

        dup = stub.Campaign(lpb.CampaignRequest(role=ROLE, candidate_id="lm-1", ttl_s=TTL_S))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await dup.read()
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "already campaigns" in (err.value.details() or "")
        assert (MD_ERROR_CODE, "ALREADY_EXISTS") in tuple(err.value.trailing_metadata() or ())

        for bad, words in [
            (lpb.CampaignRequest(role="a/b", candidate_id="x"), "role 'a/b' is not allowed"),
            (lpb.CampaignRequest(role=ROLE, candidate_id="x", ttl_s=1_000_000), "bounds"),
        ]:
            call = stub.Campaign(bad)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call.read()
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in (
                err.value.details() or ""
            )

        # A raw stream: WAITING first (lm-1 leads), then heartbeats; cancelling revokes.
        raw = stub.Campaign(lpb.CampaignRequest(role=ROLE, candidate_id="lm-2", ttl_s=30))
        first = await raw.read()
        assert first.kind == lpb.CampaignEvent.WAITING and first.leader.candidate_id == "lm-1"
        assert first.ttl_s == 30 and first.key == keys.leader_candidate(ROLE, "lm-2")
        beat = await asyncio.wait_for(raw.read(), timeout=5)
        assert beat.kind == lpb.CampaignEvent.HEARTBEAT
        raw.cancel()
        gone = keys.leader_candidate(ROLE, "lm-2")

        async def revoked() -> bool:
            return await etcd_store.get(gone) is None

        await wait_until(revoked, timeout_s=5, what="lm-2's key revoked when its stream was cancelled")


def test_process_help_and_bad_flags() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "danube_leader", "--help"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and "--listen HOST:PORT" in out.stdout and "examples:" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "danube_leader", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "error: invalid configuration: listen_addr" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "danube_leader", "--listen", "127.0.0.1:0"],
        env={**os.environ, "DANUBE_LEADER_MIN_TTL_S": "50"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "min_ttl_s <= default_ttl_s" in out.stderr
