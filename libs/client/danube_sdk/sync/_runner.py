"""The one background event loop the blocking SDK runs the asyncio client on.

One daemon thread per process runs one asyncio loop for every blocking client. It starts with
the first client, and stops when the last one is closed (or at interpreter exit, after the open
clients have been closed, which flushes their producers). Blocking calls hand coroutines to it
with :func:`asyncio.run_coroutine_threadsafe` and wait for the result; an exception raised
in the loop is raised in the calling thread as it is (the SDK's typed errors).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from danube_sdk.errors import ClientClosed

log = logging.getLogger(__name__)

R = TypeVar("R")

#: How long stopping the loop waits for its thread (seconds).
_STOP_JOIN_S = 10.0


class _Closeable(Protocol):
    def close(self) -> None: ...


class LoopThread:
    """A lazily started event loop on a daemon thread, shared by reference count."""

    def __init__(self, name: str = "danube-sdk-sync") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._users = 0

    @property
    def running(self) -> bool:
        return self._loop is not None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def acquire(self) -> asyncio.AbstractEventLoop:
        """The loop (started if no one uses it yet); pair with :meth:`release`."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(loop, started), name=self._name, daemon=True
                )
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            self._users += 1
            return self._loop

    def release(self) -> None:
        """One user fewer; the last one stops the loop and joins its thread."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._loop is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_JOIN_S)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            # Whatever is left (nothing, when every client was closed) is cancelled, not leaked.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def call(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, R]) -> R:
    """Run ``coro`` on ``loop`` and wait for its result in this thread.

    An interrupt while waiting (KeyboardInterrupt) cancels the coroutine. Calling from the
    loop's own thread would wait forever: that raises RuntimeError instead.
    """
    if loop.is_closed():  # its client was closed (the last one stops the loop)
        coro.close()
        raise ClientClosed("the client is closed")
    if on_loop_thread(loop):
        coro.close()
        refuse_on_loop_thread(loop)
    fut = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return fut.result()
    except BaseException:
        fut.cancel()
        raise


def submit(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
    """Run ``coro`` on ``loop``; its future, at once."""
    return asyncio.run_coroutine_threadsafe(coro, loop)


def refuse_on_loop_thread(loop: asyncio.AbstractEventLoop) -> None:
    """RuntimeError when called on ``loop``'s own thread, where a blocking call would wait
    forever for the loop it blocks."""
    if on_loop_thread(loop):
        raise RuntimeError(
            "a blocking danube_sdk.sync call was made on the SDK's own event loop thread (from a "
            "callback); use the asyncio API (danube_sdk) there"
        )


def on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


#: The process's loop thread, shared by every blocking client.
LOOP = LoopThread()
#: Open blocking clients, closed at interpreter exit (their producers flushed). Held strongly:
#: a client dropped without ``close()`` (its producers still in use) is closed at exit too.
OPEN_CLIENTS: set[_Closeable] = set()


@atexit.register
def _close_open_clients() -> None:
    for client in list(OPEN_CLIENTS):
        try:
            client.close()
        except Exception as exc:  # exiting: report, and go on with the others
            log.warning("closing a danube_sdk.sync client at exit failed: %s", exc)
