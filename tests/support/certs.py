"""Certificates and keys for the security tests, made with ``danube_local.secure`` (the same
code that makes a secured cluster's files), plus the ones a server must refuse: a client
certificate from a CA it does not trust, and one from its own CA that has expired."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from danube_local.secure import CertifiedKey, create_ca, issue_certificate

# ---------------------------------------------------------------- bare keys (JWT signing)


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem_public(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# ---------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM bytes or written to files."""

    pair: CertifiedKey

    @property
    def cert(self) -> x509.Certificate:
        return self.pair.cert

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert_pem()

    @property
    def key_pem(self) -> bytes:
        return self.pair.key_pem()

    def write(self, d: Path, name: str) -> tuple[str, str]:
        cert, key = d / f"{name}.crt", d / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        return str(cert), str(key)


def make_ca(cn: str = "test-ca") -> Issued:
    return Issued(create_ca(common_name=cn, valid_days=1))


def issue(ca: Issued, cn: str, *, server: bool = False, expired: bool = False) -> Issued:
    """A certificate for ``cn`` from ``ca``: a server's (names localhost and 127.0.0.1, usable
    as a client too) or a client's (names ``cn``); ``expired``: a client's that expired yesterday."""
    if expired:
        return Issued(expired_certificate(ca.pair, cn))
    hosts = ("localhost", "127.0.0.1") if server else (cn,)
    return Issued(issue_certificate(ca.pair, cn, hosts=hosts, server=True, valid_days=1))


def untrusted_certificate(identity: str) -> CertifiedKey:
    """A client certificate for ``identity`` from a fresh CA nobody trusts."""
    return issue_certificate(create_ca(common_name="untrusted CA"), identity, server=False)


def expired_certificate(ca: CertifiedKey, identity: str) -> CertifiedKey:
    """A client certificate for ``identity`` signed by ``ca`` that expired yesterday
    (``issue_certificate`` never makes one)."""
    key = ec_key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=2))
        .not_valid_after(now - dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return CertifiedKey(cert, key)
