"""TLS configuration: a service asked for TLS refuses to start, saying which file and why."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError

from danube_common.errors import ConfigError
from danube_common.security.tls import (
    TlsConfig,
    certificate_identity,
    channel_credentials,
    load_material,
    server_credentials,
)
from tests.support.certs import issue, make_ca

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    (d / "ca.crt").write_bytes(ca.cert_pem)
    server_cert, server_key = issue(ca, "server", server=True).write(d, "server")
    other_cert, other_key = issue(ca, "other").write(d, "other")
    expired_cert, expired_key = issue(ca, "old", expired=True).write(d, "expired")
    (d / "garbage.pem").write_text("hello")
    (d / "empty.pem").write_text("")
    return {
        "ca": str(d / "ca.crt"),
        "cert": server_cert,
        "key": server_key,
        "other_key": other_key,
        "other_cert": other_cert,
        "expired_cert": expired_cert,
        "expired_key": expired_key,
        "garbage": str(d / "garbage.pem"),
        "empty": str(d / "empty.pem"),
        "dir": str(d),
    }


def test_plaintext_by_default() -> None:
    assert not TlsConfig().enabled


def test_structure_is_checked_by_the_model() -> None:
    with pytest.raises(ValidationError, match="go together"):
        TlsConfig(cert_file="a.pem")
    with pytest.raises(ValidationError, match="require_client_cert needs"):
        TlsConfig(cert_file="a", key_file="b", require_client_cert=True)


def test_good_material_builds_credentials(pki: dict[str, str]) -> None:
    cfg = TlsConfig(cert_file=pki["cert"], key_file=pki["key"], ca_file=pki["ca"], require_client_cert=True)
    assert cfg.enabled
    assert isinstance(server_credentials(cfg), grpc.ServerCredentials)
    assert isinstance(channel_credentials(cfg), grpc.ChannelCredentials)
    assert isinstance(channel_credentials(TlsConfig(ca_file=pki["ca"])), grpc.ChannelCredentials)
    ident = certificate_identity(Path(pki["cert"]).read_bytes())
    assert ident.common_name == "server" and "localhost" in ident.sans and "127.0.0.1" in ident.sans


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"cert_file": "{dir}/missing.crt", "key_file": "{key}"},
            "tls.cert_file '{dir}/missing.crt' does not exist",
        ),
        ({"cert_file": "{garbage}", "key_file": "{key}"}, "is not a PEM certificate"),
        ({"cert_file": "{empty}", "key_file": "{key}"}, "is empty"),
        (
            {"cert_file": "{cert}", "key_file": "{garbage}"},
            "tls.key_file '{garbage}' is not a PEM private key",
        ),
        ({"cert_file": "{cert}", "key_file": "{other_key}"}, "is not the key of tls.cert_file"),
        ({"cert_file": "{expired_cert}", "key_file": "{expired_key}"}, "expired on"),
        (
            {"cert_file": "{cert}", "key_file": "{key}", "ca_file": "{garbage}"},
            "tls.ca_file '{garbage}' is not a PEM",
        ),
        ({"cert_file": "{cert}", "key_file": "{dir}"}, "tls.key_file '{dir}' cannot be read"),
    ],
    ids=["missing", "not-pem-cert", "empty", "not-pem-key", "other-key", "expired", "bad-ca", "unreadable"],
)
def test_bad_material_says_which_file_and_why(
    pki: dict[str, str], fields: dict[str, str], message: str
) -> None:
    cfg = TlsConfig(**{k: v.format(**pki) for k, v in fields.items()})
    with pytest.raises(ConfigError) as info:
        server_credentials(cfg)
    assert message.format(**pki) in info.value.message


def test_expiry_is_judged_at_the_given_time(pki: dict[str, str]) -> None:
    cfg = TlsConfig(cert_file=pki["cert"], key_file=pki["key"])
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    with pytest.raises(ConfigError, match="renew"):
        load_material(cfg, now=later)
