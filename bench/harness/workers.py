"""Client worker processes: the producers and consumers of a run outside the harness process.

The harness keeps the driver (it starts and stops the servers and creates the topics) and runs a
``WorkerPool``: producer workers and consumer workers (``--client-procs N``: up to N of each, never
more than there are handles), each a ``python -m bench.harness.workers`` child on pipes.

Protocol (one request at a time per worker, each answered by one reply):

- harness -> worker: one JSON object per line on the worker's stdin, ``{"op": ..., ...}``:
  ``init`` (``sys_path``, ``driver`` as ``module:Class``, ``spec`` = ``driver.client_spec()``: the
  worker calls ``Class.attach(spec)``), ``attach`` (``consumers`` [[topic, subscription], ...],
  ``producers`` [topic, ...]: the reply comes once every handle is attached), ``start_consumers``,
  ``start_producers`` (``rate`` per producer, ``size``, ``max_outstanding``, ``limit``), ``record``
  (``on``: the measurement window opens or closes), ``stop_producers`` (stop sending, flush),
  ``producers_done`` (backlog: every producer sent its limit and is flushed), ``totals``,
  ``progress`` (from now on, send a progress event whenever ``received_total`` changes),
  ``report`` and ``close`` (cancel the loops, close the handles and the attached driver, exit).
- worker -> harness, on the worker's own copy of fd 1 (its fd 1 itself is pointed at stderr, so
  nothing a library prints can corrupt the stream): one JSON object per line, either a reply
  ``{"reply": op, ...}`` (``"error"`` and ``"traceback"`` if the op failed) or an event: ``{"event":
  "error", ...}`` the moment a producer or consumer loop fails, ``{"event": "progress",
  "received_total": n}``. A line with ``"blobs": {name: nbytes, ...}`` is followed by those raw bytes
  in that order (the ``report`` reply's latency samples: ``array('q')`` bytes).
- The worker's stderr is forwarded to the harness's, prefixed with its name; its last lines go into
  the error raised if it exits unexpectedly. Any failure (an error reply or event, an unexpected exit,
  a request unanswered in time) raises ``WorkerError`` in the harness, which fails the run.
- Workers ignore SIGINT (the harness stops them) and exit when their stdin closes (the harness is
  gone). ``close`` asks each worker to finish, then kills what is left and reaps every process.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import importlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import IO, Any, TypeVar

from bench.drivers.base import Driver
from bench.harness.clients import CLOSE_TIMEOUT_S, FLUSH_TIMEOUT_S, ClientSet, _Meter

ROOT = Path(__file__).resolve().parent.parent.parent
READ_LIMIT = 1 << 22  # longest JSON line (a reply with a traceback is a few KB)
INIT_TIMEOUT_S = 60.0  # interpreter start, imports, attach to the servers
REQUEST_TIMEOUT_S = 60.0
ATTACH_S_PER_HANDLE = 0.05
LONG_TIMEOUT_S = FLUSH_TIMEOUT_S + CLOSE_TIMEOUT_S * 6 + 30  # flushes (window, backlog) and reports
EXIT_TIMEOUT_S = 5.0
STDERR_TAIL_LINES = 40

T = TypeVar("T")

_LIVE: set[asyncio.subprocess.Process] = set()  # killed at exit if something skipped close()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


class WorkerError(RuntimeError):
    """A client worker failed: the message is the worker's (its exception and traceback, or how it
    exited and the end of its stderr)."""


async def _all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Await all, then raise the first failure (gather would leave the rest running unobserved)."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


def attach_timeout_s(handles: int) -> float:
    """How long a worker may take to attach ``handles``: the start-up allowance plus 50 ms a handle
    (10,000 topics: ~9 minutes at worst; a few ms a handle is normal)."""
    return INIT_TIMEOUT_S + ATTACH_S_PER_HANDLE * handles


def _split(items: list[T], n: int) -> list[list[T]]:
    """Round-robin over at most ``n`` non-empty groups."""
    k = min(n, len(items))
    return [items[i::k] for i in range(k)]


def _driver_ref(driver: Driver) -> str:
    cls = type(driver)
    if cls.__module__ == "__main__":
        raise WorkerError(f"{cls.__qualname__} is defined in __main__: a worker cannot import it")
    return f"{cls.__module__}:{cls.__qualname__}"


def _uses_uvloop() -> bool:
    return type(asyncio.get_running_loop()).__module__.startswith("uvloop")


# ---- harness side


class _Worker:
    def __init__(self, name: str, on_progress: asyncio.Event) -> None:
        self.name = name
        self.proc: asyncio.subprocess.Process | None = None
        self.pid = 0
        self.received_total = 0
        self._on_progress = on_progress
        self._replies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self.failed: asyncio.Future[None] = loop.create_future()  # an error event, or exited
        self.gone: asyncio.Future[None] = loop.create_future()  # exited (its stdout ended)
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._readers: list[asyncio.Task[None]] = []

    def __str__(self) -> str:
        return f"client worker {self.name} (pid {self.pid})"

    async def spawn(self, *, uvloop: bool) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        argv = [sys.executable, "-m", "bench.harness.workers", "--name", self.name]
        if uvloop:
            argv.append("--uvloop")
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=READ_LIMIT,
        )
        _LIVE.add(self.proc)
        self.pid = self.proc.pid
        self._readers = [
            asyncio.create_task(self._read_stderr()),
            asyncio.create_task(self._read_messages()),
        ]

    def _fail(self, exc: WorkerError) -> None:
        if not self.failed.done():
            self.failed.set_exception(exc)

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        pending = b""
        while True:
            chunk = await self.proc.stderr.read(1 << 16)  # chunks: no line is too long to forward
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop() if chunk else b""
            for line in filter(None, lines):
                text = line.decode(errors="replace")
                self._stderr_tail.append(text)
                print(f"  [{self.name}] {text}", file=sys.stderr, flush=True)
            if not chunk:
                return

    async def _read_messages(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        broken = ""
        try:
            while line := await out.readline():
                msg = json.loads(line)
                blobs = {name: await out.readexactly(n) for name, n in msg.pop("blobs", {}).items()}
                if msg.get("event") == "error":
                    self._fail(WorkerError(f"{self} failed: {msg['error']}\n{msg['traceback']}"))
                elif msg.get("event") == "progress":
                    self.received_total = max(self.received_total, int(msg["received_total"]))
                    self._on_progress.set()
                else:
                    msg["blobs"] = blobs
                    self._replies.put_nowait(msg)
        except (ValueError, asyncio.IncompleteReadError) as exc:  # includes a line over READ_LIMIT
            broken = f" (its message stream broke: {type(exc).__name__}: {exc})"
        # End of stream: the worker exited (after "close" that is expected; the failure is not read then).
        rc = await self.proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._readers[0]), 2.0)
        tail = "\n".join(self._stderr_tail) or "(nothing)"
        self._fail(WorkerError(f"{self} exited with code {rc}{broken}; the end of its stderr:\n{tail}"))
        self.gone.set_result(None)

    async def request(self, op: str, *, timeout_s: float = REQUEST_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """Send one op and wait for its reply; raise the worker's error if it failed meanwhile (for
        "close": only if it exits without replying; a worker whose loop failed still closes)."""
        assert self.proc is not None and self.proc.stdin is not None
        failed = self.gone if op == "close" else self.failed
        if failed.done():
            await self.failed  # raises the worker's error
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.failed), EXIT_TIMEOUT_S)
            raise WorkerError(f"{self} is gone (its stdin is closed)") from None
        get: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(self._replies.get())
        waits: set[asyncio.Future[Any]] = {get, failed}
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            reply = get.result()
        elif failed.done():
            await self.failed
            raise AssertionError("unreachable")
        else:
            raise WorkerError(f"{self}: no reply to {op!r} within {timeout_s:.0f} s")
        if "error" in reply:
            raise WorkerError(f"{self}: {op} failed: {reply['error']}\n{reply.get('traceback', '')}")
        return reply

    async def close(self) -> None:
        """Ask it to close its handles and exit; kill it if it does not; always reap it."""
        proc = self.proc
        if proc is None:
            return
        try:
            if not self.gone.done():
                with contextlib.suppress(Exception):
                    await self.request("close", timeout_s=CLOSE_TIMEOUT_S + EXIT_TIMEOUT_S)
            try:
                await asyncio.wait_for(proc.wait(), EXIT_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._readers, return_exceptions=True), EXIT_TIMEOUT_S)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            for task in self._readers:
                task.cancel()
            if self.failed.done():
                self.failed.exception()  # read: a failure after "close" is the expected exit
            _LIVE.discard(proc)


class WorkerPool:
    """A ClientGroup whose producers and consumers run in worker processes (see the module doc)."""

    def __init__(self, driver: Driver, procs: int) -> None:
        if procs < 1:
            raise ValueError("a WorkerPool needs at least 1 process per role")
        self.driver = driver
        self.procs = procs
        self._progress = asyncio.Event()
        self._consumers: list[_Worker] = []
        self._producers: list[_Worker] = []

    @property
    def _workers(self) -> list[_Worker]:
        return self._consumers + self._producers

    def pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid]

    def pid_names(self) -> dict[str, int]:
        return {w.name: w.pid for w in self._workers if w.pid}

    def _raise_failed(self) -> None:
        for w in self._workers:
            if w.failed.done():
                raise w.failed.exception()  # type: ignore[misc]

    async def attach(self, consumers: list[tuple[str, str]], producers: list[str]) -> None:
        spec = self.driver.client_spec()
        json.dumps(spec)  # fail here, not in a worker, if it is not JSON
        ref = _driver_ref(self.driver)
        cons, prods = _split(consumers, self.procs), _split(producers, self.procs)
        self._consumers = [_Worker(f"consumer-{i}", self._progress) for i in range(len(cons))]
        self._producers = [_Worker(f"producer-{i}", self._progress) for i in range(len(prods))]
        uvloop = _uses_uvloop()
        await _all(w.spawn(uvloop=uvloop) for w in self._workers)
        await _all(
            w.request("init", timeout_s=INIT_TIMEOUT_S, sys_path=sys.path, driver=ref, spec=spec)
            for w in self._workers
        )
        # Consumers are attached (ready) before any producer exists, as in the single-process mode.
        await _all(
            w.request("attach", timeout_s=attach_timeout_s(len(g)), consumers=g, producers=[])
            for w, g in zip(self._consumers, cons, strict=True)
        )
        await _all(
            w.request("attach", timeout_s=attach_timeout_s(len(g)), consumers=[], producers=g)
            for w, g in zip(self._producers, prods, strict=True)
        )

    async def start_consumers(self) -> None:
        await _all(w.request("start_consumers") for w in self._consumers)

    async def start_producers(
        self, *, rate: float, size: int, max_outstanding: int, limit: int | None
    ) -> None:
        await _all(
            w.request("start_producers", rate=rate, size=size, max_outstanding=max_outstanding, limit=limit)
            for w in self._producers
        )

    async def set_recording(self, on: bool) -> None:
        await _all(w.request("record", on=on) for w in self._workers)

    async def watch(self, seconds: float) -> None:
        failed = [w.failed for w in self._workers]
        if not failed:
            await asyncio.sleep(seconds)
            return
        await asyncio.wait(failed, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        self._raise_failed()

    async def stop_producers(self, notes: list[str]) -> None:
        replies = await _all(w.request("stop_producers", timeout_s=LONG_TIMEOUT_S) for w in self._producers)
        for w, r in zip(self._producers, replies, strict=True):
            notes.extend(f"{w.name}: {n}" if len(replies) > 1 else n for n in r["notes"])

    async def producers_done(self) -> None:
        await _all(w.request("producers_done", timeout_s=LONG_TIMEOUT_S) for w in self._producers)

    async def totals(self) -> dict[str, int]:
        replies = await _all(w.request("totals") for w in self._workers)
        return {k: sum(int(r["counts"][k]) for r in replies) for k in replies[0]["counts"]} if replies else {}

    async def wait_received(self, target: int, timeout_s: float) -> bool:
        """Consumer workers report ``received_total`` as it changes (events, no polling)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        replies = await _all(w.request("progress") for w in self._consumers)
        for w, r in zip(self._consumers, replies, strict=True):
            w.received_total = max(w.received_total, int(r["received_total"]))
        while sum(w.received_total for w in self._consumers) < target:
            self._progress.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            waiter: asyncio.Future[Any] = asyncio.ensure_future(self._progress.wait())
            waits: set[asyncio.Future[Any]] = {waiter, *(w.failed for w in self._workers)}
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            self._raise_failed()
        return True

    async def collect(self) -> _Meter:
        meter = _Meter()
        replies = await _all(w.request("report", timeout_s=LONG_TIMEOUT_S) for w in self._workers)
        for r in replies:
            meter.merge(r["counts"], r["blobs"]["pub_us"], r["blobs"]["e2e_us"])
        return meter

    async def close(self) -> None:
        await asyncio.gather(*(w.close() for w in self._workers), return_exceptions=True)


