"""``danube-broker``: parse flags, load the config, run the broker until SIGINT/SIGTERM.

Exit status: 0 after a requested stop, 1 when the broker failed (etcd unreachable at start,
registration lease lost, an internal loop crashed, port in use), 2 for a bad configuration.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_broker.app import run
from danube_broker.config import BrokerConfig
from danube_common.config import load_config
from danube_common.service import add_common_flags, common_flags, service_main

ENV_PREFIX = "DANUBE_BROKER"

EPILOG = """\
configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_BROKER_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_BROKER_MAX_MESSAGE_SIZE_BYTES=1048576
    DANUBE_BROKER_SLOW_CONSUMER_POLICY=block
    DANUBE_BROKER_ETCD__ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379
  every field, its unit and its default: services/broker/README.md

examples:
  danube-broker
  danube-broker --broker-id b1 --listen 0.0.0.0:6651 --advertised-host broker-1.internal
  danube-broker --listen 0.0.0.0:6651 --internal-listen 0.0.0.0:6661 --config secure-broker.yaml
  danube-broker --listen 127.0.0.1:0 --ready-file /tmp/broker.json --etcd-endpoints 127.0.0.1:2379
  danube-broker --data-dir /var/lib/danube/broker-1
  danube-broker --config deploy/config/broker.yaml --log-level DEBUG
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-broker",
        description="Danube broker: owns the topics etcd assigns to it and serves their producers and "
        "consumers (danube.ProducerService, ConsumerService, HealthCheck and Discovery on one port; "
        "with --internal-listen, also on a port for the cluster's own services, mTLS when TLS is on).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--broker-id", metavar="ID", help="unique broker id in the cluster; default: a random short id"
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to serve on; default 0.0.0.0:6651; port 0 = a free port",
    )
    p.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="host clients are sent to; default: the listen host, or 127.0.0.1 for 0.0.0.0/127.0.0.1",
    )
    p.add_argument(
        "--internal-listen",
        metavar="HOST:PORT",
        help="also serve the cluster's own services here (mTLS when TLS is on; they dial it instead "
        "of --listen); default: none; port 0 = a free port",
    )
    p.add_argument(
        "--internal-advertised-host",
        metavar="HOST",
        help="host the services are sent to for --internal-listen; default: as --advertised-host",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where reliable topics keep their write-ahead logs; default ./data/broker-<broker id>",
    )
    add_common_flags(p, ready_fields="service, broker_id, [internal_addr,] addr, url, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **common_flags(args),
        "broker_id": args.broker_id,
        "listen_addr": args.listen,
        "advertised_host": args.advertised_host,
        "internal_listen_addr": args.internal_listen,
        "internal_advertised_host": args.internal_advertised_host,
        "data_dir": args.data_dir,
    }


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> BrokerConfig:
    """Parse ``argv`` and merge every configuration layer (raises ConfigError)."""
    args = build_parser().parse_args(argv)
    return load_config(
        BrokerConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(
        lambda: load(argv), run, name=lambda c: f"broker[{c.broker_id}]", service="danube-broker"
    )


if __name__ == "__main__":
    sys.exit(main())
