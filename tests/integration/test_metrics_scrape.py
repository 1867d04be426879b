"""Every service's ``/metrics`` after real traffic: one cluster in this event loop (real etcd,
the leader service, one lookup, two load managers, two brokers each with its WAL uploader on a
local object store, the planner with the python engine), driven through the SDK and the admin
API, scraped over HTTP and parsed with prometheus_client's own parser.

The values are checked against what was done: messages in and out per topic, backlog N before
the acks and 0 after, a nack and its redelivery, WAL appends equal to what was published,
fsyncs and segment rotations, uploads of the sealed segments, exactly one load manager leading
(with the term etcd shows), a planner cycle, lookups and placements, a topic move counted out on
one broker and in on the other. A second, secured service (auth on) answers ``/metrics`` 401
without a token, 403 to a principal without ``lookup``, 200 with it, and counts those refusals
and a refused RPC by code.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import grpc.aio
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from danube_broker.app import running as broker_running
from danube_broker.config import BrokerConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.leadership import read_leaders
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.resources import Resources
from danube_common.security import Binding, Scope, SecurityStore, issue_token
from danube_common.service import ServiceReady
from danube_common.service import running as service_running
from danube_common.topic_name import TopicName
from danube_leader.app import running as leader_running
from danube_leader.config import LeaderConfig
from danube_load_manager.app import run as load_manager_run
from danube_load_manager.config import LoadManagerConfig
from danube_lookup.app import running as lookup_running
from danube_lookup.config import LookupConfig
from danube_planner.app import run as planner_run
from danube_planner.config import PlannerConfig
from danube_planner.model import PLANNER_ROLE
from danube_sdk import DanubeClient, DispatchStrategy, SubType
from danube_wal_uploader.app import running as uploader_running
from danube_wal_uploader.config import WalUploaderConfig
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
module_loop = pytest.mark.asyncio(loop_scope="module")

RELIABLE_N = 60
UNACKED = 10
NON_RELIABLE_M = 40
PAYLOAD = b"x" * 100
HTTP = "127.0.0.1:0"


# ---------------------------------------------------------------------- scraping
Labels = frozenset[tuple[str, str]]


@dataclass
class Scrape:
    """One ``/metrics`` answer: sample name -> {labels: value}."""

    samples: dict[str, dict[Labels, float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        out: dict[str, dict[Labels, float]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
        return cls(out)

    def get(self, name: str, **labels: str) -> float | None:
        """The one sample of ``name`` with exactly ``labels`` (None: absent)."""
        return self.samples.get(name, {}).get(frozenset(labels.items()))

    def value(self, name: str, **labels: str) -> float:
        v = self.get(name, **labels)
        assert v is not None, f"no sample {name}{labels}; have {sorted(self.samples.get(name, {}))}"
        return v

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for ls, v in self.samples.get(name, {}).items() if want <= ls)


async def scrape(info: ServiceReady, token: str | None = None) -> Scrape:
    status, text = await fetch(info, token)
    assert status == 200, text
    return Scrape.parse(text)


async def fetch(info: ServiceReady, token: str | None = None) -> tuple[int, str]:
    assert info.metrics_url, f"{info.service} serves no HTTP endpoint"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        http.get(info.metrics_url, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def scrape_all(infos: Iterable[ServiceReady]) -> list[Scrape]:
    return list(await asyncio.gather(*(scrape(i) for i in infos)))


def total(scrapes: Iterable[Scrape], name: str, **labels: str) -> float:
    return sum(s.total(name, **labels) for s in scrapes)


# ---------------------------------------------------------------------- the cluster
@dataclass
class Cluster:
    etcd: dict[str, Any]
    store: EtcdStore
    keys: Keys
    leader: ServiceReady
    lookup: ServiceReady
    load_managers: list[ServiceReady]
    brokers: list[ServiceReady]
    uploaders: list[ServiceReady]
    planner: ServiceReady
    client: DanubeClient
    #: What the traffic fixture did: the two topics, the reliable consumer, and the messages it
    #: received but did not acknowledge.
    topics: dict[str, str] = field(default_factory=dict)
    rel_consumer: Any = None
    unacked: list[Any] = field(default_factory=list)

    @property
    def every_service(self) -> list[ServiceReady]:
        return [self.leader, self.lookup, *self.load_managers, *self.brokers, *self.uploaders, self.planner]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_server: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    tmp: Path = tmp_path_factory.mktemp("metrics")
    etcd = {"endpoints": [etcd_server.endpoint], "cluster": unique("metrics")}
    objects = {"backend": "local", "local_dir": str(tmp / "objects")}
    common = {"etcd": etcd, "http_listen_addr": HTTP, "shutdown_grace_s": 0.5}
    async with contextlib.AsyncExitStack() as stack:
        store = EtcdStore([etcd_server.endpoint], request_timeout_s=5.0)
        stack.push_async_callback(store.aclose)
        await store.wait_ready(10)

        async def start(cm: Any) -> ServiceReady:
            info: ServiceReady = await stack.enter_async_context(cm)
            return info

        leader = await start(
            leader_running(
                LeaderConfig.model_validate(
                    {"listen_addr": "127.0.0.1:0", "heartbeat_interval_s": 0.5, **common}
                )
            )
        )
        lookup = await start(
            lookup_running(
                LookupConfig.model_validate(
                    {"listen_addr": "127.0.0.1:0", "admin_listen_addr": "127.0.0.1:0", **common}
                )
            )
        )
        load_managers = [
            await start(
                service_running(
                    load_manager_run,
                    LoadManagerConfig.model_validate(
                        {
                            "candidate_id": f"lm-{i}",
                            "leader_endpoints": [leader.addr],
                            "listen_addr": "127.0.0.1:0",
                            "reconcile_interval_s": 0.2,
                            "move_cooldown_s": 0,
                            **common,
                        }
                    ),
                    name=f"load-manager-{i}",
                )
            )
            for i in (1, 2)
        ]
        uploaders, brokers = [], []
        for broker_id in ("1", "2"):
            data_dir = str(tmp / f"broker-{broker_id}")
            uploader = await start(
                uploader_running(
                    WalUploaderConfig.model_validate(
                        {
                            "broker_id": broker_id,
                            "data_dir": data_dir,
                            "listen_addr": "127.0.0.1:0",
                            "object_store": objects,
                            "scan_interval_s": 0.1,
                            **common,
                        }
                    )
                )
            )
            uploaders.append(uploader)
            brokers.append(
                await start(
                    broker_running(
                        BrokerConfig.model_validate(
                            {
                                "broker_id": broker_id,
                                "data_dir": data_dir,
                                "listen_addr": "127.0.0.1:0",
                                "object_store": objects,
                                "uploader_addr": uploader.addr,
                                # Small segments: the test's traffic seals a few.
                                "wal": {"segment_max_bytes": 4096},
                                "redelivery_backoff_base_ms": 10,
                                "lame_duck_timeout_s": 0,
                                "load_report_interval_s": 0.5,
                                **common,
                            }
                        )
                    )
                )
            )
        # No moves of its own (the test makes the one move it counts).
        planner = await start(
            service_running(
                planner_run,
                PlannerConfig.model_validate(
                    {
                        "engine": "python",
                        "candidate_id": "planner-1",
                        "leader_endpoints": [leader.addr],
                        "interval_s": 0.5,
                        "max_moves_per_cycle": 0,
                        "object_store": objects,
                        "etcd": etcd,
                        "http_listen_addr": HTTP,
                    }
                ),
                name="planner",
            )
        )
        client = DanubeClient(f"http://{lookup.addr}")
        stack.push_async_callback(client.close)
        yield Cluster(
            etcd,
            store,
            Keys(etcd["cluster"]),
            leader,
            lookup,
            load_managers,
            brokers,
            uploaders,
            planner,
            client,
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def traffic(cluster: Cluster) -> Cluster:
    """A reliable topic (RELIABLE_N messages, all received, UNACKED of them not acked yet) and a
    non-reliable one (NON_RELIABLE_M messages, all received)."""
    c = cluster.client
    rel, nonrel = f"/default/{unique('rel')}", f"/default/{unique('nonrel')}"
    cluster.topics = {"reliable": rel, "non_reliable": nonrel}

    rel_producer = await c.create_producer(
        rel, producer_name="p-rel", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    rel_consumer = await c.subscribe(rel, subscription="s", consumer_name="c-rel", sub_type=SubType.EXCLUSIVE)
    nr_producer = await c.create_producer(nonrel, producer_name="p-nr")
    nr_consumer = await c.subscribe(
        nonrel, subscription="s", consumer_name="c-nr", sub_type=SubType.EXCLUSIVE
    )

    for _ in range(RELIABLE_N // 10):  # several commits: the WAL seals a few 4 KiB segments
        await rel_producer.send_many([PAYLOAD] * 10)
    await nr_producer.send_many([PAYLOAD] * NON_RELIABLE_M)
    rel_msgs = await receive(rel_consumer, RELIABLE_N)
    await receive(nr_consumer, NON_RELIABLE_M)
    for msg in rel_msgs[:-UNACKED]:
        await rel_consumer.ack(msg)
    await rel_consumer.flush_acks()
    cluster.unacked = rel_msgs[-UNACKED:]
    cluster.rel_consumer = rel_consumer
    await rel_producer.close()
    await nr_producer.close()
    return cluster


async def receive(consumer: Any, n: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < n:
        got += await consumer.receive_many(n - len(got), timeout_s=10)
    assert len(got) == n
    return got


# ---------------------------------------------------------------------- the checks
@module_loop
async def test_every_service_serves_metrics(cluster: Cluster) -> None:
    scrapes = await scrape_all(cluster.every_service)
    for info, s in zip(cluster.every_service, scrapes, strict=True):
        assert s.value("process_resident_memory_bytes") > 0, info.service
        # The services share this test's process: its collections so far (young ones at least).
        assert s.value("danube_gc_pause_seconds_count", generation="0") > 0, info.service
    # Auth is off here: nothing counts denials.
    assert all("danube_authz_deny_total" not in s.samples for s in scrapes)
    for s in await scrape_all(cluster.brokers):
        # Registered, and renewed on time: the ack deadline is ahead (at most TTL - margin).
        left = s.value("danube_broker_lease_surely_alive_seconds")
        assert 0 < left <= 10, left
        assert s.value("danube_broker_lease_renewal_failures_total") == 0


@module_loop
async def test_topic_traffic_is_counted(traffic: Cluster) -> None:
    rel, nonrel = traffic.topics["reliable"], traffic.topics["non_reliable"]
    brokers = await scrape_all(traffic.brokers)
    assert total(brokers, "danube_topic_messages_in_total", topic=rel) == RELIABLE_N
    assert total(brokers, "danube_topic_bytes_in_total", topic=rel) == RELIABLE_N * len(PAYLOAD)
    assert total(brokers, "danube_topic_messages_in_total", topic=nonrel) == NON_RELIABLE_M
    assert total(brokers, "danube_consumer_messages_out_total", topic=nonrel) == NON_RELIABLE_M
    assert total(brokers, "danube_consumer_bytes_out_total", topic=nonrel) == NON_RELIABLE_M * len(PAYLOAD)
    assert total(brokers, "danube_consumer_messages_out_total", topic=rel) >= RELIABLE_N
    for topic in (rel, nonrel):
        assert total(brokers, "danube_topic_active_subscriptions", topic=topic) == 1
        assert total(brokers, "danube_topic_active_consumers", topic=topic) == 1
        assert total(brokers, "danube_subscription_active_consumers", topic=topic, subscription="s") == 1
    # Both producers were closed.
    assert total(brokers, "danube_topic_active_producers") == 0
    assert total(brokers, "danube_broker_topics_owned") == 2
    assert total(brokers, "danube_broker_assignments_total") == 2
    # Nothing beyond the bound: no "_other" series with two topics.
    assert total(brokers, "danube_topic_messages_in_total", topic="_other") == 0
    # One latency observation per acknowledged batch (the SDK batches; at least one each).
    batches = total(brokers, "danube_producer_send_total")
    assert 2 <= batches <= RELIABLE_N + NON_RELIABLE_M
    assert total(brokers, "danube_producer_send_latency_seconds_count") == batches
    assert total(brokers, "danube_producer_send_latency_seconds_sum") > 0


@module_loop
async def test_wal_and_uploads(traffic: Cluster) -> None:
    rel = traffic.topics["reliable"]
    brokers = await scrape_all(traffic.brokers)
    # Only the reliable topic has a WAL: every message published to it, once.
    assert total(brokers, "danube_wal_append_total") == RELIABLE_N
    assert total(brokers, "danube_wal_append_bytes_total") > RELIABLE_N * len(PAYLOAD)
    assert total(brokers, "danube_wal_flush_latency_seconds_count") >= 1
    assert total(brokers, "danube_wal_flush_errors_total") == 0
    # the broker's shared commit scheduler ran the commits (one round per hop, >= 1 topic each)
    assert total(brokers, "danube_wal_commit_round_topics_count") >= 1
    assert total(brokers, "danube_wal_commit_round_topics_sum") >= total(
        brokers, "danube_wal_commit_round_topics_count"
    )
    assert total(brokers, "danube_wal_disk_bytes") > 0
    # 60 records of ~100 bytes in 4 KiB segments: some were sealed ...
    assert total(brokers, "danube_wal_file_rotate_total") >= 1

    # ... and the uploader ships sealed segments.
    async def uploaded() -> list[Scrape] | None:
        s = await scrape_all(traffic.uploaders)
        return s if total(s, "danube_cloud_upload_total") >= 1 else None

    uploaders = await wait_until(uploaded, timeout_s=15, interval_s=0.1, what="an upload")
    assert total(uploaders, "danube_cloud_upload_bytes_total") > 0
    assert total(uploaders, "danube_cloud_upload_errors_total") == 0
    assert total(uploaders, "danube_wal_uploader_broker_alive") == 2
    assert total(uploaders, "danube_wal_uploader_topics") == 1
    lag = [s.get("danube_cloud_upload_lag_bytes", topic=rel) for s in uploaders]
    assert sum(v is not None for v in lag) == 1  # the uploader of the topic's broker shows it


@module_loop
async def test_backlog_nack_and_redelivery(traffic: Cluster) -> None:
    rel = traffic.topics["reliable"]
    consumer, unacked = traffic.rel_consumer, traffic.unacked

    async def lag() -> float:
        return total(
            await scrape_all(traffic.brokers), "danube_subscription_lag_messages", topic=rel, subscription="s"
        )

    assert await lag() == UNACKED
    await consumer.nack(unacked[0], delay_ms=1)
    again = await consumer.receive(timeout_s=10)
    assert again.offset == unacked[0].offset
    for msg in unacked:
        await consumer.ack(msg)
    await consumer.flush_acks()
    await wait_until(lambda: lag_is_zero(traffic, rel), timeout_s=10, what="lag 0 after the acks")
    brokers = await scrape_all(traffic.brokers)
    assert total(brokers, "danube_subscription_nack_total", topic=rel, subscription="s") == 1
    assert total(brokers, "danube_subscription_redelivery_total", topic=rel, subscription="s") >= 1
    assert total(brokers, "danube_subscription_dlq_total", topic=rel, subscription="s") == 0
    assert total(brokers, "danube_subscription_terminal_blocked", topic=rel, subscription="s") == 0


async def lag_is_zero(c: Cluster, topic: str) -> bool:
    s = await scrape_all(c.brokers)
    return total(s, "danube_subscription_lag_messages", topic=topic, subscription="s") == 0


@module_loop
async def test_control_plane(traffic: Cluster) -> None:
    leaders = await read_leaders(traffic.store, traffic.keys)
    lm = leaders[LOAD_MANAGER_ROLE]
    lms = await scrape_all(traffic.load_managers)
    states = [s.value("danube_leader_election_state", role=LOAD_MANAGER_ROLE) for s in lms]
    assert sorted(states) == [0, 1]
    leading = lms[states.index(1)]
    assert leading.value("danube_leader_term", role=LOAD_MANAGER_ROLE) == lm.term
    assert leading.value("danube_load_manager_passes_total") >= 1
    assert leading.value("danube_cluster_brokers", state="active") == 2
    assert leading.value("danube_cluster_topics") == 2

    lookup = await scrape(traffic.lookup)
    # Two new topics, each placed once: by the leading load manager when the lookup asked it,
    # by the lookup itself if it had not seen a load manager lead yet.
    requested = lookup.value("danube_lookup_placements_total", how="requested")
    assert requested + lookup.value("danube_lookup_placements_total", how="placed") == 2
    assert total(lms, "danube_load_manager_actions_total", kind="place", result="applied") == requested
    assert lookup.total("danube_lookup_topic_lookups_total") >= 4  # a producer and a consumer each

    async def planned() -> Scrape | None:
        s = await scrape(traffic.planner)
        return s if s.value("danube_rebalancing_cycles_total", result="written") >= 1 else None

    planner = await wait_until(planned, timeout_s=15, interval_s=0.1, what="a planner cycle")
    leaders = await read_leaders(traffic.store, traffic.keys)
    assert planner.value("danube_leader_election_state", role=PLANNER_ROLE) == 1
    assert planner.value("danube_leader_term", role=PLANNER_ROLE) == leaders[PLANNER_ROLE].term

    leader = await scrape(traffic.leader)
    assert leader.value("danube_leader_campaigns", role=LOAD_MANAGER_ROLE) == 2
    assert leader.value("danube_leader_campaigns_elected", role=LOAD_MANAGER_ROLE) == 1
    assert leader.value("danube_leader_campaigns", role=PLANNER_ROLE) == 1
    assert leader.value("danube_leader_campaigns_elected", role=PLANNER_ROLE) == 1
    assert planner.value("danube_rebalancing_cycle_duration_seconds_count") >= 1
    assert planner.value("danube_rebalancing_cycles_total", result="failed") == 0
    assert planner.value("danube_cluster_imbalance_cv") >= 0
    assert planner.value("danube_rebalancing_plans_total") == 0  # no moves allowed: no plan


@module_loop
async def test_a_move_is_counted_on_both_brokers(traffic: Cluster) -> None:
    topic = traffic.topics["non_reliable"]
    res = Resources(traffic.store, traffic.keys)
    own = await res.get_owner(TopicName.parse(topic))
    assert own is not None
    ids = [b.extra["broker_id"] for b in traffic.brokers]
    source, target = ids.index(own.broker_id), 1 - ids.index(own.broker_id)
    acquired = (await scrape(traffic.brokers[target])).value("danube_broker_assignments_total")
    async with grpc.aio.insecure_channel(traffic.lookup.admin_addr) as channel:
        await apb_grpc.TopicAdminStub(channel).MoveTopic(
            apb.MoveTopicRequest(name=topic, to_broker=ids[target]), timeout=5
        )

    async def moved() -> bool:
        o = await res.get_owner(TopicName.parse(topic))
        return o is not None and o.broker_id == ids[target] and not o.moving_to

    await wait_until(moved, timeout_s=15, what="the move")
    out = await scrape(traffic.brokers[source])
    into = await wait_until(lambda: scraped_in(traffic.brokers[target]), timeout_s=5, what="the move in")
    assert out.value("danube_broker_topic_moves_total", direction="out", outcome="handed_over") == 1
    assert into.value("danube_broker_topic_moves_total", direction="in", outcome="handed_over") == 1
    assert into.value("danube_broker_assignments_total") == acquired + 1
    lms = await scrape_all(traffic.load_managers)
    assert total(lms, "danube_rebalancing_moves_total", outcome="started") == 1
    assert total(lms, "danube_load_manager_actions_total", kind="move", result="applied") == 1


async def scraped_in(info: ServiceReady) -> Scrape | None:
    s = await scrape(info)
    return s if s.get("danube_broker_topic_moves_total", direction="in", outcome="handed_over") else None


# ---------------------------------------------------------------------- auth
ISSUER = "danube-metrics-test"


@module_loop
async def test_metrics_with_auth(etcd_server: EtcdProcess, tmp_path: Path) -> None:
    secret = tmp_path / "jwt-secret"
    secret.write_text("s" * 48)
    name = unique("metrics-auth")
    store = EtcdStore([etcd_server.endpoint], request_timeout_s=5.0)
    try:
        await store.wait_ready(10)
        rbac = SecurityStore(store, Keys(name))
        await rbac.create_binding(Binding("prom", "user:prom", "consumer", Scope.CLUSTER))
    finally:
        await store.aclose()
    cfg = LeaderConfig.model_validate(
        {
            "listen_addr": "127.0.0.1:0",
            "http_listen_addr": HTTP,
            "etcd": {"endpoints": [etcd_server.endpoint], "cluster": name},
            "shutdown_grace_s": 0.5,
            "auth": {"enabled": True, "jwt": {"issuer": ISSUER, "secret_file": str(secret)}},
        }
    )

    def token(user: str) -> str:
        return issue_token(user, "user", user, 300, secret.read_text(), ISSUER)

    async with leader_running(cfg) as info:
        status, body = await fetch(info)
        assert status == 401, body
        status, body = await fetch(info, token("nobody"))  # authenticated, holds nothing
        assert status == 403, body
        async with grpc.aio.insecure_channel(info.addr) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await lpb_grpc.LeaderElectionStub(channel).ListLeaders(lpb.ListLeadersRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        s = await scrape(info, token("prom"))  # `lookup` through the consumer role
        assert s.value("danube_authz_deny_total", code="UNAUTHENTICATED") == 2  # HTTP 401 + the RPC
        assert s.value("danube_authz_deny_total", code="PERMISSION_DENIED") == 1  # HTTP 403
