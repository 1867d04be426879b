"""docs/observability.md lists every metric as metric_names.py defines it (the tables are
rendered by scripts/gen_metrics_doc.py), and every metric is in exactly one of its sections."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from danube_common.observability import metric_names as mn

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_metrics_doc", ROOT / "scripts" / "gen_metrics_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_metrics_doc", module)
    spec.loader.exec_module(module)
    return module


def test_every_metric_is_in_exactly_one_section() -> None:
    listed = [d for _title, defs in mn.SECTIONS for d in defs]
    assert sorted(d.name for d in listed) == sorted(d.name for d in mn.ALL)


def test_the_doc_tables_are_current() -> None:
    g = gen()
    doc = (ROOT / "docs" / "observability.md").read_text()
    assert g.splice(doc, g.render()) == doc, (
        "docs/observability.md is stale: run python scripts/gen_metrics_doc.py"
    )
    # And each metric's row says its name, type and labels.
    for d in mn.ALL:
        labels = ", ".join(f"`{label}`" for label in d.labels) or "-"
        row = re.compile(rf"^\| `{re.escape(d.exposed)}`[^|]* \| {d.kind} \| {re.escape(labels)} \|", re.M)
        assert row.search(doc), d.name


def test_the_documented_default_bound_is_the_codes() -> None:
    from danube_common.observability.metrics import MetricsConfig

    doc = (ROOT / "docs" / "observability.md").read_text()
    assert f"(default **{MetricsConfig().max_topics}**" in doc
