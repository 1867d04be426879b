"""CPU seconds (user + system) and resident memory of processes, read with psutil; a process that
ended counts as 0."""

from __future__ import annotations

import os


def cpu_seconds(pids: list[int]) -> float:
    try:
        import psutil
    except ImportError:  # the bench extra is not installed: report no CPU figure
        return float("nan")
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def own_cpu_seconds() -> float:
    """This process's CPU seconds plus those of its children already reaped (helper clients that ran
    and exited during a window; long-lived servers are read through their pids instead)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def rss_bytes(pids: list[int]) -> int | None:
    """Resident set size of ``pids`` summed (bytes); None without psutil or pids."""
    try:
        import psutil
    except ImportError:
        return None
    total, seen = 0, False
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
            seen = True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total if seen else None


def all_alive(pids: list[int]) -> bool:
    """Every pid is a running process (not gone, not a zombie). Without psutil: assumed so."""
    try:
        import psutil
    except ImportError:
        return True
    for pid in pids:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
    return True
