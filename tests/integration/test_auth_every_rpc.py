"""Every RPC of every service, called with every kind of credential, against the real services
(lookup, broker, leader, load manager, WAL uploader) running in-process with TLS and auth on
real etcd: one set of servers for the whole module.

The RPCs come from the descriptors of ``PB_MODULES`` (every service, every method, streaming
ones included), so an RPC added to a ``.proto`` is probed without editing this file; a service
missing from :data:`SERVED_BY` (which server serves it) fails :func:`test_every_service_has_a_server`.
For each (server, RPC) the credentials of :class:`Cred` must end as follows:

- no token, a malformed token, an expired token, a token signed with another key:
  UNAUTHENTICATED, the reason (``AuthFailure``) in the details;
- a valid token of a principal with no binding, of one bound at cluster scope to a role holding
  every permission *but* the one the rule needs, or of one that claims to be a cluster member
  (``principal_type: broker_internal``; membership comes from certificates only):
  PERMISSION_DENIED, naming principal and permission;
- permitted: anything but UNAUTHENTICATED / PERMISSION_DENIED (the requests name things that
  may not exist: NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION are answers), nor
  UNIMPLEMENTED (a wrong table) nor UNKNOWN / INTERNAL (a servicer crash). The permitted caller
  is derived from ``RULES``: a principal bound to a role holding exactly the rule's permission,
  at the narrowest scope of the request's resource. An id-only call (a :class:`Handle`) names a
  producer or consumer, which only the principal that created it may use: its permitted caller
  holds the rule's permission and the one that creates the handle (``produce`` or ``consume``)
  on the handle's topic, and calls with a handle it created itself; the same principal with
  root's handle is refused (:func:`test_another_principals_handle_is_refused`). For
  ``cluster_internal`` RPCs it is a cluster member proven by its client certificate, with no token.

TLS: the lookup (both ports), the load manager and the broker's client port take clients
without certificates (users with tokens, as the real danube-client connects); the broker's
internal listener, the leader and the WAL uploader require client certificates, because they
serve cluster-internal RPCs whose callers are recognised by certificate: a server sees a client
certificate only when it requires one (see ``test_client_certificate_unseen_without_mtls``).
The lookup reaches the broker's stats service at the internal listener the broker registered.
``client_cert_users`` is off everywhere, so on the mTLS servers users present the ``admin``
certificate (which names no cluster member) and authenticate with their token.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import secrets
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import grpc.aio
import pytest
import pytest_asyncio
from google.protobuf.message import Message

from danube_broker.app import running as broker_running
from danube_broker.config import BrokerConfig
from danube_common.errors import MD_ERROR_CODE
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.pb import DanubeLoadManager_pb2 as lmpb
from danube_common.resources import Resources
from danube_common.security import (
    RULES,
    AuthFailure,
    Binding,
    Handle,
    Permission,
    Rule,
    Scope,
    SecurityStore,
    issue_token,
)
from danube_common.security.rules import PB_MODULES
from danube_common.service import running as service_running
from danube_leader.app import running as leader_running
from danube_leader.config import LeaderConfig
from danube_load_manager.app import run as load_manager_run
from danube_load_manager.config import LoadManagerConfig
from danube_local.secure import CertifiedKey, SecureFiles, ensure_ca, write_secure_files
from danube_lookup.app import running as lookup_running
from danube_lookup.config import LookupConfig
from danube_wal_uploader.app import running as uploader_running
from danube_wal_uploader.config import WalUploaderConfig
from tests.support import unique, wait_until
from tests.support.certs import expired_certificate, untrusted_certificate
from tests.support.grpc_probe import Metadata, Outcome, Rpc, call_once, rpcs, services
from tests.support.rpc_requests import REQUESTS, Env, build_request, next_request_id, subscribe_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
module_loop = pytest.mark.asyncio(loop_scope="module")

ISSUER = "danube-authz-test"
ROOT = "root"  # a super admin subject: sets the stage (producers, consumers)
USER_CERT = "admin"  # a client certificate naming no cluster member
INTERNAL_IDENTITIES = ["broker-*", "lookup", "leader-*", "load-manager-*", "wal-uploader-*"]
BROKER_ID = "1"
CALL_TIMEOUT_S = 5.0
#: A permitted server stream with nothing to send (a consumer with no message) ends here.
PERMITTED_STREAM_TIMEOUT_S = 0.5


# ---------------------------------------------------------------------------- which server serves what


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    #: The server requires a client certificate signed by the cluster CA (mTLS).
    mtls: bool
    #: The cluster member that calls this server's internal RPCs (its certificate's name).
    internal_caller: str | None = None


ENDPOINTS: dict[str, Endpoint] = {
    e.name: e
    for e in (
        Endpoint("lookup", mtls=False),
        Endpoint("lookup-admin", mtls=False),
        Endpoint("broker", mtls=False),
        Endpoint("broker-internal", mtls=True, internal_caller="lookup"),
        Endpoint("leader", mtls=True, internal_caller="load-manager-0"),
        Endpoint("load-manager", mtls=False),
        Endpoint("wal-uploader", mtls=True, internal_caller=f"broker-{BROKER_ID}"),
    )
}

#: Proto service -> every server that serves it (checked both ways: a service missing here
#: fails, and a server answering for a service not listed for it fails).
SERVED_BY: dict[str, tuple[str, ...]] = {
    "danube.ProducerService": ("broker", "broker-internal"),
    "danube.ConsumerService": ("broker", "broker-internal"),
    "danube.HealthCheck": ("broker", "broker-internal"),
    "danube.Discovery": ("lookup", "broker", "broker-internal"),
    "danube_schema.SchemaRegistry": ("lookup", "lookup-admin"),
    "danube.admin.v1.BrokerAdmin": ("lookup-admin",),
    "danube.admin.v1.ClusterAdmin": ("lookup-admin",),
    "danube.admin.v1.NamespaceAdmin": ("lookup-admin",),
    "danube.admin.v1.TopicAdmin": ("lookup-admin",),
    "danube.admin.v1.SecurityAdmin": ("lookup-admin",),
    # cluster_internal: served only where its callers' certificates are seen.
    "danube.admin.v1.BrokerStatsService": ("broker-internal",),
    "danube.leader.v1.LeaderElection": ("leader",),
    "danube.loadmanager.v1.LoadManagerStatus": ("load-manager",),
    "danube.uploader.v1.WalUploader": ("wal-uploader",),
}

ALL_RPCS = rpcs(PB_MODULES)
ALL_SERVICES = services(PB_MODULES)


# ---------------------------------------------------------------------------- who may call what


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """A binding of a role holding exactly ``permissions``, at ``scope`` on ``resource``."""

    permissions: tuple[Permission, ...]
    scope: Scope
    resource: str

    @property
    def role(self) -> str:
        return "only-" + "-and-".join(p.value for p in self.permissions)


#: The permission that creates a handle of each kind.
CREATES: dict[str, Permission] = {"producer": Permission.PRODUCE, "consumer": Permission.CONSUME}


def target_of(rule: Rule, request: Message) -> Any:
    """The rule's target; a multiplexed frame's probe names one handle: that handle."""
    target = rule.target(request)
    if isinstance(target, tuple):
        assert len(target) == 1, f"a probe of a multiplexed stream names one handle: {target}"
        return target[0]
    return target


def grant_for(rule: Rule, request: Message, env: Env) -> Grant:
    """What the permitted caller of ``request`` needs: the rule's permission at the narrowest
    scope of its resource. An id names a handle on ``env.topic`` (every handle here is there),
    which the caller must have created: it also needs the permission that creates it."""
    target = target_of(rule, request)
    if isinstance(target, Handle):
        permissions = tuple(sorted({rule.permission, CREATES[target.kind]}))
        return Grant(permissions, Scope.TOPIC, env.topic)
    scope, name = target.lineage()[0]
    return Grant((rule.permission,), scope, name)


def rule_of(rpc: Rpc) -> Rule:
    rule = RULES.get(rpc.path)
    if rule is None:
        pytest.fail(f"{rpc.path} has no rule in RULES: the interceptor denies it to everyone")
    return rule


async def plan_grants(env: Env) -> dict[Grant, str]:
    """Grant -> the name of the principal (``user:{name}``) and binding that hold it."""
    needed: set[Grant] = set()
    for rpc in ALL_RPCS:
        rule = RULES.get(rpc.path)
        if rule is not None and rule.permission is not Permission.CLUSTER_INTERNAL:
            needed.add(grant_for(rule, await build_request(rpc, env), env))
    return {g: f"ok-{i}" for i, g in enumerate(sorted(needed))}


def lacking(permission: Permission) -> str:
    """The principal bound at cluster scope to every permission but ``permission``."""
    return f"lacks-{permission.value}"


#: Holds the built-in ``admin`` role on the topic (``manage_topic`` included): may use any
#: handle there, whoever created it.
TOPIC_ADMIN = "topic-admin"


async def write_policy(rbac: SecurityStore, grants: dict[Grant, str], env: Env) -> None:
    every = list(Permission)
    await asyncio.gather(
        *(rbac.create_role(f"all-but-{p.value}", [q for q in every if q is not p]) for p in every),
        *(rbac.create_role(role, list(perms)) for role, perms in {(g.role, g.permissions) for g in grants}),
    )
    bindings = [
        Binding.create(lacking(p), f"user:{lacking(p)}", f"all-but-{p.value}", Scope.CLUSTER) for p in every
    ]
    bindings += [
        Binding.create(name, f"user:{name}", g.role, g.scope, g.resource) for g, name in grants.items()
    ]
    bindings.append(Binding.create(TOPIC_ADMIN, f"user:{TOPIC_ADMIN}", "admin", Scope.TOPIC, env.topic))
    await asyncio.gather(*(rbac.create_binding(b) for b in bindings))


class Cred(StrEnum):
    NO_TOKEN = "no_token"
    MALFORMED = "malformed_token"
    EXPIRED = "expired_token"
    FOREIGN_KEY = "token_of_another_key"
    UNBOUND = "user_without_binding"
    LACKS_PERMISSION = "user_with_all_other_permissions"
    CLAIMS_INTERNAL = "token_claiming_cluster_member"
    PERMITTED = "permitted"


#: Refused as UNAUTHENTICATED, with this reason in the details.
UNAUTHENTICATED_BY = {
    Cred.NO_TOKEN: AuthFailure.MISSING,
    Cred.MALFORMED: AuthFailure.MALFORMED,
    Cred.EXPIRED: AuthFailure.EXPIRED,
    Cred.FOREIGN_KEY: AuthFailure.BAD_SIGNATURE,
}
UNBOUND_USER = "nobody"
CLAIMED_MEMBER = f"broker-{BROKER_ID}"
#: A permitted call may end any way but these.
NOT_ADMITTED = {
    grpc.StatusCode.UNAUTHENTICATED: "refused a permitted caller",
    grpc.StatusCode.PERMISSION_DENIED: "refused a permitted caller",
    grpc.StatusCode.UNIMPLEMENTED: "does not serve it: SERVED_BY is wrong",
    grpc.StatusCode.UNKNOWN: "crashed in the servicer",
    grpc.StatusCode.INTERNAL: "crashed in the servicer",
}


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# ---------------------------------------------------------------------------- the running cluster


@dataclass
class Cluster:
    files: SecureFiles
    secret: str
    addrs: dict[str, str]
    env: Env
    grants: dict[Grant, str]
    rbac: SecurityStore
    ca: CertifiedKey
    etcd_endpoint: str
    name: str
    #: Each service's HTTP endpoint (``https://host:port``): /metrics, /healthz, the console.
    http: dict[str, str] = field(default_factory=dict)
    _channels: dict[tuple[str, str | None], grpc.aio.Channel] = field(default_factory=dict)
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    _own_envs: dict[str, Env] = field(default_factory=dict)

    def token(self, name: str, *, principal_type: str = "user") -> str:
        key = (principal_type, name)
        if key not in self._tokens:
            self._tokens[key] = issue_token(name, principal_type, name, 600, self.secret, ISSUER)
        return self._tokens[key]

    def root(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.token(ROOT))

    async def own_env(self, name: str, grant: Grant) -> Env:
        """``env`` with handles that ``user:{name}`` (holding ``grant``) created itself: a
        producer if it may produce, a consumer (of its own subscription) if it may consume, and
        its own fresh ones for the Close* calls."""
        if name not in self._own_envs:
            md = bearer(self.token(name))
            producers = pb_grpc.ProducerServiceStub(self.channel("broker"))
            consumers = pb_grpc.ConsumerServiceStub(self.channel("broker"))

            async def new_producer() -> int:
                request = pb.ProducerRequest(
                    request_id=next_request_id(), producer_name=unique("p"), topic_name=self.env.topic
                )
                return int(
                    (await producers.CreateProducer(request, timeout=CALL_TIMEOUT_S, metadata=md)).producer_id
                )

            async def new_consumer() -> int:
                request = subscribe_request(self.env.topic, unique(f"{name}-s"))
                return int(
                    (await consumers.Subscribe(request, timeout=CALL_TIMEOUT_S, metadata=md)).consumer_id
                )

            may = set(grant.permissions)
            self._own_envs[name] = dataclasses.replace(
                self.env,
                producer_id=await new_producer() if Permission.PRODUCE in may else 0,
                consumer_id=await new_consumer() if Permission.CONSUME in may else 0,
                new_producer=new_producer,
                new_consumer=new_consumer,
            )
        return self._own_envs[name]

    def channel(self, endpoint: str, cert: str | None = None) -> grpc.aio.Channel:
        """A TLS channel to ``endpoint`` presenting the certificate of ``cert`` (None: none;
        default on an mTLS server: the user certificate)."""
        if cert is None and ENDPOINTS[endpoint].mtls:
            cert = USER_CERT
        key = (endpoint, cert)
        if key not in self._channels:
            pem = key_pem = None
            if cert is not None:
                cert_path, key_path = self.files.certs[cert]
                pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
            creds = grpc.ssl_channel_credentials(self.files.ca_cert.read_bytes(), key_pem, pem)
            self._channels[key] = grpc.aio.secure_channel(self.addrs[endpoint], creds)
        return self._channels[key]

    def metadata(self, cred: Cred, rule: Rule, grant: Grant | None) -> Metadata:
        match cred:
            case Cred.NO_TOKEN:
                return ()
            case Cred.MALFORMED:
                return bearer("not.a.jwt")
            case Cred.EXPIRED:
                late = time.time() - 3600
                return bearer(issue_token("late", "user", "late", 60, self.secret, ISSUER, now=late))
            case Cred.FOREIGN_KEY:
                return bearer(issue_token("mallory", "user", "mallory", 600, secrets.token_hex(32), ISSUER))
            case Cred.UNBOUND:
                return bearer(self.token(UNBOUND_USER))
            case Cred.LACKS_PERMISSION:
                return bearer(self.token(lacking(rule.permission)))
            case Cred.CLAIMS_INTERNAL:
                return bearer(self.token(CLAIMED_MEMBER, principal_type="broker_internal"))
            case Cred.PERMITTED:
                if grant is None:  # a cluster member: its certificate, no token
                    return ()
                name = self.grants.get(grant)
                if name is None:
                    pytest.fail(f"no principal was bound for {grant} (the plan and the request differ)")
                return bearer(self.token(name))

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self._channels.values()))


def _tls(files: SecureFiles, identity: str, *, mtls: bool) -> dict[str, Any]:
    cert, key = files.certs[identity]
    return {
        "cert_file": str(cert),
        "key_file": str(key),
        "ca_file": str(files.ca_cert),
        "require_client_cert": mtls,
    }


def _security(files: SecureFiles, identity: str, endpoint: str) -> dict[str, Any]:
    """The ``tls`` and ``auth`` sections of the service ``identity`` serving ``endpoint``."""
    assert files.jwt_secret is not None
    return {
        "tls": _tls(files, identity, mtls=ENDPOINTS[endpoint].mtls),
        "auth": {
            "enabled": True,
            "jwt": {"issuer": ISSUER, "secret_file": str(files.jwt_secret)},
            "super_admins": [ROOT],
            "internal_identities": INTERNAL_IDENTITIES,
            "client_cert_users": False,
            "stream_recheck_interval_s": 0.2,
        },
    }


@contextlib.asynccontextmanager
async def _load_manager(cfg: LoadManagerConfig) -> AsyncIterator[Any]:
    async with service_running(load_manager_run, cfg, name="load-manager") as info:
        yield info


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_server: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    tmp: Path = tmp_path_factory.mktemp("authz")
    files = write_secure_files(
        tmp / "secure",
        [
            "lookup",
            f"broker-{BROKER_ID}",
            "leader-0",
            "load-manager-0",
            f"wal-uploader-{BROKER_ID}",
            USER_CERT,
        ],
    )
    assert files.jwt_secret is not None
    name = unique("authz")
    etcd: dict[str, Any] = {"endpoints": [etcd_server.endpoint], "cluster": name}
    data_dir = tmp / "broker"
    addrs: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as stack:
        store = EtcdStore([etcd_server.endpoint], request_timeout_s=5.0)
        stack.push_async_callback(store.aclose)
        await store.wait_ready(10)
        rbac = SecurityStore(store, Keys(name))
        env = Env.plan()
        grants = await plan_grants(env)
        await write_policy(rbac, grants, env)  # before the servers start: they load it at start-up
        lookup = await stack.enter_async_context(
            lookup_running(
                LookupConfig.model_validate(
                    {
                        "listen_addr": "127.0.0.1:0",
                        "admin_listen_addr": "127.0.0.1:0",
                        "etcd": etcd,
                        "shutdown_grace_s": 0.5,
                        "http_listen_addr": "127.0.0.1:0",
                        **_security(files, "lookup", "lookup"),
                    }
                )
            )
        )
        addrs["lookup"], addrs["lookup-admin"] = lookup.addr, lookup.admin_addr
        leader = await stack.enter_async_context(
            leader_running(
                LeaderConfig.model_validate(
                    {
                        "listen_addr": "127.0.0.1:0",
                        "etcd": etcd,
                        "shutdown_grace_s": 0.5,
                        "http_listen_addr": "127.0.0.1:0",
                        **_security(files, "leader-0", "leader"),
                    }
                )
            )
        )
        addrs["leader"] = leader.addr
        broker = await stack.enter_async_context(
            broker_running(
                BrokerConfig.model_validate(
                    {
                        "broker_id": BROKER_ID,
                        "data_dir": str(data_dir),
                        "listen_addr": "127.0.0.1:0",
                        "etcd": etcd,
                        # The shared producer and consumer must outlive the module's tests.
                        "producer_idle_timeout_s": 600,
                        "consumer_reconnect_grace_s": 600,
                        "subscription_idle_timeout_s": 600,
                        "lame_duck_timeout_s": 0,
                        "shutdown_grace_s": 0.5,
                        # Clients: TLS + a token (no certificate); services: mTLS, here.
                        "internal_listen_addr": "127.0.0.1:0",
                        "http_listen_addr": "127.0.0.1:0",
                        **_security(files, f"broker-{BROKER_ID}", "broker"),
                    }
                )
            )
        )
        addrs["broker"], addrs["broker-internal"] = broker.addr, broker.extra["internal_addr"]
        load_manager = await stack.enter_async_context(
            _load_manager(
                LoadManagerConfig.model_validate(
                    {
                        "candidate_id": "load-manager-0",
                        "listen_addr": "127.0.0.1:0",
                        "leader_endpoints": [leader.addr],
                        "etcd": etcd,
                        "shutdown_grace_s": 0.5,
                        "http_listen_addr": "127.0.0.1:0",
                        **_security(files, "load-manager-0", "load-manager"),
                    }
                )
            )
        )
        addrs["load-manager"] = load_manager.addr
        uploader = await stack.enter_async_context(
            uploader_running(
                WalUploaderConfig.model_validate(
                    {
                        "broker_id": BROKER_ID,
                        "data_dir": str(data_dir),
                        "listen_addr": "127.0.0.1:0",
                        "object_store": {"backend": "local", "local_dir": str(tmp / "objects")},
                        "etcd": etcd,
                        "shutdown_grace_s": 0.5,
                        "http_listen_addr": "127.0.0.1:0",
                        **_security(files, f"wal-uploader-{BROKER_ID}", "wal-uploader"),
                    }
                )
            )
        )
        addrs["wal-uploader"] = uploader.addr
        assert set(addrs) == set(ENDPOINTS)

        c = Cluster(
            files,
            files.jwt_secret.read_text().strip(),
            addrs,
            env,
            grants,
            rbac,
            ensure_ca(tmp / "secure"),
            etcd_server.endpoint,
            name,
        )
        stack.push_async_callback(c.aclose)
        c.http = {
            "lookup": lookup.http_url,
            "leader": leader.http_url,
            "broker": broker.http_url,
            "load-manager": load_manager.http_url,
            "wal-uploader": uploader.http_url,
        }
        producers = pb_grpc.ProducerServiceStub(c.channel("broker"))
        consumers = pb_grpc.ConsumerServiceStub(c.channel("broker"))

        async def new_producer() -> int:
            request = pb.ProducerRequest(
                request_id=next_request_id(), producer_name=unique("p"), topic_name=env.topic
            )
            resp = await producers.CreateProducer(request, timeout=CALL_TIMEOUT_S, metadata=c.root())
            return int(resp.producer_id)

        async def new_consumer() -> int:
            request = subscribe_request(env.topic, unique("s"))
            resp = await consumers.Subscribe(request, timeout=CALL_TIMEOUT_S, metadata=c.root())
            return int(resp.consumer_id)

        env.producer_id = await new_producer()  # creates the topic
        consumer = await consumers.Subscribe(
            subscribe_request(env.topic, env.subscription), timeout=CALL_TIMEOUT_S, metadata=c.root()
        )
        env.consumer_id = int(consumer.consumer_id)
        env.new_producer, env.new_consumer = new_producer, new_consumer
        yield c


# ---------------------------------------------------------------------------- the table


def _cases() -> list[Any]:
    return [
        pytest.param(rpc, server, id=f"{server}:{rpc.short}")
        for rpc in ALL_RPCS
        for server in SERVED_BY.get(rpc.service, ())
    ]


def test_every_service_has_a_server() -> None:
    unserved = sorted(set(ALL_SERVICES) - set(SERVED_BY))
    assert not unserved, f"services with no server in SERVED_BY (their RPCs would go untested): {unserved}"
    unknown = {s: e for s, es in SERVED_BY.items() for e in es if e not in ENDPOINTS}
    assert not unknown, f"SERVED_BY names servers this module does not start: {unknown}"


async def test_every_rpc_has_a_rule_and_a_request_naming_its_resource() -> None:
    env = Env.plan()
    for rpc in ALL_RPCS:
        rule = rule_of(rpc)
        request = await build_request(rpc, env)
        # An invalid resource would make every call INVALID_ARGUMENT: add a REQUESTS entry.
        rule.target(request)
        if rule.permission is Permission.CLUSTER_INTERNAL:
            callers = [ENDPOINTS[e] for e in SERVED_BY.get(rpc.service, ())]
            assert all(e.mtls and e.internal_caller for e in callers), (
                f"{rpc.path} is cluster_internal: only a server requiring client certificates "
                "sees a cluster member's certificate"
            )


@module_loop
@pytest.mark.parametrize("cred", list(Cred), ids=[c.value for c in Cred])
@pytest.mark.parametrize(("rpc", "server"), _cases())
async def test_rpc_with_credential(cluster: Cluster, rpc: Rpc, server: str, cred: Cred) -> None:
    rule = rule_of(rpc)
    internal = rule.permission is Permission.CLUSTER_INTERNAL
    request = await build_request(rpc, cluster.env)
    grant = None if internal else grant_for(rule, request, cluster.env)
    if cred is Cred.PERMITTED and grant is not None and isinstance(target_of(rule, request), Handle):
        # An id-only call: with a handle the permitted principal created itself.
        request = await build_request(rpc, await cluster.own_env(cluster.grants[grant], grant))
    endpoint = ENDPOINTS[server]
    cert = endpoint.internal_caller if (cred is Cred.PERMITTED and internal) else None
    timeout_s = (
        PERMITTED_STREAM_TIMEOUT_S if cred is Cred.PERMITTED and rpc.server_streaming else CALL_TIMEOUT_S
    )
    outcome = await call_once(
        cluster.channel(server, cert),
        rpc,
        request,
        metadata=cluster.metadata(cred, rule, grant),
        timeout_s=timeout_s,
    )

    if cred in UNAUTHENTICATED_BY:
        reason = UNAUTHENTICATED_BY[cred]
        assert outcome.code == grpc.StatusCode.UNAUTHENTICATED, outcome
        assert f"({reason.value})" in outcome.details, outcome
        expected_code = "TOKEN_EXPIRED" if cred is Cred.EXPIRED else "UNAUTHENTICATED"
        assert outcome.trailer(MD_ERROR_CODE) == expected_code, outcome.trailing
    elif cred is Cred.PERMITTED:
        assert outcome.code not in NOT_ADMITTED, f"{server} {NOT_ADMITTED.get(outcome.code)}: {outcome}"
    else:
        principal = {
            Cred.UNBOUND: f"user:{UNBOUND_USER}",
            Cred.LACKS_PERMISSION: f"user:{lacking(rule.permission)}",
            Cred.CLAIMS_INTERNAL: f"broker_internal:{CLAIMED_MEMBER}",
        }[cred]
        assert outcome.code == grpc.StatusCode.PERMISSION_DENIED, outcome
        assert f"{principal} may not {rule.permission.value}" in outcome.details, outcome
        assert outcome.trailer(MD_ERROR_CODE) == "PERMISSION_DENIED", outcome.trailing


def _names_a_handle(rpc: Rpc) -> bool:
    """The probe request of ``rpc`` names only a producer or consumer id (async builders make
    a fresh handle: their empty request tells the rule's target)."""
    rule, builder = RULES.get(rpc.path), REQUESTS.get(rpc.path)
    if rule is None:
        return False
    sync = builder is not None and not inspect.iscoroutinefunction(builder)
    request = builder(Env.plan()) if sync and builder is not None else rpc.request_type()
    assert isinstance(request, Message)
    return isinstance(target_of(rule, request), Handle)


def _handle_cases() -> list[Any]:
    return [p for p in _cases() if _names_a_handle(p.values[0])]


@module_loop
@pytest.mark.parametrize("caller", ["permitted", TOPIC_ADMIN])
@pytest.mark.parametrize(("rpc", "server"), _handle_cases())
async def test_another_principals_handle_is_refused(
    cluster: Cluster, rpc: Rpc, server: str, caller: str
) -> None:
    """Ids are guessable, so an id proves nothing: the principal permitted to make an id-only
    call with its own handle (the table above) is refused with root's, naming the reason; one
    holding manage_topic on the topic (the built-in admin role there) may use it."""
    rule = rule_of(rpc)
    request = await build_request(rpc, cluster.env)  # root's producer and consumer
    target = target_of(rule, request)
    assert isinstance(target, Handle), target
    name = cluster.grants[grant_for(rule, request, cluster.env)] if caller == "permitted" else caller
    timeout_s = PERMITTED_STREAM_TIMEOUT_S if rpc.server_streaming else CALL_TIMEOUT_S
    outcome = await call_once(
        cluster.channel(server), rpc, request, metadata=bearer(cluster.token(name)), timeout_s=timeout_s
    )
    if caller == TOPIC_ADMIN:
        assert outcome.code not in NOT_ADMITTED, f"{server} {NOT_ADMITTED.get(outcome.code)}: {outcome}"
        return
    assert outcome.code == grpc.StatusCode.PERMISSION_DENIED, outcome
    assert f"user:{name} may not use {target}" in outcome.details, outcome
    assert "belongs to the principal that created it" in outcome.details, outcome
    assert outcome.trailer(MD_ERROR_CODE) == "PERMISSION_DENIED", outcome.trailing


# ---------------------------------------------------------------------------- the table, backwards


def _probe(server: str) -> Rpc:
    """A unary RPC ``server`` serves (a super admin may call it)."""
    return next(r for r in ALL_RPCS if server in SERVED_BY.get(r.service, ()) and not r.streaming)


@module_loop
async def test_no_server_answers_for_a_service_not_listed_for_it(cluster: Cluster) -> None:
    """A super admin (whom authorization never stops) gets UNIMPLEMENTED from a server for a
    service it does not serve; any other answer means the server serves it, and SERVED_BY must
    list it there (else its RPCs there go untested). Without a super admin the answer would be
    the refusal: the interceptor authorizes a call to an unserved method before UNIMPLEMENTED."""
    pairs = [
        (service, server)
        for service in ALL_SERVICES
        for server in ENDPOINTS
        if server not in SERVED_BY.get(service, ())
    ]

    async def answer(service: str, server: str) -> Outcome:
        rpc = next(r for r in ALL_RPCS if r.service == service)
        request = await build_request(rpc, cluster.env)
        return await call_once(
            cluster.channel(server), rpc, request, metadata=cluster.root(), timeout_s=CALL_TIMEOUT_S
        )

    outcomes = await asyncio.gather(*(answer(s, e) for s, e in pairs))
    served = {
        pair: str(o)
        for pair, o in zip(pairs, outcomes, strict=True)
        if o.code != grpc.StatusCode.UNIMPLEMENTED
    }
    assert not served, f"servers answering for services SERVED_BY does not list there: {served}"


# ---------------------------------------------------------------------------- transport


@module_loop
@pytest.mark.parametrize("server", list(ENDPOINTS))
async def test_plaintext_client_is_refused(cluster: Cluster, server: str) -> None:
    rpc = _probe(server)
    request = await build_request(rpc, cluster.env)
    async with grpc.aio.insecure_channel(cluster.addrs[server]) as plain:
        outcome = await call_once(plain, rpc, request, metadata=cluster.root(), timeout_s=CALL_TIMEOUT_S)
    assert outcome.code == grpc.StatusCode.UNAVAILABLE, outcome


MTLS_SERVERS = [e.name for e in ENDPOINTS.values() if e.mtls]


@module_loop
@pytest.mark.parametrize("kind", ["untrusted_ca", "expired"])
@pytest.mark.parametrize("server", MTLS_SERVERS)
async def test_bad_client_certificate_is_refused(cluster: Cluster, server: str, kind: str) -> None:
    """Where client certificates are required, one from another CA or an expired one ends the
    handshake: not even a super admin's token gets through with it."""
    rpc = _probe(server)
    request = await build_request(rpc, cluster.env)
    # The same call with the good user certificate passes: the certificate is what is refused.
    good = await call_once(
        cluster.channel(server), rpc, request, metadata=cluster.root(), timeout_s=CALL_TIMEOUT_S
    )
    assert good.code not in NOT_ADMITTED and good.code != grpc.StatusCode.UNAVAILABLE, good

    bad = (
        untrusted_certificate(USER_CERT)
        if kind == "untrusted_ca"
        else expired_certificate(cluster.ca, USER_CERT)
    )
    creds = grpc.ssl_channel_credentials(cluster.files.ca_cert.read_bytes(), bad.key_pem(), bad.cert_pem())
    async with grpc.aio.secure_channel(cluster.addrs[server], creds) as channel:
        outcome = await call_once(channel, rpc, request, metadata=cluster.root(), timeout_s=CALL_TIMEOUT_S)
    assert outcome.code == grpc.StatusCode.UNAVAILABLE, outcome


@module_loop
async def test_internal_listener_refuses_a_client_without_certificate(cluster: Cluster) -> None:
    """The broker's internal listener requires client certificates whatever the client port
    does: a TLS client without one does not get through the handshake there (not even a super
    admin's token helps), while the same call on the client port passes."""
    rpc = _probe("broker")
    request = await build_request(rpc, cluster.env)
    creds = grpc.ssl_channel_credentials(cluster.files.ca_cert.read_bytes())
    outcomes = {}
    for server in ("broker", "broker-internal"):
        async with grpc.aio.secure_channel(cluster.addrs[server], creds) as channel:
            outcomes[server] = await call_once(
                channel, rpc, request, metadata=cluster.root(), timeout_s=CALL_TIMEOUT_S
            )
    assert outcomes["broker-internal"].code == grpc.StatusCode.UNAVAILABLE, outcomes
    assert outcomes["broker"].code == grpc.StatusCode.OK, outcomes


@module_loop
async def test_client_certificate_unseen_without_mtls(cluster: Cluster) -> None:
    """A server that does not require client certificates never asks for one: a cluster
    member's certificate there identifies nobody (internal RPCs need mTLS servers)."""
    rpc = _probe("lookup")
    request = await build_request(rpc, cluster.env)
    channel = cluster.channel("lookup", f"broker-{BROKER_ID}")
    outcome = await call_once(channel, rpc, request, timeout_s=CALL_TIMEOUT_S)
    assert outcome.code == grpc.StatusCode.UNAUTHENTICATED, outcome
    assert f"({AuthFailure.MISSING.value})" in outcome.details, outcome


@module_loop
async def test_services_reach_each_other_with_their_certificates(cluster: Cluster) -> None:
    """The load manager campaigns at the leader (mTLS, cluster_internal) and leads; the lookup
    forwards topic stats to the broker's stats service (cluster_internal) at the internal
    listener the broker registered (mTLS), while the broker's client port takes clients
    without certificates."""
    assert not ENDPOINTS["broker"].mtls and ENDPOINTS["broker-internal"].mtls
    store = EtcdStore([cluster.etcd_endpoint], request_timeout_s=5.0)
    try:
        record = await Resources(store, Keys(cluster.name)).get_broker(BROKER_ID)
    finally:
        await store.aclose()
    assert record is not None and record.internal_addr == cluster.addrs["broker-internal"], record
    assert record.broker_addr == cluster.addrs["broker"] != record.internal_addr
    status = next(r for r in ALL_RPCS if r.path == "/danube.loadmanager.v1.LoadManagerStatus/GetStatus")

    async def leading() -> bool:
        o = await call_once(
            cluster.channel("load-manager"),
            status,
            lmpb.GetStatusRequest(),
            metadata=cluster.root(),
            timeout_s=CALL_TIMEOUT_S,
        )
        assert o.code == grpc.StatusCode.OK, o
        return bool(getattr(o.response, "leading", False))

    await wait_until(
        leading, timeout_s=15, what="the load manager leads (its campaign passed the leader's mTLS)"
    )

    stats = next(r for r in ALL_RPCS if r.path == "/danube.admin.v1.TopicAdmin/GetTopicStats")
    o = await call_once(
        cluster.channel("lookup-admin"),
        stats,
        apb.TopicStatsRequest(name=cluster.env.topic),
        metadata=cluster.root(),
        timeout_s=CALL_TIMEOUT_S,
    )
    assert o.code == grpc.StatusCode.OK, o
    assert isinstance(o.response, apb.TopicStats) and o.response.broker_id == BROKER_ID, o.response


# ---------------------------------------------------------------------------- revocation


def _payloads(item: Message) -> list[bytes]:
    if isinstance(item, pb.MessageBatch):
        return [m.payload for m in item.messages]
    assert isinstance(item, pb.StreamMessage)
    return [item.payload]


@module_loop
@pytest.mark.parametrize("method", ["ReceiveMessages", "ReceiveBatches"])
async def test_revoked_binding_stops_a_running_consumer(cluster: Cluster, method: str) -> None:
    """A consumer receiving on a stream loses its binding: its next ack is refused, and its
    running stream ends with PERMISSION_DENIED at the next delivery after the re-check interval
    (test_security_wiring covers a unary call's revocation)."""
    env = cluster.env
    name = unique("revokee")
    principal = f"user:{name}"
    md = bearer(cluster.token(name))
    channel = cluster.channel("broker")
    consumers = pb_grpc.ConsumerServiceStub(channel)
    producers = pb_grpc.ProducerServiceStub(channel)
    subscription = unique("revoked-sub")
    await cluster.rbac.create_binding(Binding.create(name, principal, "consumer", Scope.TOPIC, env.topic))

    async def subscribed() -> pb.ConsumerResponse | None:
        try:
            return await consumers.Subscribe(
                subscribe_request(env.topic, subscription), timeout=CALL_TIMEOUT_S, metadata=md
            )
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise
            return None  # the broker's RBAC view has not seen the binding yet

    consumer = await wait_until(subscribed, timeout_s=5, what="the binding takes effect")

    async def publish(payload: bytes) -> None:
        msg = pb.StreamMessage(
            request_id=next_request_id(),
            msg_id=pb.MsgID(producer_id=env.producer_id, topic_name=env.topic),
            payload=payload,
            producer_name="authz-probe",
        )
        await producers.SendMessage(msg, timeout=CALL_TIMEOUT_S, metadata=cluster.root())

    if method == "ReceiveMessages":
        stream: Any = consumers.ReceiveMessages(
            pb.ReceiveRequest(request_id=1, consumer_id=consumer.consumer_id), timeout=30, metadata=md
        )
    else:
        stream = consumers.ReceiveBatches(
            pb.ReceiveBatchRequest(request_id=1, consumer_id=consumer.consumer_id), timeout=30, metadata=md
        )
    received: list[bytes] = []

    async def read() -> grpc.aio.AioRpcError | None:
        try:
            async for item in stream:
                received.extend(_payloads(item))
        except grpc.aio.AioRpcError as err:
            return err
        return None

    reader = asyncio.create_task(read(), name="revoked-consumer-stream")
    try:
        await publish(b"before")
        await wait_until(lambda: b"before" in received, timeout_s=5, what="delivery while bound")
        ack = pb.AckRequest(
            request_id=next_request_id(),
            msg_id=pb.MsgID(topic_name=env.topic),
            subscription_name=subscription,
        )
        await consumers.Ack(ack, timeout=CALL_TIMEOUT_S, metadata=md)

        await cluster.rbac.delete_binding(name)

        async def ack_refused() -> bool:
            try:
                await consumers.Ack(ack, timeout=CALL_TIMEOUT_S, metadata=md)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err
                return True
            return False

        await wait_until(ack_refused, timeout_s=2, what="the revoked consumer's next ack is refused")

        async def stream_ended() -> bool:
            if reader.done():
                return True
            await publish(b"after")
            return False

        await wait_until(stream_ended, timeout_s=5, interval_s=0.1, what="the running stream ends")
        err = reader.result()
        assert err is not None and err.code() == grpc.StatusCode.PERMISSION_DENIED, err
        assert f"{principal} may not consume" in (err.details() or ""), err
    finally:
        stream.cancel()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


# ---------------------------------------------------------------------------- the HTTP endpoints

#: Each credential's answer from /metrics, which needs ``lookup`` on the cluster.
HTTP_STATUS = {
    Cred.NO_TOKEN: 401,
    Cred.MALFORMED: 401,
    Cred.EXPIRED: 401,
    Cred.FOREIGN_KEY: 401,
    Cred.UNBOUND: 403,
    Cred.LACKS_PERMISSION: 403,
    Cred.CLAIMS_INTERNAL: 403,
    Cred.PERMITTED: 200,
}
HTTP_SERVICES = ("lookup", "broker", "leader", "load-manager", "wal-uploader")
#: What a service's own /metrics holds besides the process metrics (one family each).
OWN_METRIC = {
    "lookup": b"danube_lookup_",
    "broker": b"danube_broker_topics_owned",
    "leader": b"danube_leader_",
    "load-manager": b"danube_leader_election_state",
    "wal-uploader": b"danube_wal_uploader_",
}


async def _lookup_rule_and_grant(cluster: Cluster) -> tuple[Rule, Grant]:
    """``lookup`` on the cluster, as the admin API's ListBrokers asks for it."""
    rpc = next(r for r in ALL_RPCS if r.path == "/danube.admin.v1.BrokerAdmin/ListBrokers")
    rule = rule_of(rpc)
    assert rule.permission is Permission.LOOKUP
    return rule, grant_for(rule, await build_request(rpc, cluster.env), cluster.env)


async def _http(
    cluster: Cluster, url: str, headers: Metadata, *, method: str = "GET", body: object = None
) -> tuple[int, bytes]:
    ssl_ctx = ssl.create_default_context(cafile=str(cluster.files.ca_cert))
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)) as session,
        session.request(method, url, headers=dict(headers), json=body, ssl=ssl_ctx) as resp,
    ):
        return resp.status, await resp.read()


