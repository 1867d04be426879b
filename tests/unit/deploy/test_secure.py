"""danube_local.secure: the CA, per-identity certificates and the JWT secret it writes."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from danube_local.secure import (
    ADMIN_IDENTITY,
    ensure_jwt_secret,
    local_identities,
    write_secure_files,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

IDENTITIES = ["broker-1", "lookup", "leader-0", "load-manager-0", "wal-uploader-1", "planner", "admin"]


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("secure") / "tls"
    write_secure_files(d, IDENTITIES)
    return d


def test_local_identities_follow_the_launchers_names() -> None:
    assert local_identities(["1", "2"], leaders=2, load_managers=1, planner=True) == [
        "lookup",
        "broker-1",
        "broker-2",
        "leader-0",
        "leader-1",
        "load-manager-0",
        "wal-uploader-1",
        "wal-uploader-2",
        "planner",
        ADMIN_IDENTITY,
    ]


def test_every_certificate_chains_to_the_ca(out: Path) -> None:
    ca = load(out / "ca.pem")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for identity in IDENTITIES:
        cert = load(out / f"{identity}.pem")
        cert.verify_directly_issued_by(ca)  # raises if the signature or issuer is wrong
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == identity
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_chain_verifies_as_a_tls_server(out: Path) -> None:
    store = Store([load(out / "ca.pem")])
    verifier = PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost"))
    chain = verifier.verify(load(out / "broker-1.pem"), [])
    assert chain[-1] == load(out / "ca.pem")


def test_subject_alternative_names(out: Path) -> None:
    for identity in IDENTITIES:
        san = (
            load(out / f"{identity}.pem")
            .extensions.get_extension_for_class(x509.SubjectAlternativeName)
            .value
        )
        assert san.get_values_for_type(x509.DNSName) == ["localhost"]
        assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_usages_services_both_ends_admin_client_only(out: Path) -> None:
    def usages(identity: str) -> set[x509.ObjectIdentifier]:
        return set(
            load(out / f"{identity}.pem").extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        )

    both = {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert all(usages(i) == both for i in IDENTITIES if i != ADMIN_IDENTITY)
    assert usages(ADMIN_IDENTITY) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_validity_is_current(out: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    for name in ["ca", *IDENTITIES]:
        cert = load(out / f"{name}.pem")
        assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
        assert cert.not_valid_after_utc > now + dt.timedelta(days=300)


def test_keys_are_private_and_match(out: Path) -> None:
    assert mode(out) == 0o700
    for name in ["ca", *IDENTITIES]:
        assert mode(out / f"{name}.key") == 0o600, name
        assert mode(out / f"{name}.pem") == 0o644, name
        key = serialization.load_pem_private_key((out / f"{name}.key").read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.public_key() == load(out / f"{name}.pem").public_key()


def test_jwt_secret_is_private_and_signs_hs256(out: Path) -> None:
    secret = out / "jwt-secret"
    assert mode(secret) == 0o600
    text = secret.read_text()
    assert len(text) == 64 and text == text.strip()
    token = jwt.encode({"sub": "admin"}, text, algorithm="HS256")
    assert jwt.decode(token, text, algorithms=["HS256"])["sub"] == "admin"


def test_rerun_keeps_the_ca_and_secret_and_renews_certificates(tmp_path: Path) -> None:
    first = write_secure_files(tmp_path, ["broker-1"])
    ca, secret = first.ca_cert.read_bytes(), (tmp_path / "jwt-secret").read_bytes()
    old_cert = first.certs["broker-1"][0].read_bytes()
    (tmp_path / "broker-1.key").chmod(0o644)  # loosened by someone: rewriting tightens it again
    second = write_secure_files(tmp_path, ["broker-1"])
    assert second.ca_cert.read_bytes() == ca and (tmp_path / "jwt-secret").read_bytes() == secret
    assert second.certs["broker-1"][0].read_bytes() != old_cert
    assert mode(tmp_path / "broker-1.key") == 0o600
    load(tmp_path / "broker-1.pem").verify_directly_issued_by(load(tmp_path / "ca.pem"))


def test_existing_secret_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "secret"
    ensure_jwt_secret(path)
    before = path.read_text()
    assert ensure_jwt_secret(path).read_text() == before


@pytest.mark.parametrize("bad", ["", "../x", "ca", "a/b"])
def test_identity_must_name_a_file(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="identity"):
        write_secure_files(tmp_path, [bad])
