"""bench/run.py --rounds: every driver started once, each workload x rate run on every driver in
turn, the drivers' order rotating each round, every result tagged with its round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import run as bench_run
from bench.drivers.base import Driver
from bench.harness.runner import RunResult
from bench.harness.workload import parse_workload
from tests.unit.bench.test_harness import FakeDriver

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class _Named(FakeDriver):
    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__()
        self.name = name
        self._log = log

    async def start(self, workdir: Path) -> None:
        self._log.append(f"start {self.name}")

    async def stop(self) -> None:
        self._log.append(f"stop {self.name}")


async def test_rounds_interleave_and_rotate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log: list[str] = []

    async def fake_run(driver: Driver, wl: Any, rate: int, *, client_procs: int, **_: Any) -> RunResult:
        log.append(f"{driver.name} {wl.key}@{rate}")
        return RunResult(
            wl.key, driver.name, "-", False, rate, 8, 1.0, 1, 1, 0, 1.0, 1.0, 0.0, 0.0, None, None, 0.0
        )

    monkeypatch.setattr(bench_run, "make_driver", lambda name: _Named(name, log))
    monkeypatch.setattr(bench_run, "run_workload", fake_run)
    wls = [
        parse_workload({"name": "a", "producerRates": [0]}),
        parse_workload({"name": "b", "producerRates": [1, 2]}),
    ]
    results, skipped = await bench_run.run_rounds(["p", "q"], wls, tmp_path, rounds=2, client_procs=0)
    assert not skipped
    assert log == [
        "start p", "start q",
        "p a@0", "q a@0", "p b@1", "q b@1", "p b@2", "q b@2",  # round 1: p first
        "q a@0", "p a@0", "q b@1", "p b@1", "q b@2", "p b@2",  # round 2: q first
        "stop p", "stop q",
    ]  # fmt: skip
    assert [r.round for r in results] == [1] * 6 + [2] * 6
