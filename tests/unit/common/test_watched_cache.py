"""The watch-fed cache base: listing, following, malformed values, revisions, re-listing."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import KeyValue, WatchEvent

pytestmark = pytest.mark.unit


class Numbers(WatchedCache):
    """``/c/n/{name}`` -> an int; ``/c/m/{name}`` listed too (a second prefix)."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, "/c/", what="numbers view")
        self.values: dict[str, int] = {}
        self.changes = 0

    def _listed_prefixes(self) -> Sequence[str]:
        return ("/c/n/", "/c/m/")

    def _reset(self) -> None:
        self.values = {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        value = item.json()
        if not isinstance(value, int):
            raise ValueError(f"not a number: {value!r}")
        self.values[key] = value

    def _delete(self, key: str) -> None:
        self.values.pop(key, None)

    def _changed(self) -> None:
        self.changes += 1


async def test_lists_follows_and_skips_malformed_values(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    await store.put("/c/n/a", "1")
    await store.put("/c/n/bad", '"x"')
    await store.put("/c/m/b", "2")
    await store.put("/elsewhere", "9")
    view = Numbers(store)
    await view.start()
    try:
        assert view.values == {"/c/n/a": 1, "/c/m/b": 2}
        assert "numbers view: ignoring malformed /c/n/bad" in caplog.text
        rev = await store.put("/c/n/a", "5")
        assert await view.wait_revision(rev, timeout_s=5)
        assert view.values["/c/n/a"] == 5
        assert await store.delete("/c/m/b")
        assert await view.wait_for(lambda: "/c/m/b" not in view.values, timeout_s=5)
        rev = await store.put("/c/n/a", "[1]")  # malformed: skipped, the revision still counts
        assert await view.wait_revision(rev, timeout_s=5)
        assert view.values["/c/n/a"] == 5 and view.revision >= rev
        assert await view.wait_for(lambda: view.changes >= 4, timeout_s=5)
    finally:
        await view.aclose()
        await store.aclose()
    assert view.task is None


async def test_reload_starts_after_the_smallest_listing_revision() -> None:
    store = MemoryStore()
    await store.put("/c/n/a", "1")
    first = await store.put("/c/m/b", "2")
    view = Numbers(store)
    rev = await view._load()
    assert rev == first and view.values == {"/c/n/a": 1, "/c/m/b": 2}
    await store.aclose()