@module_loop
@pytest.mark.parametrize("cred", list(Cred))
@pytest.mark.parametrize("service", HTTP_SERVICES)
async def test_metrics_endpoint_with_credential(cluster: Cluster, service: str, cred: Cred) -> None:
    rule, grant = await _lookup_rule_and_grant(cluster)
    status, body = await _http(
        cluster, f"{cluster.http[service]}/metrics", cluster.metadata(cred, rule, grant)
    )
    assert status == HTTP_STATUS[cred], body.decode(errors="replace")
    if status == 200:
        assert b"process_cpu_seconds_total" in body and OWN_METRIC[service] in body
    else:
        assert b"danube_" not in body, "a refusal shows no metric"


@module_loop
@pytest.mark.parametrize("service", HTTP_SERVICES)
async def test_healthz_is_open_and_plaintext_is_refused(cluster: Cluster, service: str) -> None:
    assert await _http(cluster, f"{cluster.http[service]}/healthz", ()) == (200, b"ok\n")
    plain = cluster.http[service].replace("https://", "http://")
    with pytest.raises(aiohttp.ClientError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)) as session:
            await session.get(f"{plain}/metrics")


@module_loop
@pytest.mark.parametrize("cred", list(Cred))
async def test_console_api_is_the_admin_apis_rbac(cluster: Cluster, cred: Cred) -> None:
    """The console's API carries the caller's token to the admin API: a read needs what
    ListBrokers needs; an action (a move) needs ``manage_cluster``, which a reader lacks."""
    rule, grant = await _lookup_rule_and_grant(cluster)
    status, body = await _http(
        cluster, f"{cluster.http['lookup']}/api/brokers", cluster.metadata(cred, rule, grant)
    )
    assert status == HTTP_STATUS[cred], body.decode(errors="replace")
    if cred is Cred.PERMITTED:
        topic = cluster.env.topic.lstrip("/")
        status, body = await _http(
            cluster,
            f"{cluster.http['lookup']}/api/topics/{topic}/move",
            cluster.metadata(cred, rule, grant),
            method="POST",
            body={},
        )
        assert status == 403 and b"PERMISSION_DENIED" in body, body.decode(errors="replace")
