"""asyncio helpers shared by the services and the SDK."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> BaseException | None:
    """Cancel ``tasks`` (None entries are skipped) and wait until every one has ended. Returns
    the first exception one of them ended with other than its cancellation (not raised: the
    caller decides; every outcome is marked as seen), None if none did.

    Use it instead of ``task.cancel(); with suppress(CancelledError): await task``: that also
    swallows a cancellation of the *caller* arriving while it waits, so a task cancelled in the
    middle of such a clean-up goes on running (a supervisor loop would then start over, and
    whoever cancelled it waits forever). Here the caller's cancellation is raised, and the
    cancelled tasks end on their own."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    pending = {t for t in live if not t.done()}
    if pending:
        await asyncio.wait(pending)
    first: BaseException | None = None
    for t in live:
        if t.cancelled():
            continue
        exc = t.exception()
        if exc is not None and first is None:
            first = exc
    return first
