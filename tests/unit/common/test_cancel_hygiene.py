"""No code awaits inside ``suppress(CancelledError)``.

``task.cancel(); with suppress(CancelledError): await task`` also swallows a cancellation of the
*caller* that arrives while it waits, so a cancelled clean-up goes on running and whoever
cancelled it can wait forever. ``danube_common.aio.cancel_and_wait`` is the way to stop tasks
(tests/unit/common/test_aio.py shows the difference)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("libs", "services", "spark", "deploy")


def _suppresses_cancel(item: ast.withitem) -> bool:
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "suppress" and any("CancelledError" in ast.unparse(a) for a in call.args)


def _awaits(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Await) for stmt in body for n in ast.walk(stmt))


def offenders(root: Path) -> list[str]:
    found = []
    for top in SOURCES:
        for path in sorted((root / top).rglob("*.py")):
            if ".venv" in path.parts or "node_modules" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.With | ast.AsyncWith)
                    and any(map(_suppresses_cancel, node.items))
                    and _awaits(node.body)
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_await_inside_a_suppressed_cancellation() -> None:
    bad = offenders(ROOT)
    assert not bad, (
        "await inside suppress(CancelledError) (use danube_common.aio.cancel_and_wait): " + ", ".join(bad)
    )


def test_the_check_sees_the_pattern(tmp_path: Path) -> None:
    src = tmp_path / "libs" / "x.py"
    src.parent.mkdir()
    src.write_text(
        "import asyncio, contextlib\n"
        "async def stop(t):\n"
        "    t.cancel()\n"
        "    with contextlib.suppress(asyncio.CancelledError, Exception):\n"
        "        await t\n"
        "    with contextlib.suppress(KeyError):\n"
        "        await t\n"
    )
    assert offenders(tmp_path) == ["libs/x.py:4"]
