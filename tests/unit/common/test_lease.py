"""KeptLease: keeps its lease alive, and says so loudly (``lost``) when it is gone."""

from __future__ import annotations

import pytest

from danube_common.metadata.lease import KeptLease
from danube_common.metadata.memory import MemoryStore
from tests.support import wait_until

pytestmark = pytest.mark.unit


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.keepalives = 0

    async def keepalive(self, lease_id: int) -> int:
        self.keepalives += 1
        return await super().keepalive(lease_id)


async def test_lost_is_set_when_the_lease_expires() -> None:
    store = MemoryStore()
    kept = KeptLease(store, ttl_s=1, name="test")
    lease = await kept.start()
    await store.put("/k", b"", lease=lease)
    store.expire_lease(lease)
    await wait_until(kept.lost.is_set, timeout_s=5, what="lost to be set")
    assert await store.get("/k") is None
    await kept.aclose()
    await store.aclose()


async def test_keeps_the_lease_alive_past_its_ttl() -> None:
    store = CountingStore()
    kept = KeptLease(store, ttl_s=1)
    lease = await kept.start()
    await store.put("/k", b"", lease=lease)
    # Refreshes come every ttl/4: five of them span more than a whole TTL.
    await wait_until(lambda: store.keepalives >= 5, timeout_s=5, what="five keep-alives")
    assert not kept.lost.is_set()
    assert await store.get("/k") is not None
    await kept.aclose()
    assert await store.get("/k") is None, "closing revokes the lease, so its keys vanish at once"
    await store.aclose()


async def test_lost_when_the_store_is_unreachable_for_a_ttl() -> None:
    store = MemoryStore()
    kept = KeptLease(store, ttl_s=1)
    await kept.start()
    store.unavailable = True
    await wait_until(kept.lost.is_set, timeout_s=5, what="lost after a TTL without etcd")
    store.unavailable = False
    await kept.aclose()
    await store.aclose()


async def test_aclose_without_revoke_leaves_keys_to_expire() -> None:
    store = MemoryStore()
    kept = KeptLease(store, ttl_s=30)
    lease = await kept.start()
    await store.put("/k", b"", lease=lease)
    await kept.aclose(revoke=False)
    assert await store.get("/k") is not None
    await kept.aclose()  # a second close is harmless
    await store.aclose()
