"""Stop logic, ready files and log tails, driven with fake processes (no real signals sent)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from danube_local.procs import loopback_no_proxy, read_ready_file, stop_processes, tail

pytestmark = pytest.mark.unit


class FakeProc:
    """A process that exits on SIGTERM after ``term_polls`` polls, or only on SIGKILL if ``ignores_term``."""

    def __init__(
        self, pid: int, *, ignores_term: bool = False, term_polls: int = 0, exited: int | None = None
    ):
        self.pid = pid
        self.returncode: int | None = exited
        self.ignores_term = ignores_term
        self.term_polls = term_polls
        self.termed = False
        self.waited = False

    def poll(self) -> int | None:
        if self.returncode is None and self.termed and not self.ignores_term:
            if self.term_polls <= 0:
                self.returncode = 0
            self.term_polls -= 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.waited = True
        assert self.returncode is not None, "wait() on a process that cannot end would hang"
        return self.returncode


class Signals:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def __call__(self, proc: FakeProc, sig: int) -> None:  # type: ignore[override]
        self.sent.append((proc.pid, sig))
        if sig == signal.SIGTERM:
            proc.termed = True
        elif sig == signal.SIGKILL and proc.returncode is None:
            proc.returncode = -9


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def run_stop(procs: list[FakeProc], grace_s: float = 1.0) -> tuple[list[str], Signals]:
    sig, clock = Signals(), FakeClock()
    outcomes = stop_processes(procs, grace_s=grace_s, send=sig, clock=clock, pause=clock.pause)  # type: ignore[arg-type]
    return [o.how for o in outcomes], sig


def test_graceful_processes_get_sigterm_only() -> None:
    a, b = FakeProc(10), FakeProc(11, term_polls=3)
    how, sig = run_stop([a, b])
    assert how == ["exited", "exited"]
    assert sig.sent[:2] == [(10, signal.SIGTERM), (11, signal.SIGTERM)], "every group is asked at once"
    # After they exit, their groups are swept once with SIGKILL (children left behind).
    assert sig.sent[2:] == [(10, signal.SIGKILL), (11, signal.SIGKILL)]
    assert (a.returncode, b.returncode) == (0, 0)


def test_stubborn_process_is_killed_after_the_grace_period() -> None:
    good, stubborn = FakeProc(20), FakeProc(21, ignores_term=True)
    how, sig = run_stop([good, stubborn], grace_s=2.0)
    assert how == ["exited", "killed"]
    assert (21, signal.SIGKILL) in sig.sent
    assert stubborn.returncode == -9 and stubborn.waited, "a killed process is reaped"


def test_already_exited_processes_are_left_alone() -> None:
    gone = FakeProc(30, exited=3)
    how, sig = run_stop([gone])
    assert how == ["already-exited"]
    assert sig.sent == [], "no signal to a pid that may have been reused"


def test_nothing_to_stop() -> None:
    how, sig = run_stop([])
    assert how == [] and sig.sent == []


def test_read_ready_file(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    assert read_ready_file(p) is None
    p.write_text('{"service": "bro')
    assert read_ready_file(p) is None, "a half-written file reads as not ready"
    p.write_text("[1, 2]")
    assert read_ready_file(p) is None
    p.write_text(json.dumps({"service": "broker", "addr": "h:1"}))
    assert read_ready_file(p) == {"service": "broker", "addr": "h:1"}


def test_tail(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    assert tail(p) == ""
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(p, 3) == "line 97\nline 98\nline 99"
    p.write_bytes(b"ok\n\xff\xfe broken utf-8\n")
    assert "broken utf-8" in tail(p)


def test_loopback_no_proxy_keeps_existing_entries() -> None:
    env = {"no_proxy": "corp.example,127.0.0.1"}
    loopback_no_proxy(env, ["127.0.0.1", "localhost", "10.1.2.3"])
    assert env["no_proxy"] == "corp.example,127.0.0.1,localhost,10.1.2.3"
    assert env["NO_PROXY"] == "127.0.0.1,localhost,10.1.2.3"
