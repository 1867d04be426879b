"""``danube-local up --secure --demo`` as a real subprocess on free ports.

One cluster (etcd, a leader replica, a load manager, the lookup service, a broker and its WAL
uploader, every service with TLS, mTLS between services, JWT and RBAC) runs the secured demo,
then the test uses what the launcher printed: a plaintext client and a TLS client without a
client certificate cannot connect, a connection without a token is UNAUTHENTICATED, the
printed admin token + CA + client certificate produce and consume through the SDK, and the
demo's producer token may not subscribe. Ctrl-C stops everything; nothing is left running.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest

from danube_common.errors import DanubeError
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.security.tls import TlsConfig, channel_credentials
from danube_local.secure_mode import SecureMode
from danube_sdk import DanubeClient, PermissionDenied, SubType, TlsOptions
from tests.integration.test_local_cluster import _pids_in, alive, reap
from tests.support import unique, wait_until_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(90)]


@dataclass(frozen=True)
class Printed:
    """What ``up --secure`` told the user to do."""

    service_url: str
    token_file: Path
    ca_file: Path
    cert_file: Path
    key_file: Path

    @property
    def target(self) -> str:
        return self.service_url.removeprefix("https://")

    def tls(self) -> TlsOptions:
        return TlsOptions(ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file)


def parse_printed(text: str) -> Printed:
    token = re.search(r"export DANUBE_TOKEN=\$\(cat (.+)\)", text)
    produce = next(line for line in text.splitlines() if line.strip().startswith("danube-cli produce"))
    assert token is not None, text
    words = shlex.split(produce)
    flag = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("-")}
    return Printed(
        service_url=flag["-s"],
        token_file=Path(shlex.split(token.group(1))[0]),
        ca_file=Path(flag["--tls-ca"]),
        cert_file=Path(flag["--tls-cert"]),
        key_file=Path(flag["--tls-key"]),
    )


async def refused_lookup(channel: grpc.aio.Channel) -> grpc.StatusCode:
    request = pb.TopicLookupRequest(request_id=1, topic="/default/anything")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await pb_grpc.DiscoveryStub(channel).TopicLookup(request, timeout=5)
    return err.value.code()


async def check_clients(printed: Printed) -> None:
    # No TLS at all: the connection itself fails.
    async with grpc.aio.insecure_channel(printed.target) as plain:
        assert await refused_lookup(plain) == grpc.StatusCode.UNAVAILABLE
    # TLS without a client certificate connects to the lookup (as danube-client's with_tls +
    # with_token does), but a call without a token is refused.
    ca_only = channel_credentials(TlsConfig(ca_file=str(printed.ca_file)))
    async with grpc.aio.secure_channel(printed.target, ca_only) as no_cert:
        assert await refused_lookup(no_cert) == grpc.StatusCode.UNAUTHENTICATED
    # A client certificate identifies nobody either: a token is needed.
    mtls = channel_credentials(
        TlsConfig(
            ca_file=str(printed.ca_file), cert_file=str(printed.cert_file), key_file=str(printed.key_file)
        )
    )
    async with grpc.aio.secure_channel(printed.target, mtls) as no_token:
        assert await refused_lookup(no_token) == grpc.StatusCode.UNAUTHENTICATED

    # The printed admin token, CA and client certificate work with the SDK.
    topic = f"/default/{unique('secure-it')}"
    token = printed.token_file.read_text().strip()
    async with DanubeClient(printed.service_url, tls=printed.tls(), token=token, rpc_timeout_s=5) as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, subscription="it", sub_type=SubType.EXCLUSIVE)
        await producer.send(b"over tls")
        msg = await consumer.receive(timeout_s=10)
        assert msg is not None and bytes(msg.payload) == b"over tls"
        await consumer.ack(msg)
        # A pattern subscription lists the namespace (Discovery on the service URL) with the token.
        multi = await client.subscribe_many(pattern=re.escape(topic), subscription="it-pattern")
        assert multi.topics == [topic]
        await multi.close()

    # The demo's producer token (role producer on namespace default) may not consume.
    producer_token = (printed.token_file.parent / "demo-producer.jwt").read_text().strip()
    async with DanubeClient(
        printed.service_url, tls=printed.tls(), token=producer_token, rpc_timeout_s=5
    ) as client:
        with pytest.raises(PermissionDenied, match="user:demo-producer"):
            await client.subscribe(topic, subscription="sneaky", sub_type=SubType.EXCLUSIVE)


async def check_internal(workdir: Path, printed: Printed, etcd: str) -> None:
    """Servers only the cluster's services call (the leader service, each broker's internal
    listener) and etcd refuse a TLS client without a certificate of the cluster's CA."""
    broker = json.loads((workdir / "run" / "broker-1.json").read_text())
    leader = json.loads((workdir / "run" / "leader-1.json").read_text())
    assert broker.get("internal_addr"), broker
    ca_only = channel_credentials(TlsConfig(ca_file=str(printed.ca_file)))
    for addr in (broker["internal_addr"], leader["addr"]):
        async with grpc.aio.secure_channel(addr, ca_only) as no_cert:
            assert await refused_lookup(no_cert) == grpc.StatusCode.UNAVAILABLE, addr
    etcd_cfg = SecureMode(workdir).etcd_config(etcd)
    no_client_cert = EtcdStore.from_config(etcd_cfg.model_copy(update={"cert_file": None, "key_file": None}))
    try:
        with pytest.raises(DanubeError):
            await no_client_cert.get("/danube/brokers/1")
    finally:
        await no_client_cert.aclose()
    with_cert = EtcdStore.from_config(etcd_cfg)
    try:
        assert await with_cert.get("/danube/brokers/1") is not None
    finally:
        await with_cert.aclose()


def etcd_endpoint(printed: str) -> str:
    """Where the launcher's etcd listens (its progress line)."""
    found = re.search(r"^\s*etcd\s+(\S+)\s+\(pid", printed, re.MULTILINE)
    assert found, printed
    return found.group(1)


def test_secure_local_cluster_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "up.out"
    argv = [
        sys.executable, "-m", "danube_local", "up", "--secure", "--demo",
        "--workdir", str(tmp_path / "wd"), "--lookup-port", "0", "--admin-port", "0", "--console-port", "0",
        "--brokers", "1", "--leaders", "1", "--load-managers", "1",
    ]  # fmt: skip
    with open(out, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_sync(
            lambda: b"Press Ctrl-C" in out.read_bytes() or proc.poll() is not None,
            timeout_s=60,
            what="the secured cluster to start and run its demo",
        )
        text = out.read_text()
        assert "Press Ctrl-C" in text, text
        assert "demo: produced 10, consumed 10 in " in text, text
        assert "refused, as expected: PERMISSION_DENIED" in text, text
        secure_dir = tmp_path / "wd" / "secure"
        assert (secure_dir.stat().st_mode & 0o777) == 0o700
        printed = parse_printed(text)
        assert printed.service_url.startswith("https://127.0.0.1:")
        assert printed.token_file == secure_dir / "admin.jwt" and printed.ca_file == secure_dir / "ca.pem"

        asyncio.run(check_clients(printed))
        asyncio.run(check_internal(tmp_path / "wd", printed, etcd_endpoint(text)))

        pids = _pids_in(text)
        assert len(pids) == 6, "etcd, leader, uploader, lookup, broker, load manager"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=40) == 0
        assert not any(alive(p) for p in pids)
    finally:
        reap(proc, out)
