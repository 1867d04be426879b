"""``danube-local up --secure`` without processes: each service's settings as its own config
loader reads them, certificates and secret kept across starts, the tokens, the demo's bindings,
the demo's secured path and the printed instructions."""

from __future__ import annotations

import fnmatch
import importlib
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

import danube_local.__main__ as cli
from danube_common.config import load_config
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.security import Binding, Scope, SecurityStore, TokenVerifier
from danube_common.security.principal import PrincipalType
from danube_local import demo
from danube_local.cluster import LocalCluster, ServiceProcess
from danube_local.secure import ensure_ca, ensure_certificate
from danube_local.secure_mode import (
    ADMIN_SUBJECT,
    CLIENT_FACING_KINDS,
    DEMO_GRANTS,
    ENV_PREFIXES,
    INTERNAL_IDENTITIES,
    ISSUER,
    SecureMode,
    as_env,
    https,
    service_settings,
)
from tests.unit.deploy.test_demo import Broker, fake_sdk
from tests.unit.deploy.test_procs import FakeProc

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

#: kind -> (its __main__ module, its config class)
SERVICES = {
    "lookup": ("danube_lookup.__main__", "danube_lookup.config", "LookupConfig"),
    "broker": ("danube_broker.__main__", "danube_broker.config", "BrokerConfig"),
    "leader": ("danube_leader.__main__", "danube_leader.config", "LeaderConfig"),
    "load_manager": ("danube_load_manager.__main__", "danube_load_manager.config", "LoadManagerConfig"),
    "wal_uploader": ("danube_wal_uploader.__main__", "danube_wal_uploader.config", "WalUploaderConfig"),
    "planner": ("danube_planner.__main__", "danube_planner.config", "PlannerConfig"),
}
#: Every name the launcher gives a service process (LocalCluster: 1-based indexes).
LAUNCHER_NAMES = [
    "lookup",
    "broker-1",
    "broker-12",
    "leader-1",
    "load-manager-2",
    "wal-uploader-3",
    "planner",
]


@pytest.fixture
def mode(tmp_path: Path) -> SecureMode:
    m = SecureMode(tmp_path / "wd")
    m.prepare()
    m.etcd_tls = True  # as when the launcher runs etcd itself
    return m


@pytest.mark.parametrize("kind", sorted(SERVICES))
def test_each_service_reads_its_settings(kind: str, mode: SecureMode) -> None:
    main_mod, cfg_mod, cfg_cls = SERVICES[kind]
    assert ENV_PREFIXES[kind] == importlib.import_module(main_mod).ENV_PREFIX
    model = getattr(importlib.import_module(cfg_mod), cfg_cls)
    env = mode.service_env(kind, "planner" if kind == "planner" else f"{kind.replace('_', '-')}-1")
    cfg = load_config(model, env_prefix=ENV_PREFIXES[kind], env=env)
    assert cfg.tls.enabled and cfg.tls.ca_file == str(mode.ca_file)
    assert Path(cfg.tls.cert_file).exists() and Path(cfg.tls.key_file).exists()
    if kind == "planner":  # calls the leader service, serves nothing
        assert not cfg.auth.enabled and not cfg.tls.require_client_cert
        return
    # Servers only the cluster's services call require client certificates (mTLS); the
    # lookup and the brokers' client ports take TLS + a token (brokers: internal listener).
    assert cfg.tls.require_client_cert == (kind not in CLIENT_FACING_KINDS)
    assert cfg.etcd.ca_file == str(mode.ca_file) and cfg.etcd.cert_file == cfg.tls.cert_file
    assert cfg.auth.enabled and not cfg.auth.client_cert_users
    assert cfg.auth.super_admins == [ADMIN_SUBJECT]
    assert cfg.auth.internal_identities == list(INTERNAL_IDENTITIES)
    assert cfg.auth.jwt is not None and cfg.auth.jwt.secret_file == str(mode.secret_file)
    assert cfg.auth.jwt.issuer == ISSUER and cfg.auth.jwt.algorithm == "HS256"
    cfg.auth.jwt.verifier()  # the secret is usable


def test_internal_identities_name_every_service_and_not_the_client() -> None:
    def internal(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in INTERNAL_IDENTITIES)

    assert all(internal(n) for n in LAUNCHER_NAMES)
    assert not internal("admin") and not internal("localhost") and not internal("127.0.0.1")


