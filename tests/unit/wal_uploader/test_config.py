"""The uploader's flags and configuration layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from danube_common.errors import ConfigError
from danube_wal_uploader.__main__ import build_parser, load, main

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_flags_win_over_environment_and_yaml(tmp_path: Path) -> None:
    yml = tmp_path / "u.yaml"
    yml.write_text(
        "broker_id: from-yaml\nscan_interval_s: 2.5\nobject_store: {backend: s3, s3: {bucket: ybucket}}\n"
    )
    env = {"DANUBE_WAL_UPLOADER_BROKER_ID": "from-env", "DANUBE_WAL_UPLOADER_MAX_CONCURRENT_UPLOADS": "3"}
    cfg = load(["--config", str(yml), "--broker-id", "7", "--listen", "127.0.0.1:0"], env=env)
    assert cfg.broker_id == "7" and cfg.listen_addr == "127.0.0.1:0"
    assert cfg.scan_interval_s == 2.5 and cfg.max_concurrent_uploads == 3
    assert cfg.object_store.backend == "s3" and cfg.object_store.s3.bucket == "ybucket"
    assert cfg.data_path == Path("data/broker-7")
    # --object-store-dir switches to the local backend.
    cfg = load(["--config", str(yml), "--object-store-dir", str(tmp_path / "o"), "--data-dir", "/d"], env={})
    assert cfg.object_store.backend == "local" and cfg.object_store.local_dir == str(tmp_path / "o")
    assert cfg.data_path == Path("/d") and cfg.broker_id == "from-yaml"


def test_s3_settings_through_the_environment() -> None:
    env = {
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__BACKEND": "s3",
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__ENDPOINT_URL": "http://minio:9000",
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__BUCKET": "danube",
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__PATH_STYLE": "true",
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__ACCESS_KEY_ID": "k",
        "DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__SECRET_ACCESS_KEY": "very-secret",
    }
    cfg = load(["--broker-id", "1"], env=env)
    s3 = cfg.object_store.s3
    assert (s3.endpoint_url, s3.bucket, s3.path_style) == ("http://minio:9000", "danube", True)
    assert "very-secret" not in repr(cfg)


def test_bad_settings_are_refused_with_the_field() -> None:
    with pytest.raises(ConfigError, match="broker_id is required"):
        load([], env={})
    with pytest.raises(ConfigError, match="broker id"):
        load(["--broker-id", "no spaces"], env={})
    with pytest.raises(ConfigError, match="retry_max_s"):
        load(["--broker-id", "1"], env={"DANUBE_WAL_UPLOADER_RETRY_MAX_S": "0.1"})
    with pytest.raises(ConfigError, match="listen_addr"):
        load(["--broker-id", "1", "--listen", "nowhere"], env={})
    assert main(["--listen", "127.0.0.1:0"]) == 2  # no broker id: exit 2, before touching etcd


def test_help_has_examples_for_each_backend() -> None:
    text = build_parser().format_help()
    for needle in ("--object-store-dir", "MinIO", "AWS", "--broker-id", "--data-dir", "OBJECT_STORE__S3__"):
        assert needle in text
