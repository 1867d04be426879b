"""RangeRead's stop rules against a scripted reader (no network): late messages dropped, offsets
gone by retention (reported by a frame, or found by probing the first offset), chunked messages
straddling the end, a stalled read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from danube_common.errors import DataLoss, Timeout
from danube_sdk import ClientTimeout
from danube_spark import topic_io
from danube_spark.topic_io import RangeRead

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

T = "/default/t"


@dataclass
class Msg:
    offset: int
    chunk_offsets: tuple[int, ...] = ()


@dataclass
class Script:
    """What the fake broker does: messages to hand out, skipped ranges that appear once the
    reader got ``after`` messages, incomplete chunked messages until ``complete_after``."""

    msgs: list[Msg]
    skipped: list[tuple[int, int]] = field(default_factory=list)
    incomplete: list[int] = field(default_factory=list)
    complete_after: int = 0
    first_offset: int = 0


class FakeReader:
    def __init__(self, script: Script, start: Any) -> None:
        self.script = script
        self.start = start
        self.taken = 0

    async def receive(self, timeout_s: float | None = None) -> Msg:
        if not self.script.msgs:
            raise ClientTimeout("nothing")
        self.taken += 1
        return self.script.msgs.pop(0)

    @property
    def next_offsets(self) -> dict[str, int]:
        return {T: self.script.first_offset}

    @property
    def skipped(self) -> dict[str, list[tuple[int, int]]]:
        return {T: list(self.script.skipped)}

    @property
    def incomplete(self) -> dict[str, list[int]]:
        return {T: [] if self.taken >= self.script.complete_after else list(self.script.incomplete)}

    async def close(self) -> None:
        pass


class FakeClient:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def create_reader(self, topic: str, *, start: Any, receiver_queue_size: int) -> FakeReader:
        return FakeReader(self.script, start)


async def read_all(
    script: Script, start: int, end: int, *, fail: bool = True, timeout_s: float = 5.0
) -> list[int]:
    rr = RangeRead(FakeClient(script), T, start, end, fail_on_data_loss=fail, read_timeout_s=timeout_s)  # type: ignore[arg-type]
    await rr.open()
    out: list[int] = []
    while not rr.done:
        out += [m.offset for m in await rr.next_messages(3)]
    await rr.close()
    return out


@pytest.fixture(autouse=True)
def quick_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_io, "IDLE_CHECK_S", 0.01)


async def test_reads_exactly_the_range_and_drops_what_follows() -> None:
    script = Script([Msg(o) for o in range(5, 12)])
    assert await read_all(script, 5, 9) == [5, 6, 7, 8]
    assert [m.offset for m in script.msgs] == [9, 10, 11]  # stopped once 8 was taken


async def test_an_empty_range_opens_nothing() -> None:
    assert await read_all(Script([]), 4, 4) == []


async def test_offsets_gone_by_retention_fail_or_are_skipped() -> None:
    script = Script([Msg(o) for o in range(8, 10)], skipped=[(3, 8)])
    with pytest.raises(DataLoss, match=r"offsets 3\.\.7 are gone.*failOnDataLoss=false"):
        await read_all(script, 3, 10)
    script = Script([Msg(o) for o in range(8, 10)], skipped=[(3, 8)])
    assert await read_all(script, 3, 10, fail=False) == [8, 9]


async def test_a_range_wholly_gone_with_nothing_after_it_is_found_by_probing() -> None:
    """No frame comes (nothing is published after the cut): the read probes the first offset."""
    script = Script([], first_offset=20)
    with pytest.raises(DataLoss, match=r"offsets 3\.\.9 are gone"):
        await read_all(script, 3, 10)
    assert await read_all(Script([], first_offset=20), 3, 10, fail=False) == []


async def test_a_chunked_message_begun_before_the_end_is_waited_for() -> None:
    # Chunks at 7, 9 and 10 (another producer's message at 8 between them), end 8: offset 8
    # arrives first and passes the end, but the message starting at 7 is still incomplete, so
    # the read goes on until it arrives (with its first chunk's offset) and ends after it.
    script = Script([Msg(5), Msg(6), Msg(8), Msg(7, (7, 9, 10)), Msg(11)], incomplete=[7], complete_after=4)
    assert await read_all(script, 5, 8) == [5, 6, 7]
    assert [m.offset for m in script.msgs] == [11]


async def test_a_stalled_read_times_out() -> None:
    script = Script([Msg(0)], first_offset=0)
    with pytest.raises(Timeout, match="readTimeoutSeconds"):
        await read_all(script, 0, 5, timeout_s=0.05)
