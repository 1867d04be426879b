"""Latency samples and percentiles: raw samples as integer microseconds in an ``array('q')`` (8 bytes
each, no per-message objects); percentiles by nearest rank over the sorted samples (numpy if present)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

PERCENTILES = (50.0, 99.0, 99.9)


def new_samples() -> array[int]:
    return array("q")


def percentile_sorted(sorted_samples: Sequence[int], pct: float) -> int:
    """Nearest rank: the smallest sample with at least ``pct`` % of samples at or below it."""
    n = len(sorted_samples)
    if n == 0:
        raise ValueError("no samples")
    if not 0 < pct <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {pct}")
    rank = math.ceil(round(pct * n / 100, 9))  # round: 99.9 * 1000 / 100 is 999.0000000000001
    return sorted_samples[max(rank, 1) - 1]


def summarize_us(samples: array[int], pcts: Sequence[float] = PERCENTILES) -> dict[str, float] | None:
    """{"p50_ms": .., "p99_ms": .., "p99.9_ms": .., "max_ms": .., "count": n}; None if no samples."""
    if not samples:
        return None
    try:
        import numpy as np

        arr = np.sort(np.frombuffer(samples, dtype=np.int64))
        ranked: Sequence[int] = arr  # type: ignore[assignment]
    except ImportError:
        ranked = sorted(samples)
    out: dict[str, float] = {f"p{_fmt(p)}_ms": int(percentile_sorted(ranked, p)) / 1000 for p in pcts}
    out["max_ms"] = int(ranked[-1]) / 1000
    out["count"] = len(samples)
    return out


def _fmt(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)
