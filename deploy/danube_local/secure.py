"""Certificates and the token secret of a secured local cluster.

This module only makes files; ``danube-local up --secure`` (:mod:`danube_local.secure_mode`)
uses them, keeping what is still usable across restarts (:func:`ensure_certificate`). It makes:

- a CA (``ca.pem``, ``ca.key``), reused when the directory already has one, so certificates
  and tokens handed out earlier stay valid across restarts;
- one certificate per identity (``{identity}.pem``, ``{identity}.key``), signed by the CA, with
  the identity as its common name (``broker-1``, ``lookup``, ``leader-0``, ``load-manager-0``,
  ``wal-uploader-1``, ``planner``, and the ``admin`` client), and ``localhost`` and
  ``127.0.0.1`` as subject alternative names. Service certificates serve both ends of mTLS
  (server and client auth); the admin certificate is client-only;
- an HS256 secret (``jwt-secret``): 64 hex characters on one line, no newline; the file's
  text is the HMAC key. An existing secret is kept.

Keys are ECDSA P-256 (fast to make, accepted by gRPC), unencrypted PKCS#8 PEM, mode 0600;
certificates are mode 0644; the directory is created with mode 0700.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "ADMIN_IDENTITY",
    "DEFAULT_HOSTS",
    "CertifiedKey",
    "SecureFiles",
    "create_ca",
    "ensure_ca",
    "ensure_certificate",
    "ensure_jwt_secret",
    "issue_certificate",
    "local_identities",
    "write_secure_files",
]

ADMIN_IDENTITY = "admin"
DEFAULT_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1")
CA_VALID_DAYS = 3650
CERT_VALID_DAYS = 365
#: Certificates start this long before now, so a peer whose clock is a little behind accepts them.
CLOCK_SKEW = dt.timedelta(minutes=5)
CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
JWT_SECRET_FILE = "jwt-secret"
JWT_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class CertifiedKey:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """Where :func:`write_secure_files` put everything."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    #: identity -> (certificate file, key file)
    certs: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    jwt_secret: Path | None = None


