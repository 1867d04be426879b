"""The compose deployment, run for real: deploy/docker-compose.yml + deploy/docker-compose.test.yml.

Every service of the compose file (etcd, the S3 endpoint, two leader replicas, the lookup, three
brokers with their WAL uploaders, two load managers and the Spark planner) runs in containers of
locally built images, on the host's network and free loopback ports. Through the SDK
(``danube_sdk``) and ``danube-admin`` on the host:

- every service is healthy and registered (brokers, load manager and planner roles);
- every Danube service's /metrics answers (what Prometheus scrapes in docker-compose.yml;
  Prometheus, Grafana, the collector and Jaeger are not run: public images), one load manager
  leading;
- a reliable topic is produced and consumed; the container of the broker that owns it is killed
  (``docker kill``); every topic that broker owned is re-placed on another broker, and the
  consumer gets every acknowledged message (the dead broker's WAL uploader, still running,
  ships the rest of its log to S3 and records where it ends);
- the running planner (Spark local mode in its container) answers a rebalance request;
- the planner's one-shot mode: the planner service is stopped (it resigns) and
  ``compose run planner ... --once`` runs one fenced cycle in a one-off container of the same
  service, which writes a new cluster load report.

The secured stack (marker ``compose_secure``, run by ``scripts/compose_test.sh --secure`` only:
the same files plus deploy/docker-compose.secure.yml and docker-compose.secure-test.yml) comes up
with its one-shot ``certs`` service; the CA and the admin token copied out of its volume let the
SDK and ``danube-admin`` work over TLS, while plaintext, token-less and certificate-less clients
(where the cluster's services require certificates) and etcd clients without a certificate are
refused; ``/metrics`` is HTTPS and answers 401 without a token, 200 with the admin's.

Each stack is taken down with its volumes at the end (``down -v``), whatever happened.

Needs a Docker engine and the images: run ``scripts/compose_test.sh``, which installs Docker,
starts the engine, builds the images, runs this and cleans up. Without an engine the tests are
skipped with the reason and a warning; they fail instead under ``DANUBE_COMPOSE_REQUIRE=1``
(the script sets it once the engine answers and the images are built).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from danube_common.config import EtcdConfig
from danube_common.errors import DanubeError
from danube_common.etcd_server import free_port
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_sdk import DanubeClient, DispatchStrategy, InitialPosition, SubType, TlsOptions
from tests.e2e.conftest import cli, subprocess_env
from tests.support import containers, unique, wait_until, wait_until_sync
from tests.support.compose import (
    COMPOSE_FILES,
    PORT_VARS,
    SECURE_COMPOSE_FILES,
    SECURE_PORT_VARS,
    ComposeStack,
    compose_command,
    project_name,
)

pytestmark = [pytest.mark.compose, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@contextlib.contextmanager
def running_stack(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    *,
    files: Sequence[Path] = COMPOSE_FILES,
    port_vars: Sequence[str] = PORT_VARS,
    ready: Callable[[ComposeStack], None],
) -> Iterator[ComposeStack]:
    """``files`` up on free loopback ports until every service is healthy and ``ready`` returned;
    always down (with its volumes) afterwards, its logs kept when something failed."""
    containers.skip_without_engine(
        "compose test", images=[containers.PROJECT_IMAGE, *containers.SERVER_IMAGES]
    )
    command = compose_command()
    if command is None:
        containers.not_run("compose test", "neither `docker compose` nor `docker-compose` is installed")
    env = {
        f"DANUBE_TEST_{name}_PORT": str(p)
        for name, p in zip(port_vars, free_ports(len(port_vars)), strict=True)
    }
    env["DANUBE_TEST_IMAGE"] = containers.PROJECT_IMAGE
    workdir = tmp_path_factory.mktemp("compose")
    project = project_name()
    s = ComposeStack(project=project, env=env, workdir=workdir, command=command, files=files)
    print(f"\ncompose: {' '.join(command)} -p {project} (rendered: {s.rendered})")
    failed_before = request.session.testsfailed
    started = time.monotonic()
    try:
        s.up()
        s.wait_healthy(timeout_s=300)
        print(f"compose: {len(s.services())} services healthy {time.monotonic() - started:.1f}s after `up`")
        ready(s)
        print(f"compose: ready {time.monotonic() - started:.1f}s after `up`")
        yield s
    except Exception:  # the stack did not come up: keep its logs
        keep_logs(s, workdir)
        print(f"compose logs: {workdir}/logs/")
        raise
    finally:
        if request.session.testsfailed > failed_before:
            keep_logs(s, workdir)
            print(f"\ncompose logs (a test failed): {workdir}/logs/\n{s.logs(tail=40)}")
        s.down()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ComposeStack]:
    def ready(s: ComposeStack) -> None:
        # Healthy = serving; the control plane is ready once the roles are held (a load manager
        # places admin-created topics, the planner answers rebalance requests).
        wait_until_sync(lambda: roles_held(s) >= ROLES, timeout_s=120, what=f"roles {sorted(ROLES)} held")

    with running_stack(tmp_path_factory, request, ready=ready) as s:
        yield s


def keep_logs(stack: ComposeStack, workdir: Path) -> None:
    """Every service's whole log, one file each, for the post-mortem of a failed run."""
    out = workdir / "logs"
    out.mkdir(exist_ok=True)
    for service in stack.services():
        (out / f"{service}.log").write_text(stack.logs(service, tail="all"))


