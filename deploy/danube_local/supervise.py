"""Restarting the services of a local cluster that exit on their own.

A broker stops itself when it can no longer be sure of its registration lease (etcd unreachable
for a whole TTL, or the lease expired: docs/ownership.md), because it may then no longer claim
its topics; an etcd frozen or cut off past the TTL stops *every* broker. Something must start
them again, as compose's ``restart: unless-stopped`` or a systemd unit's ``Restart=on-failure``
does: :class:`Supervisor` is that for :class:`~danube_local.cluster.LocalCluster`
(``danube-local up`` checks every second; the fault tests use it after an etcd pause).

A service that exited is started again as it was first started, on the ports it had (the rest
of the cluster was given its addresses; a broker with its id and WAL directory, so it recovers
its log). The cluster's own etcd (when it started one) comes back first, on its port and data
directory. A restart that fails (the service exits again, or is not ready in time, e.g. while
etcd is still unreachable) is retried after a back-off that doubles
from ``min_backoff_s`` to ``max_backoff_s``; a service that stayed up ``healthy_after_s`` starts
again from the shortest back-off. Services stopped through the cluster on purpose are never
restarted: only processes that were started and ended without being asked to.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from danube_local.cluster import LocalCluster, ServiceProcess


@dataclass
class _State:
    #: Restarts that failed in a row (the back-off's exponent).
    failures: int = 0
    #: When the next restart may be tried (monotonic seconds).
    next_try: float = 0.0
    #: When the last successful restart finished (monotonic seconds), None before any.
    up_since: float | None = None


class Supervisor:
    """Restarts what exited of one :class:`LocalCluster` (see the module's docstring); call
    :meth:`check` periodically, from one thread."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        say: Callable[[str], None],
        min_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        healthy_after_s: float = 60.0,
        restart_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self._say = say
        self._min_backoff_s = min_backoff_s
        self._max_backoff_s = max_backoff_s
        self._healthy_after_s = healthy_after_s
        self._restart_timeout_s = restart_timeout_s
        self._clock = clock
        self._state: dict[str, _State] = {}
        #: Every restart that succeeded, by service name (for the caller's report).
        self.restarts: dict[str, int] = {}

    def exited(self) -> list[ServiceProcess]:
        """Services that were started, ended without being stopped through the cluster, and are
        not running now (the cluster's order, uploaders first: a broker asks its uploader at start)."""
        out = [
            s
            for s in self._cluster.services()
            if s.proc is not None and not s.stopped and s.proc.poll() is not None
        ]
        return sorted(out, key=lambda s: s.kind != "wal_uploader")

    def check(self) -> list[str]:
        """One pass (none once the cluster is stopping): restart our own etcd if it exited, then
        every exited service, each once its back-off has passed. Blocking: each restart waits
        until it is ready, up to ``restart_timeout_s``. Returns the names restarted now."""
        if self._cluster.stopping:
            return []
        now = self._clock()
        etcd = self._cluster.etcd
        running = {s.name for s in self._cluster.services() if s.running}
        if etcd is not None and etcd.proc is not None and etcd.proc.poll() is None:
            running.add("etcd")
        for name, st in self._state.items():
            if name in running and st.up_since is not None and now - st.up_since >= self._healthy_after_s:
                st.failures = 0  # stayed up: a later exit starts from the shortest back-off
        done: list[str] = []
        if etcd is not None and etcd.proc is not None and etcd.proc.poll() is not None:
            code = etcd.proc.returncode
            timeout_s = self._restart_timeout_s
            if self._restart(
                now, "etcd", "etcd", code, etcd.log_path, lambda: etcd.start(timeout_s=timeout_s)
            ):
                done.append("etcd")
        for svc in self.exited():
            assert svc.proc is not None
            name = svc.name
            if self._restart(
                now,
                name,
                svc.label,
                svc.proc.returncode,
                svc.log_path,
                functools.partial(self._cluster.restart, name, timeout_s=self._restart_timeout_s),
            ):
                done.append(name)
        return done

    def _restart(
        self, now: float, name: str, label: str, code: int | None, log_path: Path, start: Callable[[], object]
    ) -> bool:
        """Start ``name`` again unless its back-off has not passed; say how it went."""
        st = self._state.setdefault(name, _State())
        if now < st.next_try:
            return False
        try:
            start()
        except RuntimeError as exc:  # ClusterError (a service) or EtcdProcess's (etcd)
            st.failures += 1
            wait = min(self._max_backoff_s, self._min_backoff_s * 2 ** (st.failures - 1))
            st.next_try = self._clock() + wait
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._say(f"warning: {label} did not come back ({first_line}); trying again in {wait:g}s")
            return False
        st.up_since = self._clock()
        st.next_try = 0.0
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._say(f"{label} exited with code {code}: restarted (see {log_path})")
        return True
