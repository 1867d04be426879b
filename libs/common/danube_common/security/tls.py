"""TLS for gRPC servers and the channels services open to each other.

:class:`TlsConfig` is a field of a service's config (``tls:``). Plaintext is the default; a
config that sets ``cert_file`` and ``key_file`` serves TLS, and ``require_client_cert`` (with
``ca_file``) makes it mTLS: every client must present a certificate signed by that CA, and the
certificate's names are the peer's identity (:func:`peer_identity`).

Every file is read and checked when the credentials are built, at start-up: a service asked for
TLS that cannot use its files refuses to start with a :class:`ConfigError` naming the file and
what to do (unreadable, not PEM, key not matching the certificate, certificate expired).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from pydantic import model_validator

from danube_common.config import Frozen
from danube_common.errors import ConfigError
from danube_common.grpc_util import bind

_PUBLIC_DER = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


class TlsConfig(Frozen):
    #: PEM certificate chain this process presents (server side, and to peers with mTLS).
    cert_file: str | None = None
    #: PEM private key of ``cert_file`` (unencrypted).
    key_file: str | None = None
    #: PEM CA bundle: verifies client certificates (servers) and the servers (channels).
    #: Unset on a channel: the system's roots.
    ca_file: str | None = None
    #: mTLS: refuse clients that present no certificate signed by ``ca_file``.
    require_client_cert: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> TlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "tls.cert_file and tls.key_file go together: set both (TLS) or neither (plaintext)"
            )
        if self.require_client_cert and not (self.enabled and self.ca_file):
            raise ValueError(
                "tls.require_client_cert needs tls.cert_file, tls.key_file and tls.ca_file "
                "(the CA that signs the client certificates)"
            )
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file and self.key_file)


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The checked PEM bytes of a TlsConfig."""

    cert_chain: bytes | None
    private_key: bytes | None
    ca: bytes | None


