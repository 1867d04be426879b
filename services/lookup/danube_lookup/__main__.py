"""``danube-lookup``: parse flags, load the config, run the service until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from danube_common.config import load_config
from danube_common.errors import ConfigError, DanubeError, MetadataUnavailable, Timeout
from danube_common.logs import setup_logging
from danube_lookup.app import run
from danube_lookup.config import LookupConfig

log = logging.getLogger("danube_lookup")

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
    p.add_argument("--config", metavar="FILE", help="YAML config file")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="client (Discovery) address; default 0.0.0.0:6650; port 0 = free port",
    )
    p.add_argument("--admin-listen", metavar="HOST:PORT", help="admin API address; default 0.0.0.0:50051")
    p.add_argument(
        "--advertised-host", metavar="HOST", help="host written to the ready file; default 127.0.0.1"
    )
    p.add_argument(
        "--etcd-endpoints", metavar="A,B", help="comma-separated etcd host:port list; default 127.0.0.1:2379"
    )
    p.add_argument("--cluster", metavar="NAME", help="cluster name (root of every etcd key); default danube")
    p.add_argument(
        "--ready-file", metavar="PATH", help="once serving, write the bound addresses here as JSON"
    )
    p.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO (default), WARNING or ERROR")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    endpoints = None
    if args.etcd_endpoints is not None:
        endpoints = [e.strip() for e in args.etcd_endpoints.split(",") if e.strip()]
    return {
        "listen_addr": args.listen,
        "admin_listen_addr": args.admin_listen,
        "advertised_host": args.advertised_host,
        "etcd.endpoints": endpoints,
        "etcd.cluster": args.cluster,
        "ready_file": args.ready_file,
        "log_level": args.log_level,
    }


def load(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> LookupConfig:
    """Parse ``argv`` and merge every configuration layer (raises ConfigError)."""
    args = build_parser().parse_args(argv)
    return load_config(
        LookupConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = load(argv)
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level, service="lookup")
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(run(cfg))
    except KeyboardInterrupt:  # interrupted before the signal handlers were installed
        return 0
    except (MetadataUnavailable, Timeout) as exc:
        print(
            f"error: {exc.message}\nhint: is etcd running at {','.join(cfg.etcd.endpoints)}? "
            "pass --etcd-endpoints, or start a local cluster with `danube-local up`",
            file=sys.stderr,
        )
        return 1
    except DanubeError as exc:
        log.error("%s", exc.message)
        return 1
    except OSError as exc:  # e.g. a port already in use
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