def url(stack: ComposeStack, var: str) -> str:
    return f"http://127.0.0.1:{stack.env[f'DANUBE_TEST_{var}_PORT']}"


def admin(stack: ComposeStack, *args: str, timeout_s: float = 60) -> Any:
    """``danube-admin -o json ARGS`` on the host against the stack's admin API; parsed JSON."""
    res = subprocess.run(
        [cli("danube-admin"), "--admin-url", url(stack, "ADMIN"), "--output", "json", *args],
        capture_output=True, text=True, timeout=timeout_s, env=subprocess_env(),
    )  # fmt: skip
    assert res.returncode == 0, f"danube-admin {' '.join(args)}: {res.stderr}"
    return json.loads(res.stdout) if res.stdout.strip() else None


ROLES = {"load-manager", "spark-planner"}


def roles_held(stack: ComposeStack) -> set[str]:
    """The roles someone leads now, per the admin API; empty while it does not answer."""
    res = subprocess.run(
        [cli("danube-admin"), "--admin-url", url(stack, "ADMIN"), "-o", "json", "leaders", "list"],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    if res.returncode != 0 or not res.stdout.strip():
        return set()
    return {entry["role"] for entry in json.loads(res.stdout)}


def owner(stack: ComposeStack, topic: str) -> str | None:
    res = subprocess.run(
        [cli("danube-admin"), "--admin-url", url(stack, "ADMIN"), "-o", "json", "topics", "describe", topic],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    if res.returncode != 0:
        return None
    broker = json.loads(res.stdout).get("broker_id")
    return str(broker) if broker else None


def test_every_service_is_up_and_registered(stack: ComposeStack) -> None:
    brokers = admin(stack, "brokers", "list")
    ids = sorted(str(b["broker_id"]) for b in brokers)
    assert ids == ["1", "2", "3"], brokers
    leaders = admin(stack, "leaders", "list")
    assert {entry["role"] for entry in leaders} >= ROLES, leaders


#: A family each kind of service exports (besides every process's ``process_*``).
METRIC_OF = {
    "danube-lookup": "danube_lookup_topic_lookups_total",
    "danube-broker": "danube_broker_topics_owned",
    "danube-leader": "danube_leader_campaigns",
    "danube-load-manager": "danube_leader_election_state",
    "danube-wal-uploader": "danube_wal_uploader_broker_alive",
    "danube-planner": "danube_rebalancing_cycles_total",
}


def metrics_urls(stack: ComposeStack, scheme: str = "http") -> dict[str, tuple[str, str]]:
    """service -> (its command, its /metrics URL), from each Danube service's --http-listen."""
    out = {}
    for service in stack.services():
        command = stack.command_of(service)
        listen = [a.split("=", 1)[1] for a in command if a.startswith("--http-listen=")]
        if listen:
            out[service] = (command[0], f"{scheme}://{listen[0]}/metrics")
    return out


def get(url: str, *, token: str | None = None, ca_file: Path | None = None) -> tuple[int, str]:
    """GET ``url``: (status, body), HTTP errors included."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=10, context=ctx
        ) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_every_service_serves_metrics(stack: ComposeStack) -> None:
    # What Prometheus scrapes in docker-compose.yml (the test cannot pull its image): each
    # Danube service's /metrics answers with its own families, and one load manager leads.
    # Before the broker-kill test: every service is still up.
    urls = metrics_urls(stack)
    assert set(METRIC_OF) == {command for command, _ in urls.values()}, urls
    leading = {}
    for service, (command, url) in urls.items():
        status, text = get(url)
        assert status == 200, f"{service}: {url} answered {status}: {text[:200]}"
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert "process_resident_memory_bytes" in families, service
        name = METRIC_OF[command].removesuffix("_total")
        assert name in families, f"{service}: no {METRIC_OF[command]} in {sorted(families)}"
        if command == "danube-load-manager":
            (sample,) = [s for s in families[name].samples if s.labels.get("role") == "load-manager"]
            leading[service] = sample.value
    assert sorted(leading.values()) == [0, 1], leading
    print(f"\n/metrics of {len(urls)} services answered")


async def test_topics_survive_killing_their_broker_container(stack: ComposeStack) -> None:
    topic = f"/default/{unique('compose')}"
    admin(stack, "topics", "create", topic, "--dispatch-strategy", "reliable")
    # A few more topics, so the killed broker most likely owns more than the one we follow.
    others = [f"/default/{unique('compose-other')}" for _ in range(5)]
    for name in others:
        admin(stack, "topics", "create", name)
    acked: set[bytes] = set()
    received: set[bytes] = set()
    async with DanubeClient(url(stack, "LOOKUP"), operation_timeout_s=60) as client:
        consumer = await client.subscribe(
            topic, subscription="audit", sub_type=SubType.EXCLUSIVE, initial_position=InitialPosition.EARLIEST
        )
        producer = await client.create_producer(
            topic, producer_name=unique("p"), dispatch_strategy=DispatchStrategy.RELIABLE, send_timeout_s=90
        )

        async def publish(prefix: str, n: int) -> None:
            futures = [await producer.send_async(f"{prefix}-{i}".encode()) for i in range(n)]
            for payload, result in zip(
                (f"{prefix}-{i}".encode() for i in range(n)),
                await asyncio.gather(*futures, return_exceptions=True),
                strict=True,
            ):
                if not isinstance(result, BaseException):
                    acked.add(payload)

        async def consume(want: set[bytes], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while not want <= received:
                assert time.monotonic() < deadline, (
                    f"{len(want - received)} acknowledged messages never arrived"
                )
                try:
                    batch = await consumer.receive_many(500, timeout_s=5)
                except TimeoutError:  # nothing for 5 s (the consumer may be reconnecting): poll on
                    continue
                for msg in batch:
                    received.add(msg.payload)
                    await consumer.ack(msg)

        await publish("before", 300)
        assert len(acked) == 300
        # Read half of them, so the subscription's cursor is mid-log when the broker dies.
        half = {f"before-{i}".encode() for i in range(150)}
        await consume(half, timeout_s=60)

        victim = owner(stack, topic)
        assert victim in ("1", "2", "3"), victim
        orphans = [name for name in [topic, *others] if owner(stack, name) == victim]
        stack.kill(f"broker{victim}")
        killed_at = time.monotonic()

        def moved() -> bool:
            now = [owner(stack, name) for name in orphans]
            return all(b is not None and b != victim for b in now)

        await wait_until(
            moved, timeout_s=90, interval_s=0.5, what=f"{len(orphans)} topic(s) re-placed off broker {victim}"
        )
        moved_after = time.monotonic() - killed_at
        await publish("after", 300)
        await consume(set(acked), timeout_s=120)
        await producer.close()
        await consumer.close()
    assert len(acked) == 600, "every send after the failover was acknowledged (the producer reconnected)"
    assert acked <= received, "every acknowledged message was delivered"
    assert stack.state(f"broker{victim}")["Status"] == "exited"
    print(
        f"\nbroker{victim} killed: its {len(orphans)} topic(s) re-placed {moved_after:.1f}s later "
        f"({topic} on broker {owner(stack, topic)}); {len(acked)} acked, all delivered"
    )


def report_generated_at_ms(stack: ComposeStack) -> int:
    """generated_at_ms of the planner's latest cluster load report; 0 when there is none."""
    res = subprocess.run(
        [cli("danube-admin"), "--admin-url", url(stack, "ADMIN"), "-o", "json", "cluster", "load"],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    if res.returncode != 0 or not res.stdout.strip():
        return 0
    return int(json.loads(res.stdout).get("generated_at_ms") or 0)


def test_planner_service_runs_a_cycle_on_request(stack: ComposeStack) -> None:
    # The planner container (Spark local mode) leads the spark-planner role; a rebalance
    # request is answered by one cycle: a proposed plan, written with the cluster load report
    # in one fenced transaction.
    plan = admin(stack, "rebalance", "--dry-run", "--wait-s", "240", timeout_s=300)
    assert plan["status"] == "proposed", plan
    assert plan["plan_id"], plan
    report = admin(stack, "cluster", "load")
    reported = {str(b["broker_id"]) for b in report["brokers"]}
    assert reported, report
    assert report["planner"]["engine"] == "spark", report["planner"]
    print(
        f"\nplanner: plan {plan['plan_id']} ({len(plan.get('moves', []))} moves), report on brokers {sorted(reported)}"
    )


def test_planner_one_shot_mode(stack: ComposeStack) -> None:
    # `danube-planner --once` in a one-off container of the planner service (its image,
    # environment and network): the running planner is stopped first (SIGTERM: it resigns the
    # role), so the one-shot planner is elected at once and runs one fenced cycle, then exits.
    # With the Python engine: the planner service above runs its cycles on Spark in this image
    # already, so a second JVM start-up here would check nothing more.
    before_ms = report_generated_at_ms(stack)
    stack.stop("planner")
    dropped = ("--ready-file", "--candidate-id", "--engine", "--master")
    command = [arg for arg in stack.command_of("planner") if not arg.startswith(dropped)]
    command += ["--once", "--candidate-id=planner-once", "--engine=python"]
    started = time.monotonic()
    res = stack.run("planner", command, timeout_s=300)
    took = time.monotonic() - started
    output = res.stdout + res.stderr
    assert res.returncode == 0, f"{' '.join(command)} exited {res.returncode}:\n{output[-4000:]}"
    assert "fenced by term" in output, output[-4000:]
    after_ms = report_generated_at_ms(stack)
    assert after_ms > before_ms, "the one-shot cycle wrote a new cluster load report"
    print(f"\nplanner --once: one fenced cycle in a one-off container, {took:.1f}s")


# ---- the secured stack: docker-compose.secure.yml (scripts/compose_test.sh --secure) -------------

#: Where the `certs` service writes the credentials, and every service mounts them (read-only).
SECURE_DIR = "/etc/danube/secure"


@dataclass(frozen=True)
class Credentials:
    """What a client copies out of the `secure` volume: the CA and the super admin's token."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def token(self) -> str:
        return (self.directory / "admin.jwt").read_text().strip()

    def flags(self) -> list[str]:
        """danube-admin's TLS and token flags: the CA only (no client certificate) and the token."""
        return ["--tls-ca", str(self.ca_file), "--token-file", str(self.directory / "admin.jwt")]


def https(stack: ComposeStack, var: str) -> str:
    return f"https://127.0.0.1:{stack.env[f'DANUBE_TEST_{var}_PORT']}"


def secure_admin(stack: ComposeStack, creds: Credentials, *args: str) -> subprocess.CompletedProcess[str]:
    """``danube-admin -o json ARGS`` with TLS and the admin token, whatever its exit code."""
    return subprocess.run(
        [cli("danube-admin"), "--admin-url", https(stack, "ADMIN"), *creds.flags(), "-o", "json", *args],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip


def secure_admin_json(stack: ComposeStack, creds: Credentials, *args: str) -> Any:
    res = secure_admin(stack, creds, *args)
    assert res.returncode == 0, f"danube-admin {' '.join(args)}: {res.stderr}"
    return json.loads(res.stdout) if res.stdout.strip() else None


def secure_roles_held(stack: ComposeStack, creds: Credentials) -> set[str]:
    res = secure_admin(stack, creds, "leaders", "list")
    if res.returncode != 0 or not res.stdout.strip():
        return set()
    return {entry["role"] for entry in json.loads(res.stdout)}


@pytest.fixture(scope="module")
def secure_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[ComposeStack, Credentials]]:
    creds = Credentials(tmp_path_factory.mktemp("credentials"))

    def ready(s: ComposeStack) -> None:
        # What deploy/docker-compose.secure.yml tells a user to do: copy the CA and the admin
        # token out of the exited `certs` container's volume.
        for name in ("ca.pem", "admin.jwt"):
            s.copy_from("certs", f"{SECURE_DIR}/{name}", creds.directory / name)
        # The load managers and the planner hold their roles: they reached the leader service
        # (mTLS, it requires their certificates) and etcd (TLS, client certificates).
        wait_until_sync(
            lambda: secure_roles_held(s, creds) >= ROLES, timeout_s=180, what=f"roles {sorted(ROLES)} held"
        )

    with running_stack(
        tmp_path_factory,
        request,
        files=SECURE_COMPOSE_FILES,
        port_vars=(*PORT_VARS, *SECURE_PORT_VARS),
        ready=ready,
    ) as s:
        yield s, creds


async def refused(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    """The status of a topic lookup sent to ``target`` without a token (plaintext when no
    ``credentials``); fails when the call is answered."""
    request = pb.TopicLookupRequest(request_id=1, topic="/default/anything")
    channel = (
        grpc.aio.secure_channel(target, credentials) if credentials else grpc.aio.insecure_channel(target)
    )
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.DiscoveryStub(channel).TopicLookup(request, timeout=10)
    return err.value.code()


def volume_listing(stack: ComposeStack) -> dict[str, tuple[str, str]]:
    """name -> (octal mode, owner) of the `secure` volume and its files, as a container sees them."""
    res = subprocess.run(
        [
            "docker", "run", "--rm", "--network", "none", "-v", f"{stack.volume('secure')}:/s:ro",
            "--entrypoint", "sh", containers.PROJECT_IMAGE, "-c", "cd /s && stat -c '%a %U %n' . *",
        ],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return {name: (mode, user) for mode, user, name in (line.split() for line in res.stdout.splitlines())}


@pytest.mark.compose_secure
async def test_secured_stack_serves_tls_and_tokens_only(
    secure_stack: tuple[ComposeStack, Credentials],
) -> None:
    stack, creds = secure_stack
    # The credentials belong to the services' user; only certificates are readable by others.
    listing = volume_listing(stack)
    assert listing["."] == ("700", "danube"), listing
    for name, (mode, user) in listing.items():
        assert user == "danube", listing
        if name.endswith((".key", ".jwt")) or name == "jwt-secret":
            assert mode == "600", f"{name}: {mode}"
    assert {"ca.pem", "admin.jwt", "admin.pem", "etcd.key", "broker-1.key", "planner.pem"} <= set(listing)

    # The admin API over TLS with the admin token: every broker registered.
    brokers = secure_admin_json(stack, creds, "brokers", "list")
    assert sorted(str(b["broker_id"]) for b in brokers) == ["1", "2", "3"], brokers

    # Produce and consume a reliable topic through the SDK: TLS (the CA only) and the token, as
    # danube-client's with_tls + with_token connect. The lookup sends the client to the owning
    # broker's client port, which takes the same.
    topic = f"/default/{unique('secure')}"
    secure_admin_json(stack, creds, "topics", "create", topic, "--dispatch-strategy", "reliable")
    sent = [f"secure-{i}".encode() for i in range(100)]
    tls = TlsOptions(ca_file=creds.ca_file)
    async with DanubeClient(
        https(stack, "LOOKUP"), tls=tls, token=creds.token, operation_timeout_s=60
    ) as client:
        consumer = await client.subscribe(
            topic, subscription="audit", sub_type=SubType.EXCLUSIVE, initial_position=InitialPosition.EARLIEST
        )
        producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        for payload in sent:
            await producer.send(payload)
        received: list[bytes] = []
        while len(received) < len(sent):
            batch = await consumer.receive_many(100, timeout_s=30)
            for msg in batch:
                received.append(bytes(msg.payload))
                await consumer.ack(msg)
        await producer.close()
        await consumer.close()
    assert received == sent

    # Topic stats come from the owning broker, which the lookup service calls on the broker's
    # internal listener with its own certificate (mTLS).
    stats = secure_admin_json(stack, creds, "topics", "stats", topic)
    assert stats, "the owning broker answered the lookup service's stats call"
    owner = secure_admin_json(stack, creds, "topics", "describe", topic)["broker_id"]

    # Refused: a plaintext client (lookup, and the owning broker's client port), TLS without a
    # token, and TLS without a client certificate where only the cluster's services may call
    # (a broker's internal listener, the leader service).
    lookup = f"127.0.0.1:{stack.env['DANUBE_TEST_LOOKUP_PORT']}"
    broker = f"127.0.0.1:{stack.env[f'DANUBE_TEST_BROKER{owner}_PORT']}"
    ca_only = grpc.ssl_channel_credentials(root_certificates=creds.ca_file.read_bytes())
    assert await refused(lookup, None) == grpc.StatusCode.UNAVAILABLE
    assert await refused(broker, None) == grpc.StatusCode.UNAVAILABLE
    assert await refused(lookup, ca_only) == grpc.StatusCode.UNAUTHENTICATED
    for var in (f"BROKER{owner}_INTERNAL", "LEADER1"):
        internal = f"127.0.0.1:{stack.env[f'DANUBE_TEST_{var}_PORT']}"
        assert await refused(internal, ca_only) == grpc.StatusCode.UNAVAILABLE, var
    async with DanubeClient(
        url(stack, "LOOKUP"), rpc_timeout_s=5, operation_timeout_s=10
    ) as plain:  # http://: the SDK's plaintext client
        with pytest.raises((DanubeError, TimeoutError)):
            await plain.create_producer(topic)
    # etcd: TLS only, and only with a client certificate of the CA.
    etcd = f"127.0.0.1:{stack.env['DANUBE_TEST_ETCD_PORT']}"
    for cfg in (
        EtcdConfig(endpoints=[etcd], request_timeout_s=5),
        EtcdConfig(endpoints=[etcd], request_timeout_s=5, ca_file=str(creds.ca_file)),
    ):
        store = EtcdStore.from_config(cfg)
        try:
            with pytest.raises(DanubeError):
                await store.get("/danube/brokers/1")
        finally:
            await store.aclose()
    # /metrics: HTTPS with the service's certificate; a token holding `lookup` (the admin's) or 401.
    urls = metrics_urls(stack, scheme="https")
    assert get(urls["lookup"][1], ca_file=creds.ca_file)[0] == 401
    for service in ("lookup", f"broker{owner}"):
        status, text = get(urls[service][1], token=creds.token, ca_file=creds.ca_file)
        assert status == 200 and "danube_authz_deny_total" in text, (service, status, text[:200])
    print(
        f"\nsecured stack: {len(sent)} messages over TLS with the admin token; plaintext and tokenless refused"
    )
