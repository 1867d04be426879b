"""The fault soak: the fault scenarios in random order on one cluster, for as long as asked.

    python -m tests.fault.soak --minutes 30            # (or scripts/soak.sh --minutes 30)
    python -m tests.fault.soak --scenario pause_past_lease --runs 3
    python -m tests.fault.soak --list

Prints the checker's verdict after every run and a table at the end (runs, failures and the
longest pause in acknowledgements per scenario); exits 1 if any run found a violation. The
cluster's logs stay in ``--workdir`` (default: a new temporary directory, printed at start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tests.fault.cluster import FaultCluster
from tests.fault.scenarios import SCENARIOS, Outcome, run_scenario


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.fault.soak",
        description="Run the fault scenarios against a local cluster and check every history.",
    )
    p.add_argument("--minutes", type=float, default=0.0, help="run scenarios in random order for this long")
    p.add_argument("--runs", type=int, default=0, help="or: this many runs (default: each scenario once)")
    p.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="only these scenarios (repeatable)"
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    p.add_argument("--workdir", type=Path, default=None, help="where the cluster keeps data and logs")
    p.add_argument("--report", type=Path, default=None, help="write every run's outcome here as JSON lines")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return p


def _record(o: Outcome) -> dict[str, object]:
    return {
        "scenario": o.scenario,
        "ok": o.ok,
        "took_s": round(o.took_s, 1),
        "longest_ack_gap_s": {t: round(s, 3) for t, s in o.longest_ack_gap_s.items()},
        "sends_ok": o.verdict.counts.sends_ok,
        "violations": {k: len(v) for k, v in o.verdict.by_kind.items() if v},
        "chain_violations": len(o.chain_violations),
        "lost_in_accepted_gaps": o.lost_in_accepted_gaps,
        "notes": o.notes,
    }


async def _soak(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    names = args.scenario or sorted(SCENARIOS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="danube-soak-"))
    print(f"soak: seed {seed}, scenarios {', '.join(names)}; cluster in {workdir}", flush=True)
    fc = await asyncio.to_thread(FaultCluster(workdir).start)
    outcomes: list[Outcome] = []
    failures = 0
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else None
    planned = args.runs or (0 if deadline else len(names))
    order = list(names)
    rng.shuffle(order)
    report = args.report.open("a") if args.report else None
    try:
        run = 0
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if deadline is None and run >= planned:
                break
            name = order[run % len(order)] if deadline is None else rng.choice(names)
            run += 1
            print(f"\n-- run {run}: {name}", flush=True)
            try:
                outcome = await run_scenario(fc, name, seed=rng.randrange(1 << 30))
            except Exception:  # a scenario that cannot finish is a failure too
                failures += 1
                print(f"== {name}: ERROR\n{traceback.format_exc()}", flush=True)
                await fc.ensure_running()
                continue
            outcomes.append(outcome)
            failures += 0 if outcome.ok else 1
            print(outcome.summary(), flush=True)
            if report is not None:
                report.write(json.dumps(_record(outcome)) + "\n")
                report.flush()
    finally:
        if report is not None:
            report.close()
        await asyncio.to_thread(fc.stop)
    print("\nscenario              runs  failed  longest ack pause")
    for name in sorted({o.scenario for o in outcomes}):
        mine = [o for o in outcomes if o.scenario == name]
        worst = max(max(o.longest_ack_gap_s.values(), default=0.0) for o in mine)
        print(f"{name:<20} {len(mine):>5} {sum(not o.ok for o in mine):>7}  {worst:.2f}s")
    print(f"\nsoak: {len(outcomes)} run(s), {failures} failed (seed {seed})")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for noisy in ("danube_sdk", "danube_local"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if args.list:
        for name, fn in sorted(SCENARIOS.items()):
            doc = (fn.__doc__ or "").strip().splitlines()
            print(f"{name:<20} {doc[0] if doc else ''}")
        return 0
    return asyncio.run(_soak(args))


if __name__ == "__main__":
    sys.exit(main())
