"""TLS settings of the etcd and S3 clients: the config rules, the environment forms, the start-up
file checks (a bad file refuses to start, naming it) and the hints on a failed connection.
The connections themselves: tests/integration/test_store_tls.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from danube_broker.config import BrokerConfig
from danube_common.config import EtcdConfig, load_config
from danube_common.errors import ConfigError
from danube_common.metadata.etcd import EtcdStore, etcd_tls_material, tls_hint
from danube_common.objstore import ObjectStoreConfig, S3Config
from danube_common.service import ServiceConfig, check_security_files
from danube_lookup.config import LookupConfig
from danube_planner.config import PlannerConfig
from danube_wal_uploader.config import WalUploaderConfig
from tests.support.certs import issue, make_ca

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    (d / "ca.crt").write_bytes(ca.cert_pem)
    cert, key = issue(ca, "broker-1").write(d, "client")
    _, other_key = issue(ca, "other").write(d, "other")
    (d / "garbage.pem").write_text("hello")
    return {
        "ca": str(d / "ca.crt"),
        "cert": cert,
        "key": key,
        "other_key": other_key,
        "garbage": str(d / "garbage.pem"),
        "dir": str(d),
    }


# ---- etcd: the config's rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "tls"),
    [
        ({}, False),
        ({"endpoints": ["http://10.0.0.1:2379"]}, False),
        ({"ca_file": "ca.pem"}, True),
        ({"cert_file": "c.pem", "key_file": "k.pem"}, True),
        ({"endpoints": ["https://etcd.internal:2379"]}, True),
        (
            {
                "endpoints": ["10.0.0.1:2379", "10.0.0.2:2379"],
                "ca_file": "ca.pem",
                "server_name": "etcd.internal",
            },
            True,
        ),
    ],
    ids=["default", "http", "ca", "client-cert", "https", "several-with-name"],
)
def test_when_etcd_tls_is_on(fields: dict[str, Any], tls: bool) -> None:
    assert EtcdConfig.model_validate(fields).tls_enabled is tls


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cert_file": "c.pem"}, "etcd.cert_file and etcd.key_file go together"),
        ({"key_file": "k.pem"}, "etcd.cert_file and etcd.key_file go together"),
        (
            {"endpoints": ["http://127.0.0.1:2379"], "ca_file": "ca.pem"},
            "is http:// but etcd TLS is configured",
        ),
        ({"endpoints": ["https://a:2379", "http://b:2379"]}, "'http://b:2379' is http://"),
        ({"endpoints": ["10.0.0.1:2379", "10.0.0.2:2379"], "ca_file": "ca.pem"}, "needs etcd.server_name"),
        ({"server_name": "etcd.internal"}, "etcd.server_name is a TLS setting"),
    ],
    ids=["cert-alone", "key-alone", "http-with-ca", "mixed-schemes", "several-no-name", "name-without-tls"],
)
def test_inconsistent_etcd_tls_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EtcdConfig.model_validate(fields)


# ---- the environment forms --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "prefix"),
    [
        (BrokerConfig, "DANUBE_BROKER"),
        (WalUploaderConfig, "DANUBE_WAL_UPLOADER"),
        (PlannerConfig, "DANUBE_PLANNER"),
    ],
)
def test_environment_sets_the_tls_fields(model: type[ServiceConfig], prefix: str) -> None:
    env = {
        f"{prefix}_ETCD__ENDPOINTS": "10.0.0.1:2379,10.0.0.2:2379",
        f"{prefix}_ETCD__CA_FILE": "/etc/danube/etcd/ca.pem",
        f"{prefix}_ETCD__CERT_FILE": "/etc/danube/etcd/client.pem",
        f"{prefix}_ETCD__KEY_FILE": "/etc/danube/etcd/client.key",
        f"{prefix}_ETCD__SERVER_NAME": "etcd.internal",
        f"{prefix}_OBJECT_STORE__BACKEND": "s3",
        f"{prefix}_OBJECT_STORE__S3__BUCKET": "danube",
        f"{prefix}_OBJECT_STORE__S3__ENDPOINT_URL": "https://minio.internal:9000",
        f"{prefix}_OBJECT_STORE__S3__CA_FILE": "/etc/danube/s3-ca.pem",
    }
    cfg: Any = load_config(model, env_prefix=prefix, env=env)
    assert cfg.etcd.endpoints == ["10.0.0.1:2379", "10.0.0.2:2379"]
    assert (cfg.etcd.ca_file, cfg.etcd.cert_file, cfg.etcd.key_file, cfg.etcd.server_name) == (
        "/etc/danube/etcd/ca.pem",
        "/etc/danube/etcd/client.pem",
        "/etc/danube/etcd/client.key",
        "etcd.internal",
    )
    assert cfg.object_store.s3.ca_file == "/etc/danube/s3-ca.pem"
    assert cfg.object_store.s3.endpoint_url == "https://minio.internal:9000"


def test_a_ca_for_a_plaintext_s3_endpoint_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"s3\.ca_file is set but s3\.endpoint_url 'http://minio:9000'"):
        S3Config(bucket="danube", endpoint_url="http://minio:9000", ca_file="ca.pem")
    S3Config(bucket="danube", ca_file="ca.pem")  # AWS: https
    S3Config(bucket="danube", endpoint_url="https://minio:9000", ca_file="ca.pem")


def test_verification_cannot_be_turned_off() -> None:
    for fields in ({"verify": False}, {"verify_tls": False}, {"insecure": True}):
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            S3Config.model_validate({"bucket": "danube", **fields})


# ---- the start-up file checks -----------------------------------------------------------------


def fill(fields: dict[str, Any], pki: dict[str, str]) -> dict[str, Any]:
    return {k: fill(v, pki) if isinstance(v, dict) else v.format(**pki) for k, v in fields.items()}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"etcd": {"ca_file": "{dir}/missing.pem"}}, "etcd.ca_file '{dir}/missing.pem' does not exist"),
        ({"etcd": {"ca_file": "{garbage}"}}, "etcd.ca_file '{garbage}' is not a PEM certificate"),
        (
            {"etcd": {"ca_file": "{ca}", "cert_file": "{cert}", "key_file": "{other_key}"}},
            "etcd.key_file '{other_key}' is not the key of etcd.cert_file '{cert}'",
        ),
        (
            {"etcd": {"ca_file": "{ca}", "cert_file": "{dir}", "key_file": "{key}"}},
            "etcd.cert_file '{dir}' cannot be read",
        ),
        (
            {
                "object_store": {
                    "backend": "s3",
                    "s3": {
                        "bucket": "danube",
                        "endpoint_url": "https://minio:9000",
                        "ca_file": "{dir}/no.pem",
                    },
                }
            },
            "object_store.s3.ca_file '{dir}/no.pem' does not exist",
        ),
    ],
    ids=["etcd-ca-missing", "etcd-ca-garbage", "etcd-key-mismatch", "etcd-cert-unreadable", "s3-ca-missing"],
)
def test_bad_files_refuse_to_start_naming_the_file(
    pki: dict[str, str], fields: dict[str, Any], message: str
) -> None:
    cfg = BrokerConfig.model_validate(fill(fields, pki))
    with pytest.raises(ConfigError) as err:
        check_security_files(cfg)
    assert message.format(**pki) in err.value.message


def test_good_files_pass_and_unused_settings_are_not_read(pki: dict[str, str]) -> None:
    etcd = EtcdConfig(ca_file=pki["ca"], cert_file=pki["cert"], key_file=pki["key"])
    material = etcd_tls_material(etcd)
    assert material is not None and material.ca and material.cert_chain and material.private_key
    assert etcd_tls_material(EtcdConfig()) is None
    check_security_files(LookupConfig(etcd=etcd))
    # An s3 section under the local backend is not used, so its CA is not read.
    unused = ObjectStoreConfig(
        backend="local", s3=S3Config(bucket="danube", endpoint_url="https://x:9000", ca_file="/nowhere.pem")
    )
    check_security_files(BrokerConfig(object_store=unused))


async def test_the_store_uses_tls_when_the_config_says_so(pki: dict[str, str]) -> None:
    # Opening a channel does not connect: no network here.
    for cfg, tls in (
        (EtcdConfig(), False),
        (EtcdConfig(ca_file=pki["ca"]), True),
        (EtcdConfig(endpoints=["https://127.0.0.1:2379"]), True),  # the system's roots
    ):
        store = EtcdStore.from_config(cfg)
        try:
            assert store.tls is tls
            assert store.target == "127.0.0.1:2379"
        finally:
            await store.aclose()
    with pytest.raises(ConfigError, match="does not exist"):
        EtcdStore.from_config(EtcdConfig(ca_file=str(Path(pki["dir"]) / "missing.pem")))


# ---- what a failed connection says ------------------------------------------------------------


@pytest.mark.parametrize(
    ("details", "tls", "hint"),
    [
        ("Tls handshake failed (TSI_PROTOCOL_FAILURE): ... CERTIFICATE_VERIFY_FAILED", True, "etcd.ca_file"),
        (
            "Custom verification check failed with error: Hostname Verification Check failed.",
            True,
            "server_name",
        ),
        ("Unwrap failed (TSI_DATA_CORRUPTED)", True, "etcd.cert_file and etcd.key_file"),
        ("SSLV3_ALERT_BAD_CERTIFICATE", True, "etcd.cert_file and etcd.key_file"),
        ("Ssl handshake failed: WRONG_VERSION_NUMBER", True, "does etcd serve TLS"),
        ("Socket closed", False, "set etcd.ca_file"),
        ("Connection refused", False, ""),
        ("Connection refused", True, ""),
    ],
    ids=[
        "untrusted",
        "name",
        "no-client-cert",
        "bad-client-cert",
        "not-tls",
        "plaintext-to-tls",
        "down",
        "down-tls",
    ],
)
def test_tls_hints(details: str, tls: bool, hint: str) -> None:
    got = tls_hint(details, tls=tls)
    assert (hint in got) if hint else got == ""
