"""Render the metric tables of docs/observability.md from danube_common's metric_names module.

    python scripts/gen_metrics_doc.py            # rewrite the tables in the doc
    python scripts/gen_metrics_doc.py --check    # exit 1 if the doc's tables are stale

The tables sit between ``<!-- metrics:begin -->`` and ``<!-- metrics:end -->``; the rest of the
doc is written by hand. tests/unit/common/test_metrics_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from danube_common.observability import metric_names
from danube_common.observability.metrics import MetricDef

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "observability.md"
BEGIN, END = "<!-- metrics:begin -->", "<!-- metrics:end -->"


def _row(d: MetricDef) -> str:
    name = f"`{d.exposed}`"
    if d.kind == "histogram":
        name += " (`_bucket`, `_sum`, `_count`)"
    labels = ", ".join(f"`{label}`" for label in d.labels) or "-"
    return f"| {name} | {d.kind} | {labels} | {d.help.replace('|', '/')} |"


def render() -> str:
    """The block between the markers (markers excluded)."""
    parts: list[str] = []
    for title, defs in metric_names.SECTIONS:
        parts += [
            f"#### {title}",
            "",
            "| metric | type | labels | meaning |",
            "|---|---|---|---|",
            *(_row(d) for d in defs),
            "",
        ]
    return "\n".join(parts)


def splice(doc: str, block: str) -> str:
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} has no {BEGIN} ... {END} block")
    return f"{doc[: start + len(BEGIN)]}\n{block}{doc[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the doc's tables are stale")
    args = parser.parse_args(argv)
    doc = DOC.read_text()
    new = splice(doc, render())
    if args.check:
        if new != doc:
            print(f"{DOC} is stale: run python scripts/gen_metrics_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
