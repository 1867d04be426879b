"""Client certificates a TLS server must refuse: one signed by a CA it does not trust, one
signed by its own CA but expired. ``danube_local.secure`` makes the good ones."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from danube_local.secure import CertifiedKey, create_ca, issue_certificate


def untrusted_certificate(identity: str) -> CertifiedKey:
    """A client certificate for ``identity`` from a fresh CA nobody trusts."""
    return issue_certificate(create_ca(common_name="untrusted CA"), identity, server=False)


def expired_certificate(ca: CertifiedKey, identity: str) -> CertifiedKey:
    """A client certificate for ``identity`` signed by ``ca`` that expired yesterday."""
    key = ec.generate_private_key(ec.SECP256R1())
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