def test_settings_as_environment() -> None:
    settings = service_settings(
        "broker",
        cert_file=Path("b.pem"),
        key_file=Path("b.key"),
        ca_file=Path("ca.pem"),
        secret_file=Path("s"),
    )
    env = as_env("DANUBE_BROKER", settings)
    assert env["DANUBE_BROKER_TLS__CERT_FILE"] == "b.pem"
    assert env["DANUBE_BROKER_AUTH__JWT__SECRET_FILE"] == "s"
    assert env["DANUBE_BROKER_AUTH__INTERNAL_IDENTITIES"] == ",".join(INTERNAL_IDENTITIES)


def test_files_are_kept_across_starts_and_tokens_verify(tmp_path: Path) -> None:
    first = SecureMode(tmp_path / "wd")
    first.prepare()
    first.service_env("broker", "broker-1")
    kept = {p.name: p.read_bytes() for p in first.directory.iterdir() if p.suffix != ".jwt"}
    earlier_admin_token = first.token(ADMIN_SUBJECT)
    again = SecureMode(tmp_path / "wd")
    again.prepare()
    again.service_env("broker", "broker-1")
    assert {p.name: p.read_bytes() for p in again.directory.iterdir() if p.suffix != ".jwt"} == kept
    assert {"ca.pem", "ca.key", "jwt-secret", "admin.pem", "admin.key", "broker-1.pem"} <= set(kept)
    assert (again.directory.stat().st_mode & 0o777) == 0o700
    verifier = TokenVerifier(key=again.secret_file.read_text().strip(), issuer=ISSUER)
    for name in (ADMIN_SUBJECT, *(g.name for g in DEMO_GRANTS)):
        assert (again.token_file(name).stat().st_mode & 0o777) == 0o600
        claims = verifier.verify(again.token(name))
        assert (claims.subject, claims.principal_type, claims.principal_name) == (
            name,
            PrincipalType.USER,
            name,
        )
        assert abs(claims.expires_at - again.expires_at) <= 1
    # A token handed out at the first start still verifies: the secret was kept.
    assert verifier.verify(earlier_admin_token).subject == ADMIN_SUBJECT


