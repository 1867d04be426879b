"""``danube-load-manager``: parse flags, load the config, run until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_common.config import load_config, split_list
from danube_common.service import add_common_flags, common_flags, service_main
from danube_load_manager.app import run
from danube_load_manager.config import LoadManagerConfig

ENV_PREFIX = "DANUBE_LOAD_MANAGER"

EPILOG = """\
Run two or more replicas: one leads (through the leader service) and acts, the others stand by
and take over within the leadership TTL if it dies. Every write is fenced by the leader's term.

configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_LOAD_MANAGER_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_LOAD_MANAGER_LEADER_ENDPOINTS=10.0.0.5:6680,10.0.0.6:6680
    DANUBE_LOAD_MANAGER_WEIGHTS__CPU=1.0

examples:
  danube-load-manager --leader-endpoints 127.0.0.1:6680 --candidate-id lm-1
  danube-load-manager --listen 127.0.0.1:0 --ready-file /tmp/lm.json --etcd-endpoints 127.0.0.1:2379
  danube-load-manager --config deploy/config/load_manager.yaml
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-load-manager",
        description="Danube load manager: places new topics on the least-loaded broker, re-places a dead "
        "broker's topics, drains brokers and moves topics. Active/standby through the leader service.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--candidate-id", metavar="ID", help="this replica's name in the election; random if unset"
    )
    p.add_argument(
        "--leader-endpoints", metavar="A,B", help="leader service addresses (host:port, comma-separated)"
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="status API address; default 0.0.0.0:6690")
    p.add_argument("--leadership-ttl", metavar="SECONDS", type=int, help="candidacy lease TTL; default 5")
    add_common_flags(p, ready_fields="service, candidate_id, addr, url, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **common_flags(args),
        "candidate_id": args.candidate_id,
        "leader_endpoints": split_list(args.leader_endpoints),
        "listen_addr": args.listen,
        "leadership_ttl_s": args.leadership_ttl,
    }


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> LoadManagerConfig:
    args = build_parser().parse_args(argv)
    return load_config(
        LoadManagerConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(lambda: load(argv), run, name=lambda c: c.candidate_id, service="danube-load-manager")


if __name__ == "__main__":
    sys.exit(main())