def local_identities(
    broker_ids: Iterable[str] = ("1",),
    *,
    leaders: int = 1,
    load_managers: int = 1,
    wal_uploaders: bool = True,
    planner: bool = False,
) -> list[str]:
    """The identities of the launcher's processes, named as it names them (and ``admin``)."""
    ids = list(broker_ids)
    names = ["lookup", *(f"broker-{b}" for b in ids)]
    names += [f"leader-{i}" for i in range(leaders)]
    names += [f"load-manager-{i}" for i in range(load_managers)]
    if wal_uploaders:
        names += [f"wal-uploader-{b}" for b in ids]
    if planner:
        names.append("planner")
    names.append(ADMIN_IDENTITY)
    return names


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "danube-local"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def create_ca(*, common_name: str = "danube-local CA", valid_days: int = CA_VALID_DAYS) -> CertifiedKey:
    """A new self-signed CA that may sign leaf certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertifiedKey(cert, key)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_certificate(
    ca: CertifiedKey,
    identity: str,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    server: bool = True,
    valid_days: int = CERT_VALID_DAYS,
) -> CertifiedKey:
    """A certificate for ``identity`` (its common name) signed by ``ca``.

    ``server``: usable by a server and as a client (mTLS between services); otherwise a
    client certificate only (the admin's).
    """
    if not identity:
        raise ValueError("identity is required, e.g. broker-1")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(identity))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + dt.timedelta(days=valid_days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return CertifiedKey(builder.sign(ca.key, hashes.SHA256()), key)


# ---------------------------------------------------------------------------- files


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode``, even if the file existed with a looser one
    (the file never holds the data with other permissions)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def _write_pair(directory: Path, stem: str, pair: CertifiedKey) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    _write(key_path, pair.key_pem(), 0o600)
    _write(cert_path, pair.cert_pem(), 0o644)
    return cert_path, key_path


def _make_dir(directory: Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory


def ensure_ca(directory: Path, *, valid_days: int = CA_VALID_DAYS) -> CertifiedKey:
    """The CA of ``directory`` (``ca.pem``/``ca.key``): loaded if both exist, else made and written."""
    directory = _make_dir(directory)
    cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an EC private key (it was not made by danube-local)")
        return CertifiedKey(cert, key)
    ca = create_ca(valid_days=valid_days)
    _write_pair(directory, "ca", ca)
    return ca


def ensure_jwt_secret(path: Path) -> Path:
    """An HS256 secret at ``path`` (mode 0600): kept if the file exists, else made."""
    path = Path(path)
    if not path.exists():
        _make_dir(path.parent)
        _write(path, secrets.token_hex(JWT_SECRET_BYTES).encode(), 0o600)
    return path


def write_secure_files(
    directory: Path,
    identities: Iterable[str],
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    client_only: Iterable[str] = (ADMIN_IDENTITY,),
    valid_days: int = CERT_VALID_DAYS,
) -> SecureFiles:
    """The CA (reused if present), a fresh certificate for every identity, and the JWT secret
    (kept if present), all in ``directory``. ``client_only`` identities get client-auth
    certificates."""
    directory = _make_dir(directory)
    ca = ensure_ca(directory)
    clients = set(client_only)
    certs: dict[str, tuple[Path, Path]] = {}
    for identity in identities:
        if "/" in identity or identity in ("", ".", "..", "ca"):
            raise ValueError(f"identity {identity!r} cannot name a file: use e.g. broker-1")
        pair = issue_certificate(
            ca, identity, hosts=hosts, server=identity not in clients, valid_days=valid_days
        )
        certs[identity] = _write_pair(directory, identity, pair)
    return SecureFiles(
        directory=directory,
        ca_cert=directory / CA_CERT_FILE,
        ca_key=directory / CA_KEY_FILE,
        certs=certs,
        jwt_secret=ensure_jwt_secret(directory / JWT_SECRET_FILE),
    )


#: A certificate kept by :func:`ensure_certificate` must stay valid at least this much longer.
RENEW_BEFORE = dt.timedelta(days=30)


def _reusable(cert: x509.Certificate, ca: CertifiedKey, hosts: Sequence[str], server: bool) -> bool:
    """Whether an existing certificate can be kept: issued by ``ca``, valid for a while yet,
    naming every host and usable the same way (server and client, or client only)."""
    if cert.issuer != ca.cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    if cert.not_valid_after_utc - _now() < RENEW_BEFORE:
        return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    if not set(_san(hosts)) <= set(san):
        return False
    return (ExtendedKeyUsageOID.SERVER_AUTH in usages) == server


def _key_fits(key_path: Path, cert: x509.Certificate) -> bool:
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError):
        return False
    der = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*der) == cert.public_key().public_bytes(*der)


def ensure_certificate(
    directory: Path,
    ca: CertifiedKey,
    identity: str,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    server: bool = True,
    valid_days: int = CERT_VALID_DAYS,
) -> tuple[Path, Path]:
    """``{identity}.pem`` and ``.key`` in ``directory``: kept when they were issued by ``ca``
    for these hosts and stay valid for :data:`RENEW_BEFORE` or more, else issued anew (so a
    restarted cluster keeps the certificates its clients already hold)."""
    if "/" in identity or identity in ("", ".", "..", "ca"):
        raise ValueError(f"identity {identity!r} cannot name a file: use e.g. broker-1")
    directory = _make_dir(directory)
    cert_path, key_path = directory / f"{identity}.pem", directory / f"{identity}.key"
    if cert_path.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except ValueError:
            cert = None
        if cert is not None and _reusable(cert, ca, hosts, server) and _key_fits(key_path, cert):
            return cert_path, key_path
    pair = issue_certificate(ca, identity, hosts=hosts, server=server, valid_days=valid_days)
    return _write_pair(directory, identity, pair)
