"""``danube-leader``: parse flags, load the config, run the service until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_common.config import load_config
from danube_common.service import add_common_flags, common_flags, service_main
from danube_leader.app import run
from danube_leader.config import LeaderConfig

ENV_PREFIX = "DANUBE_LEADER"

EPILOG = """\
configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_LEADER_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_LEADER_LISTEN_ADDR=0.0.0.0:6680
    DANUBE_LEADER_ETCD__ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379
    DANUBE_LEADER_HEARTBEAT_INTERVAL_S=0.5

run two or more replicas against the same etcd and cluster; candidates fail over between
them (danube_common.leadership.Elector takes the list of their addresses).

examples:
  danube-leader
  danube-leader --etcd-endpoints 127.0.0.1:2379 --cluster danube
  danube-leader --listen 127.0.0.1:0 --ready-file /tmp/leader.json
  danube-leader --config deploy/config/leader.yaml --log-level DEBUG
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-leader",
        description="Danube leader election service: candidates campaign for named roles "
        "(load-manager, spark-planner, ...) over a gRPC stream; the winner gets a term (fencing "
        "token); anyone can ask or watch who leads. State lives in etcd; replicas are interchangeable.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="gRPC address; default 0.0.0.0:6680; port 0 = free port"
    )
    p.add_argument(
        "--advertised-host", metavar="HOST", help="host written to the ready file; default 127.0.0.1"
    )
    add_common_flags(p, ready_fields="service, addr, url, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {**common_flags(args), "listen_addr": args.listen, "advertised_host": args.advertised_host}


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> LeaderConfig:
    """Parse ``argv`` and merge every configuration layer (raises ConfigError)."""
    args = build_parser().parse_args(argv)
    return load_config(
        LeaderConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(lambda: load(argv), run, name=lambda c: "leader", service="danube-leader")


if __name__ == "__main__":
    sys.exit(main())
