"""``danube-secure`` and ``danube-tls``: the ``danube`` driver's workloads on a secured cluster,
to price security against the plaintext cluster measured in the same run.

``danube-secure`` runs ``LocalCluster(secure=True)`` (what ``danube-local up --secure`` runs,
deploy/danube_local/secure_mode.py): every server serves TLS and requires a client certificate
signed by the cluster's CA (mTLS), authenticates a JWT bearer token on every call and authorizes
it with default-deny RBAC. Reliable topics are fsynced before the ack, as with ``danube``.

Its clients are not super admins, so the RBAC path is the one real applications take:

- producers connect with the token of ``user:demo-producer`` (role ``producer``: lookup +
  produce, on namespace ``default``), consumers with the token of ``user:demo-consumer`` (role
  ``consumer``: lookup + consume, on namespace ``default``): the bindings the launcher writes to
  etcd before the services start, and tokens it issues at start (``{workdir}/secure/*.jwt``);
- both present the launcher's client certificate (``admin.pem``), which only opens the TLS
  connection (``client_cert_users`` is off: the token says who calls);
- topics are created with the super admin's token: set-up, not measured.

``danube-tls`` is the same cluster with ``auth.enabled`` false on every service: TLS and mTLS
only, no tokens, no RBAC. Next to the two others it splits the cost of security into its
transport part (TLS) and its authentication + authorization part (secure - tls).

Run them next to ``danube`` in one run (``--drivers danube,danube-tls,danube-secure``) and the
harness prints each one's ratios to ``danube`` (bench/harness/report.py ``variant_ratios``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc.aio

from bench.drivers.danube import DanubeDriver, close_client
from danube_local.secure_mode import DEMO_CONSUMER, DEMO_PRODUCER, ENV_PREFIXES, SecureMode

SECURITY = "TLS + mTLS, JWT, RBAC"
TLS_ONLY = "TLS + mTLS, no auth"


def _read_token(path: str) -> str:
    return Path(path).read_text().strip()


class _TlsOnlyMode(SecureMode):
    """The launcher's secure mode with authentication and RBAC switched off on every service."""

    def service_env(self, kind: str, name: str) -> dict[str, str]:
        return super().service_env(kind, name) | {f"{ENV_PREFIXES[kind]}_AUTH__ENABLED": "false"}


class DanubeSecureDriver(DanubeDriver):
    name = "danube-secure"
    durability = f"fsync before ack; {SECURITY}"
    secure = True
    #: Tokens and RBAC on (False: TLS and mTLS only).
    auth = True

    def __init__(self, *, brokers: int = 1) -> None:
        super().__init__(brokers=brokers)
        self._consumer_side: Any = None  # the client consumers use (``_client``: producers')

    def durability_of(self, *, reliable: bool) -> str:
        if reliable:
            return self.durability
        return f"in memory (non-reliable); {SECURITY if self.auth else TLS_ONLY}"

    def client_spec(self) -> dict[str, Any]:
        spec = super().client_spec()
        sec = self._cluster.security
        assert sec is not None, "the cluster was not started secured"
        spec["tls"] = {
            "ca_file": str(sec.ca_file),
            "cert_file": str(sec.client_cert),
            "key_file": str(sec.client_key),
        }
        if self.auth:
            spec["producer_token_file"] = str(sec.token_file(DEMO_PRODUCER.name))
            spec["consumer_token_file"] = str(sec.token_file(DEMO_CONSUMER.name))
        return spec

    def _connect(self, spec: dict[str, Any]) -> None:
        """Two clients over TLS: one with the producer's token, one with the consumer's (each
        opens its channels at its first call, so a producer worker never connects the other)."""
        from danube_sdk import DanubeClient, TlsOptions

        tls = TlsOptions(**spec["tls"])
        url = spec["service_url"]
        producer_token = _read_token(spec["producer_token_file"]) if self.auth else None
        consumer_token = _read_token(spec["consumer_token_file"]) if self.auth else None
        self._client = DanubeClient(url, tls=tls, token=producer_token)
        self._consumer_side = DanubeClient(url, tls=tls, token=consumer_token)

    async def _close_clients(self) -> None:
        consumer_side, self._consumer_side = self._consumer_side, None
        await super()._close_clients()
        await close_client(consumer_side)

    async def _consumer_client(self) -> Any:
        return self._consumer_side

    def _admin_channel(self) -> grpc.aio.Channel:
        """TLS with the client certificate and the super admin's token (topic creation only)."""
        from danube_sdk.auth import ChannelSecurity, TlsOptions

        sec = self._cluster.security
        tls = TlsOptions(ca_file=sec.ca_file, cert_file=sec.client_cert, key_file=sec.client_key)
        token = _read_token(str(sec.admin_token_file)) if self.auth else None
        url = self._cluster.admin_url
        return ChannelSecurity(url, tls=tls, token=token).open_channel(url)


class DanubeTlsDriver(DanubeSecureDriver):
    name = "danube-tls"
    durability = f"fsync before ack; {TLS_ONLY}"
    auth = False

    def _configure(self, cluster: Any) -> None:
        cluster.security = _TlsOnlyMode(cluster.workdir, host=cluster.host)