# ---- worker side


class _Session:
    """One worker's state: the attached driver, its ClientSet, the channel to the harness."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.driver: Driver | None = None
        self.clients: ClientSet | None = None
        self._reporter: asyncio.Task[None] | None = None

    def send(self, msg: dict[str, Any], blobs: dict[str, bytes] | None = None) -> None:
        if blobs:
            msg["blobs"] = {k: len(v) for k, v in blobs.items()}
        self.out.write(json.dumps(msg).encode() + b"\n")
        for v in (blobs or {}).values():
            self.out.write(v)
        self.out.flush()

    def _loop_failed(self, exc: BaseException) -> None:
        self.send(
            {
                "event": "error",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": "".join(traceback.format_exception(exc)),
            }
        )

    async def _report_progress(self, clients: ClientSet) -> None:
        meter, last = clients.meter, -1
        while True:
            meter.progressed.clear()
            if meter.received_total != last:
                last = meter.received_total
                self.send({"event": "progress", "received_total": last})
            await meter.progressed.wait()

    async def handle(self, op: str, cmd: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes] | None]:
        if op == "init":
            for p in cmd["sys_path"]:
                if p not in sys.path:
                    sys.path.append(p)
            module, _, qualname = str(cmd["driver"]).partition(":")
            cls: Any = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            self.driver = await cls.attach(cmd["spec"])
            self.clients = ClientSet(self.driver, on_error=self._loop_failed)
            return {"pid": os.getpid()}, None
        if op == "close":
            await self.shutdown()
            return {}, None
        c = self.clients
        if c is None:
            raise RuntimeError(f"{op!r} before init")
        if op == "attach":
            await c.attach([(t, s) for t, s in cmd["consumers"]], list(cmd["producers"]))
        elif op == "start_consumers":
            await c.start_consumers()
        elif op == "start_producers":
            await c.start_producers(
                rate=float(cmd["rate"]),
                size=int(cmd["size"]),
                max_outstanding=int(cmd["max_outstanding"]),
                limit=cmd["limit"],
            )
        elif op == "record":
            await c.set_recording(bool(cmd["on"]))
        elif op == "stop_producers":
            notes: list[str] = []
            await c.stop_producers(notes)
            return {"notes": notes}, None
        elif op == "producers_done":
            await c.producers_done()
        elif op == "totals":
            return {"counts": await c.totals()}, None
        elif op == "progress":
            if self._reporter is None:
                self._reporter = asyncio.create_task(self._report_progress(c))
            return {"received_total": c.meter.received_total}, None
        elif op == "report":
            m = await c.collect()
            return {"counts": m.counts()}, {"pub_us": m.pub_us.tobytes(), "e2e_us": m.e2e_us.tobytes()}
        else:
            raise ValueError(f"unknown op {op!r}")
        return {}, None

    async def shutdown(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
            await asyncio.gather(self._reporter, return_exceptions=True)
        if self.clients is not None:
            await self.clients.close()
        if self.driver is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.driver.stop(), CLOSE_TIMEOUT_S)


async def _serve(out: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    session = _Session(out)
    while line := await reader.readline():
        cmd = json.loads(line)
        op = str(cmd.pop("op"))
        try:
            reply, blobs = await session.handle(op, cmd)
        except Exception as exc:
            session.send(
                {
                    "reply": op,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": "".join(traceback.format_exception(exc)),
                }
            )
        else:
            session.send({"reply": op, **reply}, blobs)
        if op == "close":
            return
    # stdin closed without "close": the harness is gone; close what we can, quickly, and exit.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(session.shutdown(), EXIT_TIMEOUT_S)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness ends its workers, also on Ctrl-C
    out = os.fdopen(os.dup(1), "wb")  # the protocol's own channel ...
    os.dup2(2, 1)  # ... and fd 1 now goes to stderr: nothing printed can corrupt the protocol
    if "--uvloop" in sys.argv[1:]:
        import uvloop

        uvloop.install()
    asyncio.run(_serve(out))


if __name__ == "__main__":
    main()
