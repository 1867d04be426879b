"""ObjectStoreConfig: defaults, validation messages, secrets kept out of logs, env layering."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from danube_common.config import Frozen, load_config
from danube_common.errors import ConfigError
from danube_common.objstore import ObjectStoreConfig, S3Config

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def test_defaults_are_the_local_backend() -> None:
    cfg = ObjectStoreConfig()
    assert cfg.backend == "local" and cfg.local_dir and cfg.prefix == ""
    assert cfg.s3.conditional_writes and not cfg.s3.path_style and not cfg.s3.create_bucket
    assert cfg.s3.multipart_part_size_bytes >= 5 * MIB


def test_config_is_frozen() -> None:
    cfg = ObjectStoreConfig()
    with pytest.raises(ValidationError):
        cfg.prefix = "x/"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"backend": "gcs"}, "'local' or 's3'"),
        ({"backend": "s3"}, "needs s3.bucket"),
        ({"prefix": "danube"}, "must be empty or end with '/'"),
        ({"prefix": "/danube/"}, "starts with '/'"),
        ({"prefix": "a//"}, "empty segment"),
        ({"s3": {"bucket": "Bad_Bucket"}}, "lowercase letters, digits"),
        ({"s3": {"bucket": "ab"}}, "3-63 characters"),
        ({"s3": {"region": "EU West"}}, "us-east-1"),
        ({"s3": {"endpoint_url": "minio:9000"}}, "http://host:port"),
        ({"s3": {"endpoint_url": "http://minio:9000/path"}}, "no path"),
        ({"s3": {"multipart_part_size_bytes": 1024}}, "between 5242880 (5 MiB)"),
        ({"s3": {"multipart_threshold_bytes": 6 * 1024**3}}, "at most"),
        ({"s3": {"list_page_size": 5000}}, "between 1 and 1000"),
        ({"s3": {"access_key_id": "AKIA"}}, "set both"),
        ({"s3": {"connect_timeout_s": 0}}, "greater than 0"),
        ({"s3": {"bucket": "b-1", "unknown_field": 1}}, "Extra inputs"),
    ],
)
def test_validation_errors_say_what_is_allowed(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        ObjectStoreConfig.model_validate(data)
    assert message in str(err.value)


def test_endpoint_trailing_slash_is_dropped() -> None:
    assert S3Config(endpoint_url="http://127.0.0.1:9000/").endpoint_url == "http://127.0.0.1:9000"


def test_secrets_never_show_in_repr_or_str() -> None:
    cfg = ObjectStoreConfig(
        backend="s3",
        s3=S3Config(
            bucket="danube",
            access_key_id="AKIAEXAMPLE",
            secret_access_key=SecretStr("sup3r-s3cret"),
            session_token=SecretStr("tok3n"),
        ),
    )
    for text in (repr(cfg), str(cfg), repr(cfg.s3), str(cfg.model_dump())):
        assert "sup3r-s3cret" not in text and "tok3n" not in text
    assert cfg.s3.secret_access_key is not None
    assert cfg.s3.secret_access_key.get_secret_value() == "sup3r-s3cret"


class _Service(Frozen):
    object_store: ObjectStoreConfig = ObjectStoreConfig()


def test_settings_and_secret_come_from_the_environment_through_the_config_layers() -> None:
    env = {
        "DANUBE_X_OBJECT_STORE__BACKEND": "s3",
        "DANUBE_X_OBJECT_STORE__PREFIX": "cluster-a/",
        "DANUBE_X_OBJECT_STORE__S3__BUCKET": "danube-history",
        "DANUBE_X_OBJECT_STORE__S3__ENDPOINT_URL": "http://127.0.0.1:9000",
        "DANUBE_X_OBJECT_STORE__S3__PATH_STYLE": "true",
        "DANUBE_X_OBJECT_STORE__S3__ACCESS_KEY_ID": "minio",
        "DANUBE_X_OBJECT_STORE__S3__SECRET_ACCESS_KEY": "minio-secret",
        "DANUBE_X_OBJECT_STORE__S3__READ_TIMEOUT_S": "12.5",
    }
    cfg = load_config(_Service, env_prefix="DANUBE_X", env=env).object_store
    assert (cfg.backend, cfg.prefix, cfg.s3.bucket, cfg.s3.path_style) == (
        "s3",
        "cluster-a/",
        "danube-history",
        True,
    )
    assert cfg.s3.read_timeout_s == 12.5
    assert (
        cfg.s3.secret_access_key is not None and cfg.s3.secret_access_key.get_secret_value() == "minio-secret"
    )


def test_a_bad_value_fails_at_start_up_with_its_path() -> None:
    env = {"DANUBE_X_OBJECT_STORE__S3__LIST_PAGE_SIZE": "0"}
    with pytest.raises(ConfigError, match=r"object_store\.s3\.list_page_size"):
        load_config(_Service, env_prefix="DANUBE_X", env=env)
