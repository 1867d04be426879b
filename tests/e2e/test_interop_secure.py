"""The unmodified PyPI ``danube-client==0.5.0`` against a cluster serving TLS with JWT auth and
RBAC on: it works with a token bound to the topic's namespace, and is refused without one.

One secured cluster shared by the module: a lookup and a broker as child processes
(LocalCluster with a YAML config per service holding its ``tls`` and ``auth`` sections),
certificates and the HS256 secret from ``danube_local.secure``; a second one that requires
client certificates (mTLS) for the two mTLS tests. The roles and bindings are written to etcd
before the services start, so the services' RBAC views load them at start-up (nothing to wait
for).

Principals (all ``user``), bound in the namespace ``secure``:

- ``app``: producer + consumer at namespace ``secure``;
- ``schema-author``: producer at namespace ``secure``, and a stored role ``schema-author``
  (manage_schema, lookup) at cluster scope, since schema subjects belong to the cluster;
- ``stranger``: a valid token, no binding.

The real client runs as a subprocess (tests/e2e/interop/danube_client_driver.py); its builder
gets ``with_tls(ca)`` / ``with_token(jwt)`` / ``with_token_supplier(...)`` / ``with_mtls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.security import Binding, Permission, Scope, SecurityStore, issue_token
from danube_local.cluster import LocalCluster
from danube_local.secure import SecureFiles, write_secure_files
from tests.e2e.conftest import interop_python, subprocess_env
from tests.support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(30)]
DRIVER = str(Path(__file__).parent / "interop" / "danube_client_driver.py")
ISSUER = "danube-interop"
NAMESPACE = "secure"
#: A driver run that must fail: the client retries retryable codes (about 3 s at most).
REFUSAL_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SecureCluster:
    cluster: LocalCluster
    files: SecureFiles
    workdir: Path

    @property
    def port(self) -> int:
        return self.cluster.lookup.port

    @property
    def ca(self) -> str:
        return str(self.files.ca_cert)

    def token(self, name: str, *, key: str | None = None, ttl_s: float = 300) -> str:
        assert self.files.jwt_secret is not None
        secret = key or self.files.jwt_secret.read_text().strip()
        return issue_token(name, "user", name, ttl_s, secret, ISSUER)

    def drive(
        self,
        *args: str,
        token: str | None = None,
        ca: bool = True,
        cert: str | None = None,
        host: str = "127.0.0.1",
        extra: tuple[str, ...] = (),
        timeout_s: float = 25,
    ) -> tuple[int, list[dict[str, Any]], str]:
        """Run the driver; (exit code, its JSON events, the tail of its stderr)."""
        argv = [interop_python(), DRIVER, *args, "--service-url", f"https://{host}:{self.port}"]
        if ca:
            argv += ["--ca", self.ca]
        if cert is not None:
            cert_file, key_file = self.files.certs[cert]
            argv += ["--client-cert", str(cert_file), "--client-key", str(key_file)]
        if token is not None:
            argv += ["--token", token]
        argv += [*extra, "--timeout-s", str(timeout_s - 5)]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=subprocess_env())
        events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        return res.returncode, events, res.stderr[-2000:]

    def ok(self, *args: str, **kwargs: Any) -> list[dict[str, Any]]:
        code, events, err = self.drive(*args, **kwargs)
        assert code == 0, f"danube-client failed: {events[-1:] or err}"
        return events

    def refused(self, *args: str, **kwargs: Any) -> dict[str, Any]:
        """The error the driver reported (it must fail)."""
        code, events, err = self.drive(*args, timeout_s=REFUSAL_TIMEOUT_S, **kwargs)
        assert code == 1 and events and events[-1]["event"] == "error", (code, events, err)
        return events[-1]


def _service_config(files: SecureFiles, identity: str) -> dict[str, Any]:
    """The ``tls`` and ``auth`` sections of a service named ``identity`` (its certificate's CN)."""
    cert, key = files.certs[identity]
    return {
        "bootstrap_namespaces": ["default", NAMESPACE],
        "tls": {"cert_file": str(cert), "key_file": str(key), "ca_file": str(files.ca_cert)},
        "auth": {
            "enabled": True,
            "jwt": {"issuer": ISSUER, "secret_file": str(files.jwt_secret)},
            "internal_identities": ["lookup", "broker-*"],
        },
    }


async def _write_policy(endpoint: str, cluster: str) -> None:
    store = EtcdStore([endpoint], request_timeout_s=5.0)
    try:
        await store.wait_ready(10)
        rbac = SecurityStore(store, Keys(cluster))
        await rbac.create_role("schema-author", [Permission.MANAGE_SCHEMA, Permission.LOOKUP])
        for binding in (
            Binding.create("app-produces", "user:app", "producer", "namespace", NAMESPACE),
            Binding.create("app-consumes", "user:app", "consumer", "namespace", NAMESPACE),
            Binding.create("author-produces", "user:schema-author", "producer", "namespace", NAMESPACE),
            Binding.create("author-schemas", "user:schema-author", "schema-author", Scope.CLUSTER.value),
        ):
            await rbac.create_binding(binding)
    finally:
        await store.aclose()


@contextlib.contextmanager
def _secured(
    tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess, *, require_client_cert: bool
) -> Iterator[SecureCluster]:
    interop_python()  # fails (does not skip) when the danube-client venv is missing
    workdir = tmp_path_factory.mktemp("secure-cluster")
    files = write_secure_files(workdir / "secure", ["lookup", "broker-1", "app"])
    configs = {}
    for identity in ("lookup", "broker-1"):
        config = _service_config(files, identity)
        config["tls"]["require_client_cert"] = require_client_cert
        configs[identity] = workdir / f"{identity}.yaml"
        configs[identity].write_text(yaml.safe_dump(config))
    name = unique("interop-sec")
    asyncio.run(_write_policy(etcd.endpoint, name))
    cluster = LocalCluster(
        brokers=1,
        workdir=workdir,
        cluster=name,
        etcd_endpoint=etcd.endpoint,
        lookup_config=configs["lookup"],
        broker_config=configs["broker-1"],
        log_level="INFO",
    )
    cluster.start(timeout_s=20)
    try:
        yield SecureCluster(cluster, files, workdir)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def secure_cluster(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: EtcdProcess
) -> Iterator[SecureCluster]:
    """TLS (no client certificates asked for) + JWT + RBAC."""
    with _secured(tmp_path_factory, etcd_server, require_client_cert=False) as secured:
        yield secured


@pytest.fixture(scope="module")
def mtls_cluster(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: EtcdProcess
) -> Iterator[SecureCluster]:
    """mTLS: every client presents a certificate signed by the CA (its common name is a user)."""
    with _secured(tmp_path_factory, etcd_server, require_client_cert=True) as secured:
        yield secured


def received(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "received"]


def assert_round_trip(events: list[dict[str, Any]], topic: str, count: int) -> None:
    got = received(events)
    assert [e["payload"] for e in got] == [f"m{i}" for i in range(count)]
    assert [e["attributes"] for e in got] == [{"i": str(i)} for i in range(count)]
    assert all(e["topic"] == topic for e in got)
    offsets = [e["offset"] for e in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == count


# ---------------------------------------------------------------------------- allowed


def test_round_trip_with_token_over_tls(secure_cluster: SecureCluster) -> None:
    """with_tls(ca) + with_token(jwt), service URL https://127.0.0.1:P: every payload, in order."""
    topic = f"/{NAMESPACE}/{unique('tls-token')}"
    events = secure_cluster.ok(
        "roundtrip", "--topic", topic, "--count", "20", "--reliable", token=secure_cluster.token("app")
    )
    assert_round_trip(events, topic, 20)


def test_round_trip_with_token_supplier_via_localhost(secure_cluster: SecureCluster, tmp_path: Path) -> None:
    """with_token_supplier (the token file read on every RPC), service URL https://localhost:P
    (the certificates name both localhost and 127.0.0.1), a shared subscription."""
    token_file = tmp_path / "token"
    token_file.write_text(secure_cluster.token("app") + "\n")
    topic = f"/{NAMESPACE}/{unique('supplier')}"
    events = secure_cluster.ok(
        "roundtrip", "--topic", topic, "--count", "10", "--sub-type", "shared",
        host="localhost", extra=("--token-file", str(token_file)),
    )  # fmt: skip
    assert_round_trip(events, topic, 10)


def test_schema_registry_with_token(secure_cluster: SecureCluster) -> None:
    """client.schema() on the lookup with the token: register, read back, check compatibility,
    bind the topic; the validated topic takes valid messages and refuses an invalid one."""
    topic, subject = f"/{NAMESPACE}/{unique('schema')}", unique("people")
    events = secure_cluster.ok(
        "schema", "--topic", topic, "--subject", subject, "--count", "3",
        token=secure_cluster.token("schema-author"),
    )  # fmt: skip
    registered = next(e for e in events if e["event"] == "registered")
    assert registered["latest_version"] == 1 and registered["versions"] == [1]
    assert registered["latest_subject"] == registered["by_id_subject"] == subject
    assert registered["same_definition"] and registered["breaking_compatible"] is False
    configured = next(e for e in events if e["event"] == "configured")
    assert configured["ok"] and configured["policy"] == "enforce"
    assert configured["schema_id"] == registered["schema_id"]
    assert sum(1 for e in events if e["event"] == "sent") == 3
    refused = [e for e in events if e["event"] in ("refused", "accepted-invalid")]
    assert refused and refused[0]["event"] == "refused", refused


# ---------------------------------------------------------------------------- refused

#: The client's first call: a consumer starts with Discovery.TopicPartitions on the service URL
#: (its error reaches the caller); a producer starts with TopicLookup, whose error the client
#: swallows, then sends CreateProducer to the service URL: our lookup service, which does not
#: serve it but refuses it as a broker would (the interceptor authenticates and authorizes a
#: method it does not serve before answering UNIMPLEMENTED).
FIRST_CALLS = pytest.mark.parametrize("mode", ["topics", "produce"])


@FIRST_CALLS
def test_no_token_is_unauthenticated(secure_cluster: SecureCluster, mode: str) -> None:
    topic = f"/{NAMESPACE}/{unique('no-token')}"
    err = secure_cluster.refused(mode, "--topic", topic, "--count", "1")
    assert err["code"] == "UNAUTHENTICATED", err
    assert "missing" in err["details"].lower()
    assert err["error_code"]


@FIRST_CALLS
def test_token_signed_with_another_secret_is_unauthenticated(
    secure_cluster: SecureCluster, mode: str
) -> None:
    topic = f"/{NAMESPACE}/{unique('forged')}"
    forged = secure_cluster.token("app", key=secrets.token_hex(32))
    err = secure_cluster.refused(mode, "--topic", topic, "--count", "1", token=forged)
    assert err["code"] == "UNAUTHENTICATED", err
    assert "bad_signature" in err["details"]


@FIRST_CALLS
def test_expired_token_is_unauthenticated(secure_cluster: SecureCluster, mode: str) -> None:
    topic = f"/{NAMESPACE}/{unique('expired')}"
    assert secure_cluster.files.jwt_secret is not None
    secret = secure_cluster.files.jwt_secret.read_text().strip()
    expired = issue_token("app", "user", "app", 60, secret, ISSUER, now=time.time() - 3600)
    err = secure_cluster.refused(mode, "--topic", topic, "--count", "1", token=expired)
    assert err["code"] == "UNAUTHENTICATED", err
    assert "expired" in err["details"]


@FIRST_CALLS
def test_token_without_binding_is_permission_denied(secure_cluster: SecureCluster, mode: str) -> None:
    topic = f"/{NAMESPACE}/{unique('stranger')}"
    err = secure_cluster.refused(
        mode, "--topic", topic, "--count", "1", token=secure_cluster.token("stranger")
    )
    assert err["code"] == "PERMISSION_DENIED", err
    permission = "produce" if mode == "produce" else "lookup"
    assert f"user:stranger may not {permission}" in err["details"], err


@FIRST_CALLS
def test_binding_does_not_reach_another_namespace(secure_cluster: SecureCluster, mode: str) -> None:
    topic = f"/default/{unique('elsewhere')}"
    err = secure_cluster.refused(mode, "--topic", topic, "--count", "1", token=secure_cluster.token("app"))
    assert err["code"] == "PERMISSION_DENIED", err
    assert "user:app" in err["details"]


def test_plaintext_client_fails_against_tls(secure_cluster: SecureCluster) -> None:
    """No --ca and no token: the client opens plaintext channels; the TLS server cannot talk."""
    topic = f"/{NAMESPACE}/{unique('plain')}"
    err = secure_cluster.refused("roundtrip", "--topic", topic, "--count", "1", ca=False)
    assert err["code"] == "UNAVAILABLE", err


def test_token_without_our_ca_fails_verification(secure_cluster: SecureCluster) -> None:
    """with_token alone trusts the system's roots, which did not sign our certificates."""
    topic = f"/{NAMESPACE}/{unique('no-ca')}"
    err = secure_cluster.refused(
        "roundtrip", "--topic", topic, "--count", "1", ca=False, token=secure_cluster.token("app")
    )
    assert err["code"] == "UNAVAILABLE", err


# ---------------------------------------------------------------------------- mTLS


def test_mtls_certificate_is_the_identity(mtls_cluster: SecureCluster) -> None:
    """with_mtls(ca, cert, key) and no token: the certificate's common name (app) is the user
    its bindings name."""
    topic = f"/{NAMESPACE}/{unique('mtls')}"
    events = mtls_cluster.ok("roundtrip", "--topic", topic, "--count", "10", cert="app")
    assert_round_trip(events, topic, 10)


def test_mtls_refuses_a_client_without_certificate(mtls_cluster: SecureCluster) -> None:
    """with_token + with_tls but no certificate: the handshake fails before any RPC."""
    topic = f"/{NAMESPACE}/{unique('mtls-nocert')}"
    err = mtls_cluster.refused("roundtrip", "--topic", topic, "--count", "1", token=mtls_cluster.token("app"))
    assert err["code"] == "UNAVAILABLE", err
