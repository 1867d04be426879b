"""``danube-planner``: parse flags, load the config, check Spark can run, then plan."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from danube_common.config import load_config, split_list
from danube_common.errors import ConfigError
from danube_common.logs import setup_logging
from danube_common.observability.tracing import process_tracing
from danube_common.service import (
    add_common_flags,
    check_security_files,
    common_flags,
    run_main,
    tune_process,
)
from danube_planner.app import run
from danube_planner.config import PlannerConfig
from danube_planner.sparkenv import SparkUnavailable, preflight

ENV_PREFIX = "DANUBE_PLANNER"

EPILOG = """\
Each cycle reads the brokers' load reports (etcd) and the load history window (object store),
writes the cluster load report to /{cluster}/load_report and, when moves would lower the
imbalance, a rebalancing plan to /{cluster}/rebalance/plans/{id} for the load manager to carry
out. One planner leads (role spark-planner, through the leader service); every write is fenced
by its term. See spark/README.md.

configuration layers: defaults < --config YAML < environment < flags.
  environment: DANUBE_PLANNER_<FIELD>, nested with '__', lists with commas, e.g.
    DANUBE_PLANNER_LEADER_ENDPOINTS=10.0.0.5:6680,10.0.0.6:6680
    DANUBE_PLANNER_SPARK__MASTER=spark://10.0.0.9:7077

examples:
  danube-planner --leader-endpoints 127.0.0.1:6680 --candidate-id planner-1
  danube-planner --once --leader-endpoints '' --etcd-endpoints 127.0.0.1:2379   # one unfenced cycle
  danube-planner --master spark://10.0.0.9:7077 --config deploy/config/planner.yaml
  danube-planner --once --engine python --leader-endpoints ''                   # no Java needed
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="danube-planner",
        description="Danube rebalancing planner (PySpark): cluster load report and topic-move plans, "
        "written to etcd for the load manager.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--once", action="store_true", help="run one cycle and exit")
    p.add_argument("--engine", choices=("spark", "python"), help="spark (default) or python (no Spark)")
    p.add_argument("--master", metavar="URL", help="Spark master: local[*] (default), spark://host:7077, ...")
    p.add_argument(
        "--candidate-id", metavar="ID", help="this planner's name in the election; random if unset"
    )
    p.add_argument(
        "--leader-endpoints",
        metavar="A,B",
        help="leader service addresses (host:port, comma-separated); '' = none (only with --once)",
    )
    p.add_argument("--interval", metavar="SECONDS", type=float, help="seconds between cycles; default 60")
    p.add_argument("--history-dir", metavar="DIR", help="load history directory (local object store)")
    p.add_argument("--max-moves", metavar="N", type=int, help="moves per plan; default 10")
    p.add_argument("--target-cv", metavar="X", type=float, help="imbalance (CV) to stop at; default 0.15")
    add_common_flags(p, ready_fields="service, candidate_id, engine, pid")
    return p


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **common_flags(args),
        "candidate_id": args.candidate_id,
        "leader_endpoints": split_list(args.leader_endpoints),
        "engine": args.engine,
        "spark.master": args.master,
        "interval_s": args.interval,
        "object_store.local_dir": args.history_dir,
        "max_moves_per_cycle": args.max_moves,
        "target_cv": args.target_cv,
    }


def load(
    argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[PlannerConfig, bool]:
    args = build_parser().parse_args(argv)
    cfg = load_config(
        PlannerConfig, yaml_path=args.config, env_prefix=ENV_PREFIX, flags=flags_from_args(args), env=env
    )
    if not args.once and not cfg.leader_endpoints:
        raise ConfigError(
            "no leader service configured (leader_endpoints is empty): pass --leader-endpoints HOST:PORT, "
            "or --once for a single unfenced cycle"
        )
    return cfg, args.once


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg, once = load(argv)
        check_security_files(cfg)  # TLS files (etcd, object store, tls): bad ones refuse to start
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    if cfg.engine == "spark":
        try:
            preflight()
        except SparkUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    setup_logging(cfg.log_level, service=cfg.candidate_id)
    tune_process(cfg)  # gc: no freeze (serving() is not called): a cycle's objects are short-lived
    with process_tracing(
        "danube-planner", instance_id=cfg.candidate_id, attributes={"service.namespace": cfg.etcd.cluster}
    ) as ok:
        if not ok:
            return 2
        return run_main(
            lambda: run(cfg, once=once),
            etcd_endpoints=cfg.etcd.endpoints,
            fatal=(SparkUnavailable,),
        )


if __name__ == "__main__":
    sys.exit(main())
