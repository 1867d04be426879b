"""``danube-lookup``: parse flags, load the config, run the service until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_common.config import load_config
from danube_common.service import add_common_flags, common_flags, service_main
from danube_lookup.app import run
from danube_lookup.config import LookupConfig

ENV_PREFIX = "DANUBE_LOOKUP"

EPILOG = """\
configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_LOOKUP_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_LOOKUP_LISTEN_ADDR=0.0.0.0:6650
    DANUBE_LOOKUP_ETCD__ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379
    DANUBE_LOOKUP_BOOTSTRAP_NAMESPACES=default,analytics

examples:
  danube-lookup
  danube-lookup --etcd-endpoints 127.0.0.1:2379 --cluster danube
  danube-lookup --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --ready-file /tmp/lookup.json
  danube-lookup --config deploy/config/lookup.yaml --log-level DEBUG
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-lookup",
        description="Danube lookup service: answers danube.Discovery (which broker owns a topic) on the "
        "client port and serves the admin API (brokers, namespaces, topics) on the admin port.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="client (Discovery) address; default 0.0.0.0:6650; port 0 = free port",
    )
    p.add_argument("--admin-listen", metavar="HOST:PORT", help="admin API address; default 0.0.0.0:50051")
    p.add_argument(
        "--advertised-host", metavar="HOST", help="host written to the ready file; default 127.0.0.1"
    )
    add_common_flags(p, ready_fields="service, addr, url, admin_addr, admin_url, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **common_flags(args),
        "listen_addr": args.listen,
        "admin_listen_addr": args.admin_listen,
        "advertised_host": args.advertised_host,
    }


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> LookupConfig:
    """Parse ``argv`` and merge every configuration layer (raises ConfigError)."""
    args = build_parser().parse_args(argv)
    return load_config(
        LookupConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(lambda: load(argv), run, name=lambda c: "lookup", service="danube-lookup")


if __name__ == "__main__":
    sys.exit(main())
