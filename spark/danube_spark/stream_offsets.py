"""Offsets of the streaming source (pure: no I/O, no Spark).

An offset of the source is a JSON object ``{partition topic: next offset to read}``: one entry
per topic partition (``/ns/t-part-0``), or per topic for a non-partitioned one (``/ns/t``).
A micro-batch reads ``[start[p], end[p])`` of each partition ``p``; Spark checkpoints both ends,
so a replayed batch reads exactly the same offsets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from danube_common.errors import ConfigError

Offsets = dict[str, int]
Start = Literal["earliest", "latest"]


@dataclass(frozen=True, slots=True)
class StartingOffsets:
    """``startingOffsets``: every partition at ``default``, except those named in ``given``
    (an offset, or ``earliest``/``latest``)."""

    default: Start = "latest"
    given: tuple[tuple[str, int | Start], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> StartingOffsets:
        """``earliest``, ``latest`` or JSON ``{"/ns/t-part-0": 42, "/ns/u": "earliest"}`` (partitions
        not named start at earliest: nothing published before the query is skipped by accident)."""
        if text is None or not text.strip():
            return cls()
        text = text.strip()
        if text.lower() in ("earliest", "latest"):
            return cls(text.lower())  # type: ignore[arg-type]
        hint = (
            "startingOffsets is earliest, latest, or a JSON object of partition topic -> offset "
            'or "earliest"/"latest", e.g. {"/default/orders-part-0": 42}'
        )
        try:
            raw = json.loads(text)
        except ValueError:
            raise ConfigError(f"bad startingOffsets {text!r}: {hint}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"bad startingOffsets {text!r}: {hint}")
        given: list[tuple[str, int | Start]] = []
        for topic, value in raw.items():
            if isinstance(value, str) and value.lower() in ("earliest", "latest"):
                given.append((topic, value.lower()))  # type: ignore[arg-type]
            elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                given.append((topic, value))
            else:
                raise ConfigError(f"bad startingOffsets entry {topic!r}: {value!r}: {hint}")
        return cls("earliest", tuple(sorted(given)))

    def for_partition(self, partition: str, partition_of: str = "") -> int | Start:
        """Where ``partition`` (of the topic ``partition_of``, if any) starts."""
        given = dict(self.given)
        if partition in given:
            return given[partition]
        if partition_of and partition_of in given:
            return given[partition_of]
        return self.default


def encode(offsets: Mapping[str, int]) -> dict[str, int]:
    """The JSON form Spark stores (keys sorted, plain ints)."""
    return {k: int(offsets[k]) for k in sorted(offsets)}


def decode(raw: Mapping[str, object]) -> Offsets:
    """An offset dict from Spark's checkpoint (checked)."""
    out: Offsets = {}
    for k, v in raw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"bad source offset {k!r}: {v!r} (expected an offset >= 0)")
        out[str(k)] = v
    return out


def limit_end(start: Mapping[str, int], latest: Mapping[str, int], max_messages: int | None) -> Offsets:
    """The end of the next micro-batch: ``latest``, or with ``max_messages`` at most that many
    offsets in total, shared fairly (water-filling: every partition with a backlog gets an equal
    share, a partition needing less leaves the rest to the others; the remainder goes to the
    partitions in name order). Partitions only in ``latest`` (new ones) are taken as they are
    (their start is their end: they are read from the next batch on). Never below ``start``."""
    end: Offsets = {p: max(latest.get(p, s), s) for p, s in start.items()}
    for p, o in latest.items():
        if p not in start:
            end[p] = o
    if max_messages is None:
        return end
    backlog = {p: end[p] - start[p] for p in start if end[p] > start[p]}
    budget = max(0, max_messages)
    grant = {p: 0 for p in backlog}
    open_ = sorted(backlog)
    while budget > 0 and open_:
        share = budget // len(open_)
        if share == 0:
            for p in open_[:budget]:
                grant[p] += 1
            budget = 0
            break
        still = []
        for p in open_:
            take = min(share, backlog[p] - grant[p])
            grant[p] += take
            budget -= take
            if grant[p] < backlog[p]:
                still.append(p)
        open_ = still
    for p in backlog:
        end[p] = start[p] + grant[p]
    return end


@dataclass(frozen=True, slots=True)
class Range:
    """One partition's part of a micro-batch: offsets ``[start, end)``."""

    topic: str
    start: int
    end: int


def ranges(start: Mapping[str, int], end: Mapping[str, int]) -> list[Range]:
    """The non-empty ranges of a micro-batch, in partition name order. A partition in ``end``
    but not in ``start`` was new when the batch was planned: nothing of it is read."""
    out = []
    for p in sorted(end):
        s = start.get(p)
        if s is not None and end[p] > s:
            out.append(Range(p, s, end[p]))
    return out