def _read(name: str, path: str, off: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{name} {path!r} does not exist: fix the path, or {off}") from None
    except OSError as exc:
        raise ConfigError(
            f"{name} {path!r} cannot be read ({exc.strerror or exc}): check its permissions for this user"
        ) from exc
    if not data.strip():
        raise ConfigError(f"{name} {path!r} is empty: it must hold PEM data")
    return data


def _certs(name: str, path: str, data: bytes) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ConfigError(
            f"{name} {path!r} is not a PEM certificate (expected '-----BEGIN CERTIFICATE-----'): {exc}"
        ) from exc
    if not certs:
        raise ConfigError(f"{name} {path!r} holds no certificate")
    return certs


def load_pem_files(
    section: str,
    *,
    cert_file: str | None = None,
    key_file: str | None = None,
    ca_file: str | None = None,
    off: str,
    now: dt.datetime | None = None,
) -> TlsMaterial:
    """Read and check a certificate + key pair and a CA bundle, any of them unset (ConfigError
    naming ``{section}.{field}``, the file and what to do; ``off`` says how to do without it,
    e.g. "unset tls to serve plaintext"). The pair must match and the certificate must not
    have expired. Used for the ``tls`` section and for the TLS of etcd and S3 clients."""
    cert_pem = key_pem = ca_pem = None
    if cert_file and key_file:
        cert_name, key_name = f"{section}.cert_file", f"{section}.key_file"
        cert_pem = _read(cert_name, cert_file, off)
        leaf = _certs(cert_name, cert_file, cert_pem)[0]
        key_pem = _read(key_name, key_file, off)
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except TypeError as exc:  # encrypted
            raise ConfigError(
                f"{key_name} {key_file!r} is encrypted: give an unencrypted key "
                "(`openssl pkey -in key.pem -out key-plain.pem`)"
            ) from exc
        except ValueError as exc:
            raise ConfigError(
                f"{key_name} {key_file!r} is not a PEM private key (expected '-----BEGIN ... PRIVATE KEY-----'): {exc}"
            ) from exc
        if key.public_key().public_bytes(*_PUBLIC_DER) != leaf.public_key().public_bytes(*_PUBLIC_DER):
            raise ConfigError(
                f"{key_name} {key_file!r} is not the key of {cert_name} {cert_file!r}: "
                "give the key the certificate was issued for"
            )
        moment = now or dt.datetime.now(dt.UTC)
        if leaf.not_valid_after_utc <= moment:
            raise ConfigError(
                f"{cert_name} {cert_file!r} expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: "
                "renew the certificate"
            )
    if ca_file:
        ca_name = f"{section}.ca_file"
        ca_pem = _read(ca_name, ca_file, off)
        _certs(ca_name, ca_file, ca_pem)
    return TlsMaterial(cert_pem, key_pem, ca_pem)


def load_material(cfg: TlsConfig, *, now: dt.datetime | None = None) -> TlsMaterial:
    """Read and check every file of ``cfg`` (ConfigError naming the file and what to do)."""
    return load_pem_files(
        "tls",
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        ca_file=cfg.ca_file,
        off="unset tls to serve plaintext",
        now=now,
    )


def server_credentials(cfg: TlsConfig) -> grpc.ServerCredentials:
    """Credentials for ``server.add_secure_port`` (mTLS when ``require_client_cert``)."""
    if not cfg.enabled:
        raise ConfigError("TLS is not configured: set tls.cert_file and tls.key_file")
    m = load_material(cfg)
    assert m.private_key is not None and m.cert_chain is not None
    return grpc.ssl_server_credentials(
        [(m.private_key, m.cert_chain)],
        root_certificates=m.ca if cfg.require_client_cert else None,
        require_client_auth=cfg.require_client_cert,
    )


def channel_credentials(cfg: TlsConfig) -> grpc.ChannelCredentials:
    """Credentials for a channel a service opens to another: trusts ``ca_file`` (or the
    system's roots) and presents the service's own certificate when it has one (mTLS)."""
    m = load_material(cfg)
    return grpc.ssl_channel_credentials(
        root_certificates=m.ca, private_key=m.private_key, certificate_chain=m.cert_chain
    )


def bind_server(server: grpc.aio.Server, addr: str, cfg: TlsConfig | None) -> int:
    """Bind ``addr`` with TLS when ``cfg`` enables it, plaintext otherwise; return the port."""
    if cfg is None or not cfg.enabled:
        return bind(server, addr)
    creds = server_credentials(cfg)
    try:
        port = server.add_secure_port(addr, creds)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {addr}: address in use or not available here") from exc
    if port == 0:
        raise OSError(f"cannot listen on {addr}: address in use or not available here")
    return port


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """The names in a verified client certificate."""

    common_name: str
    #: Subject alternative names (DNS names, URIs, IPs as text).
    sans: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name, the common name first."""
        return tuple(n for n in (self.common_name, *self.sans) if n)


def _texts(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values or ()]


def peer_identity(context: grpc.aio.ServicerContext) -> PeerIdentity | None:
    """The client certificate's identity on a TLS connection; None when the peer presented none
    (plaintext, or TLS without client certificates)."""
    try:
        auth = context.auth_context()
    except Exception:  # a context without transport security data
        return None
    if not auth:
        return None
    cns = _texts(auth.get("x509_common_name"))
    sans = _texts(auth.get("x509_subject_alternative_name"))
    if not cns and not sans:
        return None
    return PeerIdentity(cns[0] if cns else "", tuple(sans))


def certificate_identity(pem: bytes) -> PeerIdentity:
    """The identity of a PEM certificate (the same names :func:`peer_identity` reports)."""
    cert = x509.load_pem_x509_certificate(pem)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    sans: list[str] = []
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = [str(v) for v in ext.get_values_for_type(x509.DNSName)]
        sans += [str(v) for v in ext.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    cn = cns[0].value if cns else ""
    return PeerIdentity(cn if isinstance(cn, str) else cn.decode(), tuple(sans))
