"""Output shared by the CLIs: a list of dicts as an aligned text table, or as JSON.

Tables are for people (headers in capitals, empty cells as ``-``); JSON is for scripts
(the values unchanged, one document per command).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

FORMATS = ("table", "json")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) if value else "-"
    return str(value)


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as aligned columns (default columns: the keys of the first row, in order)."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if not rows:
        return "(none)"
    header = [c.upper() for c in cols]
    body = [[_cell(row.get(c)) for c in cols] for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(cols))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    ]
    return "\n".join(lines)


def render_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def emit(
    rows: Sequence[Mapping[str, Any]],
    *,
    fmt: str = "table",
    columns: Sequence[str] | None = None,
    json_data: Any = None,
    out: TextIO | None = None,
) -> None:
    """Print ``rows`` as a table, or ``json_data`` (default: ``rows``) as JSON."""
    stream = out or sys.stdout
    if fmt == "json":
        print(render_json(rows if json_data is None else json_data), file=stream)
    else:
        print(render_table(rows, columns), file=stream)