def test_a_certificate_is_issued_again_when_it_no_longer_fits(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    ca = ensure_ca(d)
    wide = ("localhost", "127.0.0.1", "10.0.0.5")

    def pem(*args: Any, **kwargs: Any) -> bytes:
        return ensure_certificate(d, *args, **kwargs)[0].read_bytes()

    original = pem(ca, "broker-1")
    assert pem(ca, "broker-1") == original, "kept when it fits"
    wider = pem(ca, "broker-1", hosts=wide)
    assert wider != original, "a new listen host needs a new certificate"
    assert pem(ca, "broker-1", hosts=("localhost",)) == wider, "a certificate naming more hosts is kept"
    client_only = pem(ca, "broker-1", hosts=wide, server=False)
    assert client_only != wider, "a different usage needs a new certificate"
    other_ca = ensure_ca(tmp_path / "other")
    by_other_ca = pem(other_ca, "broker-1", hosts=wide, server=False)
    assert by_other_ca != client_only, "a new CA: a new certificate"
    (d / "broker-1.key").write_bytes(b"not a key")
    assert pem(other_ca, "broker-1", hosts=wide, server=False) != by_other_ca, "an unusable key: a new pair"
    with pytest.raises(ValueError, match="cannot name a file"):
        ensure_certificate(d, ca, "../x")


async def test_demo_bindings_are_written_once_and_restored() -> None:
    store, keys = MemoryStore(), Keys("c")
    mode = SecureMode(Path("/nonexistent"))
    written = await mode.grant_demo_roles(store, keys)
    assert [(b.principal, b.role, b.scope, b.resource) for b in written] == [
        ("user:demo-producer", "producer", Scope.NAMESPACE, "default"),
        ("user:demo-consumer", "consumer", Scope.NAMESPACE, "default"),
    ]
    assert await mode.grant_demo_roles(store, keys) == [], "a restart writes nothing new"
    rbac = SecurityStore(store, keys)
    await rbac.delete_binding("demo-consumer")
    await rbac.delete_binding("demo-producer")
    await rbac.create_binding(Binding.create("demo-producer", "user:demo-producer", "admin", "cluster"))
    assert len(await mode.grant_demo_roles(store, keys)) == 2, "changed and deleted bindings come back"
    assert (await rbac.get_binding("demo-producer")) == DEMO_GRANTS[0].binding()


def test_https_urls() -> None:
    assert https("http://127.0.0.1:6650") == "https://127.0.0.1:6650"
    assert https("https://h:1") == "https://h:1"


# ---------------------------------------------------------------- the CLI


def secure_cluster(tmp_path: Path) -> LocalCluster:
    lc = LocalCluster(workdir=tmp_path / "my dir", etcd_endpoint="127.0.0.1:2379", secure=True)
    assert lc.security is not None
    lc.security.prepare()
    lk = lc._lookup_service()
    lk.proc = FakeProc(10)  # type: ignore[assignment]
    lk.info = {"service": "lookup", "url": "http://127.0.0.1:6650", "admin_url": "http://127.0.0.1:50051"}
    lk.tls = True
    lc._lookup = lk
    return lc


def test_up_secure_flag() -> None:
    assert cli.build_parser().parse_args(["up", "--secure"]).secure
    assert not cli.build_parser().parse_args(["up"]).secure


def test_secure_steps_are_copy_pasteable(tmp_path: Path) -> None:
    lc = secure_cluster(tmp_path)
    assert lc.service_url == "https://127.0.0.1:6650" and lc.admin_url == "https://127.0.0.1:50051"
    sec = lc.security
    assert sec is not None
    text = cli.secure_steps(lc)
    assert f"export DANUBE_TOKEN=$(cat {shlex.quote(str(sec.admin_token_file))})" in text
    tls = (
        f"--tls-ca {shlex.quote(str(sec.ca_file))} --tls-cert {shlex.quote(str(sec.client_cert))} "
        f"--tls-key {shlex.quote(str(sec.client_key))}"
    )
    assert f"danube-cli produce -s https://127.0.0.1:6650 {tls} -t /default/demo -m hello" in text
    assert f"danube-cli consume -s https://127.0.0.1:6650 {tls} -t /default/demo" in text
    assert f"danube-admin --admin-url https://127.0.0.1:50051 {tls} topics list" in text
    assert "'" in text and "my dir" in text, "paths with spaces are quoted"
    for line in text.splitlines():
        if line.strip().startswith(("danube-cli", "danube-admin", "export")):
            shlex.split(line)  # every command line parses as shell words


def test_the_service_environment_reaches_the_process(tmp_path: Path) -> None:
    lc = secure_cluster(tmp_path)
    svc = lc._broker_service("1", 0)
    env = lc._security_env(svc)
    assert svc.tls and env["DANUBE_BROKER_TLS__REQUIRE_CLIENT_CERT"] == "false"
    assert "--internal-listen" in svc.argv  # where services call it, with client certificates
    leader = lc._indexed_service("leader", 1, lc.leader_argv(1))
    assert lc._security_env(leader)["DANUBE_LEADER_TLS__REQUIRE_CLIENT_CERT"] == "true"
    planner = ServiceProcess(kind="planner", name="planner", argv=[], log_path=tmp_path, ready_file=tmp_path)
    assert not lc._security_env(planner).get("DANUBE_PLANNER_AUTH__ENABLED") and not planner.tls


# ---------------------------------------------------------------- the demo, secured


async def test_secured_demo_uses_two_tokens_and_expects_a_refusal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broker = Broker()
    sdk = fake_sdk(broker)
    plain_client = sdk.DanubeClient
    made: list[dict[str, Any]] = []

    def client(url: str, **kwargs: Any) -> Any:
        made.append(kwargs)
        return plain_client(url)

    sdk.DanubeClient = client  # type: ignore[attr-defined]
    sdk.TlsOptions = lambda **kw: ("tls", tuple(sorted(kw)))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "danube_sdk", sdk)
    refusals: list[str] = []

    async def refused(security: demo.DemoSecurity, topic: str, *, out: Any) -> list[str]:
        refusals.append(topic)
        return []

    monkeypatch.setattr(demo, "refused_delete", refused)
    security = demo.DemoSecurity(
        ca_file=tmp_path / "ca.pem",
        cert_file=tmp_path / "admin.pem",
        key_file=tmp_path / "admin.key",
        producer_token="p-token",
        consumer_token="c-token",
        admin_url="https://127.0.0.1:50051",
    )
    out: list[str] = []
    result = await demo.run_demo("https://127.0.0.1:6650", out=out.append, count=3, security=security)
    assert result.ok and result.consumed == 3
    assert [m["token"] for m in made] == ["p-token", "c-token"]
    assert all(m["tls"] == ("tls", ("ca_file", "cert_file", "key_file")) for m in made)
    assert refusals == ["/default/demo"]
    assert broker.calls.count("client.close") == 2

    async def not_refused(security: demo.DemoSecurity, topic: str, *, out: Any) -> list[str]:
        return ["user:demo-producer's token deleted /default/demo: RBAC did not refuse it"]

    monkeypatch.setattr(demo, "refused_delete", not_refused)
    result = await demo.run_demo("https://127.0.0.1:6650", out=out.append, count=1, security=security)
    assert not result.ok and "RBAC did not refuse" in result.problems[0]
