"""Child-process plumbing for the launcher: process groups, graceful stop, ready files, log tails.

Every service runs in its own session (``start_new_session=True``), so its pid is also its
process-group id and one ``killpg`` reaches anything it started. Stopping is two-phase:
SIGTERM to every group at once, wait up to a grace period, then SIGKILL whatever is left.
These functions take plain values and small protocols so the unit tests drive them with
fake processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class ProcLike(Protocol):
    """The part of ``subprocess.Popen`` the stop logic uses."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def signal_group(proc: ProcLike, sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (no error if it is already gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@dataclass(frozen=True, slots=True)
class StopOutcome:
    pid: int
    #: "exited" (ended within the grace period), "killed" (needed SIGKILL) or "already-exited".
    how: str
    returncode: int | None


def stop_processes(
    procs: Sequence[ProcLike],
    *,
    grace_s: float,
    send: Callable[[ProcLike, int], None] = signal_group,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    poll_interval_s: float = 0.05,
) -> list[StopOutcome]:
    """SIGTERM every running process group, wait up to ``grace_s``, SIGKILL the rest.

    Returns one outcome per process, in the order given. Never raises for a process that
    is already gone; always reaps what it signals.
    """
    outcomes: dict[int, StopOutcome] = {}
    running: list[ProcLike] = []
    for p in procs:
        if p.poll() is not None:
            outcomes[id(p)] = StopOutcome(p.pid, "already-exited", p.returncode)
        else:
            running.append(p)
    for p in running:
        send(p, signal.SIGTERM)
    deadline = clock() + grace_s
    while running:
        still = [p for p in running if p.poll() is None]
        for p in running:
            if p not in still:
                outcomes[id(p)] = StopOutcome(p.pid, "exited", p.returncode)
        running = still
        if not running or clock() >= deadline:
            break
        pause(poll_interval_s)
    for p in running:
        send(p, signal.SIGKILL)
        with contextlib.suppress(Exception):
            p.wait(timeout=5)
        outcomes[id(p)] = StopOutcome(p.pid, "killed", p.returncode)
    # A service may have left children in its group after it exited itself: sweep them.
    for p in procs:
        if outcomes[id(p)].how != "already-exited":
            send(p, signal.SIGKILL)
    return [outcomes[id(p)] for p in procs]


def read_ready_file(path: Path) -> dict[str, Any] | None:
    """The JSON a service writes once it serves, or None if not (completely) there yet."""
    try:
        text = path.read_text()
    except (FileNotFoundError, IsADirectoryError):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None  # written non-atomically and caught half-way: read again on the next poll
    return data if isinstance(data, dict) else None


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (empty if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def port_in_use(host: str, port: int) -> bool:
    """True if something already listens on ``host:port`` (port 0 is never in use)."""
    if port == 0:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Same option gRPC uses, so a port in TIME_WAIT from a previous run counts as free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def loopback_no_proxy(env: dict[str, str], hosts: Sequence[str]) -> None:
    """Add ``hosts`` to no_proxy/NO_PROXY so gRPC never sends loopback traffic to a proxy."""
    for var in ("no_proxy", "NO_PROXY"):
        current = [h for h in env.get(var, "").split(",") if h]
        for h in hosts:
            if h not in current:
                current.append(h)
        env[var] = ",".join(current)
