"""Retry policy: jittered exponential backoff, and a loop that retries retryable errors."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from danube_common.errors import DanubeError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_BASE_S = 0.1
BACKOFF_CAP_S = 2.0


def backoff_s(
    attempt: int,
    *,
    base_s: float = BACKOFF_BASE_S,
    cap_s: float = BACKOFF_CAP_S,
    rand: Callable[[], float] = random.random,
) -> float:
    """Delay before retry number ``attempt`` (0-based): ``min(cap, base * 2**attempt)``,
    jittered uniformly into its upper half so that clients spread out but still back off."""
    ceiling = min(cap_s, base_s * (2 ** min(attempt, 32)))
    return ceiling * (0.5 + 0.5 * rand())


async def retry_until(
    op: Callable[[], Awaitable[T]],
    *,
    timeout_s: float,
    what: str,
) -> T:
    """Run ``op`` until it succeeds, raises a non-retryable error, or ``timeout_s`` runs out.

    When time runs out the last retryable error is raised: it says what went wrong (e.g.
    the broker is unreachable), which a generic timeout would not.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    attempt = 0
    while True:
        try:
            return await op()
        except DanubeError as err:
            if not err.retryable:
                raise
            delay = backoff_s(attempt)
            if loop.time() + delay > deadline:
                raise
            log.info("%s failed (%s); retrying in %.2f s", what, err, delay)
        attempt += 1
        await asyncio.sleep(delay)
