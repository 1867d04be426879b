"""What ``danube-local up --secure`` adds to a local cluster: each service's TLS and auth
settings, the tokens, and the demo's role bindings.

Everything lives in ``{workdir}/secure/`` (mode 0700), made by :mod:`danube_local.secure`:

- ``ca.pem``/``ca.key``: the cluster's CA, made once and kept (so are the certificates below,
  while they are valid for another 30 days and name the same hosts);
- ``{service}.pem``/``.key``: one certificate per process, named as the launcher names it
  (``lookup``, ``broker-1``, ``leader-1``, ``load-manager-1``, ``wal-uploader-1``, ``planner``),
  made when the process first starts; the process serves TLS with it and presents it to the
  services it calls (mTLS: that is how services recognise each other);
- ``etcd.pem``/``.key``: etcd's own certificate: the launcher's etcd serves TLS and requires a
  client certificate from the CA (``--client-cert-auth``); every service presents its own;
- ``admin.pem``/``.key``: a client certificate for people and tools. The lookup's ports and the
  brokers' client ports take TLS and a bearer token without one (as danube-client 0.5.0's
  ``with_tls`` + ``with_token`` connect); the leader service, the load managers, the WAL
  uploaders and each broker's internal listener, which only the cluster's services call,
  require one. A certificate only opens the connection: who calls is the bearer token
  (``client_cert_users`` is off), or for the cluster's services their certificate's name;
- ``jwt-secret``: the HS256 secret every server checks tokens with (kept across restarts);
- ``admin.jwt``: a token of the super admin ``admin`` (configured in ``auth.super_admins``,
  not a stored binding); ``demo-producer.jwt`` / ``demo-consumer.jwt``: tokens of
  ``user:demo-producer`` and ``user:demo-consumer``, who hold the built-in ``producer`` and
  ``consumer`` roles on namespace ``default`` through bindings the launcher writes to etcd
  before the services start. Tokens are issued anew at every start (earlier ones stay valid
  until they expire: the secret is the same).

Services get their settings as environment variables (``DANUBE_BROKER_TLS__CERT_FILE``, ...),
which override a ``--broker-config``/``--lookup-config`` YAML file: the launcher never imports
the services, so their environment prefixes are written out here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from danube_common.config import EtcdConfig
from danube_common.etcd_server import EtcdServerTls
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.store import MetadataStore
from danube_common.security import Binding, SecurityStore, issue_token
from danube_local.secure import (
    ADMIN_IDENTITY,
    CA_CERT_FILE,
    DEFAULT_HOSTS,
    JWT_SECRET_FILE,
    CertifiedKey,
    _write,
    ensure_ca,
    ensure_certificate,
    ensure_jwt_secret,
)

__all__ = [
    "ADMIN_SUBJECT",
    "DEMO_CONSUMER",
    "DEMO_GRANTS",
    "DEMO_PRODUCER",
    "ENV_PREFIXES",
    "INTERNAL_IDENTITIES",
    "ISSUER",
    "DemoGrant",
    "SecureMode",
    "as_env",
    "https",
    "service_settings",
]

SECURE_DIR = "secure"
#: The certificate name of the launcher's etcd.
ETCD_IDENTITY = "etcd"
#: ``iss`` of every token (the services' default ``auth.jwt.issuer``).
ISSUER = "danube"
#: The super admin's token subject (``auth.super_admins``).
ADMIN_SUBJECT = "admin"
TOKEN_TTL_S = 30 * 86400.0
#: Namespace the demo's bindings apply to.
DEMO_NAMESPACE = "default"

#: Each service's environment prefix (its ``__main__.ENV_PREFIX``), by ServiceProcess.kind.
ENV_PREFIXES: dict[str, str] = {
    "lookup": "DANUBE_LOOKUP",
    "broker": "DANUBE_BROKER",
    "leader": "DANUBE_LEADER",
    "load_manager": "DANUBE_LOAD_MANAGER",
    "wal_uploader": "DANUBE_WAL_UPLOADER",
    "planner": "DANUBE_PLANNER",
}
#: Kinds that serve gRPC (the planner only calls the leader service).
SERVING_KINDS = frozenset({"lookup", "broker", "leader", "load_manager", "wal_uploader"})
#: Kinds whose servers take producers, consumers and admin tools: TLS and a bearer token, no
#: client certificate (danube-client's ``with_tls`` + ``with_token``). The others serve only the
#: cluster's own services and require one (mTLS); so does each broker's internal listener
#: (``--internal-listen``), where services call brokers.
CLIENT_FACING_KINDS = frozenset({"lookup", "broker"})
#: Certificate names of the cluster's own services (``auth.internal_identities``).
INTERNAL_IDENTITIES: tuple[str, ...] = (
    "lookup",
    "broker-*",
    "leader-*",
    "load-manager-*",
    "wal-uploader-*",
    "planner",
)


@dataclass(frozen=True, slots=True)
class DemoGrant:
    """A demo principal ``user:{name}``: its token file, and its role on the demo namespace
    through the binding ``{name}``."""

    name: str
    role: str

    @property
    def principal(self) -> str:
        return f"user:{self.name}"

    def binding(self) -> Binding:
        return Binding.create(self.name, self.principal, self.role, "namespace", DEMO_NAMESPACE)


DEMO_PRODUCER = DemoGrant("demo-producer", "producer")
DEMO_CONSUMER = DemoGrant("demo-consumer", "consumer")
DEMO_GRANTS: tuple[DemoGrant, ...] = (DEMO_PRODUCER, DEMO_CONSUMER)


def service_settings(
    kind: str, *, cert_file: Path, key_file: Path, ca_file: Path, secret_file: Path, etcd_tls: bool = False
) -> dict[str, str]:
    """A service's ``tls`` and ``auth`` settings as dotted config paths (pure); with
    ``etcd_tls`` also how it reaches etcd (TLS, its certificate as the client certificate)."""
    settings = {
        "tls.cert_file": str(cert_file),
        "tls.key_file": str(key_file),
        "tls.ca_file": str(ca_file),
    }
    if etcd_tls:
        settings |= {
            "etcd.ca_file": str(ca_file),
            "etcd.cert_file": str(cert_file),
            "etcd.key_file": str(key_file),
        }
    if kind not in SERVING_KINDS:  # a pure client (the planner): its certificate is its identity
        return settings
    return settings | {
        "tls.require_client_cert": "false" if kind in CLIENT_FACING_KINDS else "true",
        "auth.enabled": "true",
        "auth.jwt.issuer": ISSUER,
        "auth.jwt.algorithm": "HS256",
        "auth.jwt.secret_file": str(secret_file),
        "auth.super_admins": ADMIN_SUBJECT,
        "auth.internal_identities": ",".join(INTERNAL_IDENTITIES),
        "auth.client_cert_users": "false",
    }


def as_env(prefix: str, settings: Mapping[str, str]) -> dict[str, str]:
    """``{"tls.cert_file": v}`` -> ``{"{prefix}_TLS__CERT_FILE": v}`` (the services' env layer)."""
    return {f"{prefix}_{path.replace('.', '__').upper()}": value for path, value in settings.items()}


def _listen_hosts(host: str) -> tuple[str, ...]:
    """The names every certificate carries: loopback, and the launcher's listen host."""
    if host in DEFAULT_HOSTS or host in ("0.0.0.0", "::", ""):
        return DEFAULT_HOSTS
    return (*DEFAULT_HOSTS, host)


class SecureMode:
    """The files of a secured local cluster and the settings each process gets."""

    def __init__(self, workdir: Path, *, host: str = "127.0.0.1", token_ttl_s: float = TOKEN_TTL_S) -> None:
        self.directory = Path(workdir).resolve() / SECURE_DIR
        self.hosts = _listen_hosts(host)
        self.token_ttl_s = token_ttl_s
        self._ca: CertifiedKey | None = None
        #: The launcher runs etcd itself, with TLS (False: an existing etcd, reached as given).
        self.etcd_tls = False
        #: When :meth:`prepare` issued the tokens (unix s).
        self.issued_at = 0.0

    # ------------------------------------------------------------------ paths
    @property
    def ca_file(self) -> Path:
        return self.directory / CA_CERT_FILE

    @property
    def secret_file(self) -> Path:
        return self.directory / JWT_SECRET_FILE

    @property
    def client_cert(self) -> Path:
        return self.directory / f"{ADMIN_IDENTITY}.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / f"{ADMIN_IDENTITY}.key"

    def token_file(self, name: str) -> Path:
        return self.directory / f"{name}.jwt"

    @property
    def admin_token_file(self) -> Path:
        return self.token_file(ADMIN_SUBJECT)

    def token(self, name: str) -> str:
        return self.token_file(name).read_text().strip()

    # ------------------------------------------------------------------ files
    def prepare(self) -> None:
        """The CA, the JWT secret and the client certificate (each kept if usable), and fresh
        tokens (the admin's and the demo principals'). OSError/ValueError on a bad directory."""
        self._ca = ensure_ca(self.directory)
        ensure_jwt_secret(self.secret_file)
        self.issued_at = time.time()
        ensure_certificate(self.directory, self._ca, ADMIN_IDENTITY, hosts=self.hosts, server=False)
        self._write_token(ADMIN_SUBJECT)
        for grant in DEMO_GRANTS:
            self._write_token(grant.name)

    def _write_token(self, name: str) -> None:
        secret = self.secret_file.read_text().strip()
        token = issue_token(name, "user", name, self.token_ttl_s, secret, ISSUER, now=self.issued_at)
        _write(self.token_file(name), token.encode(), 0o600)

    @property
    def expires_at(self) -> float:
        """When the tokens :meth:`prepare` issued expire (unix s)."""
        return self.issued_at + self.token_ttl_s

    def etcd_server_tls(self) -> EtcdServerTls:
        """TLS of the launcher's own etcd: its certificate (made the first time), client
        certificates required."""
        if self._ca is None:
            raise RuntimeError("SecureMode.prepare() must run before etcd starts")
        cert, key = ensure_certificate(self.directory, self._ca, ETCD_IDENTITY, hosts=self.hosts, server=True)
        return EtcdServerTls(cert_file=cert, key_file=key, ca_file=self.ca_file, client_cert_auth=True)

    def etcd_config(self, endpoint: str, *, request_timeout_s: float = 5.0) -> EtcdConfig:
        """How the launcher itself reaches its TLS etcd (the admin client certificate)."""
        return EtcdConfig(
            endpoints=[endpoint],
            request_timeout_s=request_timeout_s,
            ca_file=str(self.ca_file),
            cert_file=str(self.client_cert),
            key_file=str(self.client_key),
        )

    def service_env(self, kind: str, name: str) -> dict[str, str]:
        """The environment that secures the process ``name`` of ``kind`` (its certificate is
        made here the first time)."""
        if self._ca is None:
            raise RuntimeError("SecureMode.prepare() must run before services start")
        prefix = ENV_PREFIXES.get(kind)
        if prefix is None:
            raise ValueError(f"no environment prefix known for a {kind!r} service")
        cert, key = ensure_certificate(self.directory, self._ca, name, hosts=self.hosts, server=True)
        settings = service_settings(
            kind,
            cert_file=cert,
            key_file=key,
            ca_file=self.ca_file,
            secret_file=self.secret_file,
            etcd_tls=self.etcd_tls,
        )
        return as_env(prefix, settings)

    # ------------------------------------------------------------------ etcd
    async def grant_demo_roles(self, store: MetadataStore, keys: Keys) -> list[Binding]:
        """Make the demo's bindings what :data:`DEMO_GRANTS` says (a changed one is replaced,
        a deleted one comes back); returns the bindings it wrote."""
        rbac = SecurityStore(store, keys)
        written = []
        for grant in DEMO_GRANTS:
            want = grant.binding()
            have = await rbac.get_binding(want.name)
            if have == want:
                continue
            if have is not None:
                await rbac.delete_binding(want.name)
            await rbac.create_binding(want)
            written.append(want)
        return written

    def grant_demo_roles_sync(self, etcd_endpoint: str, cluster: str, *, timeout_s: float) -> None:
        """:meth:`grant_demo_roles` on ``etcd_endpoint``, from synchronous code (any thread)."""

        async def grant() -> None:
            if self.etcd_tls:
                store = EtcdStore.from_config(
                    self.etcd_config(etcd_endpoint, request_timeout_s=min(timeout_s, 5.0))
                )
            else:
                store = EtcdStore([etcd_endpoint], request_timeout_s=min(timeout_s, 5.0))
            try:
                await store.wait_ready(timeout_s)
                await self.grant_demo_roles(store, Keys(cluster))
            finally:
                await store.aclose()

        # A thread of its own: the caller may be running an event loop (tests do).
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="grant-demo-roles") as pool:
            pool.submit(asyncio.run, grant()).result(timeout=timeout_s + 5.0)


def https(url: str) -> str:
    """A ready file's ``http://`` URL as the ``https://`` URL of a secured service."""
    return "https://" + url.removeprefix("http://") if url.startswith("http://") else url
