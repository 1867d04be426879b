"""``danube-wal-uploader``: parse flags, load the config, run until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_common.config import load_config
from danube_common.errors import ConfigError
from danube_common.service import add_common_flags, common_flags, service_main
from danube_wal_uploader.app import run
from danube_wal_uploader.config import WalUploaderConfig

ENV_PREFIX = "DANUBE_WAL_UPLOADER"

EPILOG = """\
Run one next to each broker, on the same machine and data directory. It uploads every sealed
WAL segment to object storage, records a descriptor per object and the topic's upload
checkpoint in etcd (the broker deletes local segments only below it), serves Flush for the
broker (durability 'cloud', hand-overs, shutdown), and when the broker dies uploads the rest
of each log and records where it ends for the next owner.

configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_WAL_UPLOADER_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__SECRET_ACCESS_KEY=...
    DANUBE_WAL_UPLOADER_ETCD__ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379

examples:
  # a local directory as object store (danube-local, single machine)
  danube-wal-uploader --broker-id 1 --data-dir data/broker-1 --object-store-dir data/objects

  # MinIO (secret from the environment)
  DANUBE_WAL_UPLOADER_OBJECT_STORE__BACKEND=s3 \\
  DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__ENDPOINT_URL=http://minio:9000 \\
  DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__BUCKET=danube \\
  DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__PATH_STYLE=true \\
  DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__ACCESS_KEY_ID=danube \\
  DANUBE_WAL_UPLOADER_OBJECT_STORE__S3__SECRET_ACCESS_KEY=... \\
    danube-wal-uploader --broker-id 1 --data-dir /var/lib/danube/broker-1

  # AWS S3 (credentials from the instance/pod role or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)
  danube-wal-uploader --broker-id 1 --data-dir /var/lib/danube/broker-1 \\
    --config deploy/config/wal_uploader.yaml    # with object_store: {backend: s3, s3: {bucket: ..., region: ...}}

  danube-wal-uploader --broker-id 1 --listen 127.0.0.1:0 --ready-file /tmp/uploader-1.json
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-wal-uploader",
        description="Danube WAL uploader: ships one broker's write-ahead log segments to object storage "
        "(a local directory, MinIO or AWS S3) and describes them in etcd.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--broker-id", metavar="ID", help="the broker whose data directory is served (required)")
    p.add_argument(
        "--data-dir", metavar="DIR", help="the broker's data directory; default data/broker-<broker-id>"
    )
    p.add_argument(
        "--object-store-dir",
        metavar="DIR",
        help="use a local directory as the object store (backend local); S3 is set in the config or environment",
    )
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="API address; default 0.0.0.0:6700; port 0 = free port"
    )
    p.add_argument(
        "--advertised-host", metavar="HOST", help="host written to the ready file and etcd; default 127.0.0.1"
    )
    add_common_flags(p, ready_fields="service, broker_id, addr, url, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {
        **common_flags(args),
        "broker_id": args.broker_id,
        "data_dir": args.data_dir,
        "listen_addr": args.listen,
        "advertised_host": args.advertised_host,
    }
    if args.object_store_dir is not None:
        flags["object_store.backend"] = "local"
        flags["object_store.local_dir"] = args.object_store_dir
    return flags


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> WalUploaderConfig:
    """Parse ``argv`` and merge every configuration layer (raises ConfigError)."""
    args = build_parser().parse_args(argv)
    cfg = load_config(
        WalUploaderConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )
    if not cfg.broker_id:
        raise ConfigError(
            "broker_id is required: pass --broker-id (or broker_id in the config, DANUBE_WAL_UPLOADER_BROKER_ID) "
            "with the id of the broker whose data directory this uploader serves"
        )
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(
        lambda: load(argv), run, name=lambda c: f"wal-uploader-{c.broker_id}", service="danube-wal-uploader"
    )


if __name__ == "__main__":
    sys.exit(main())
