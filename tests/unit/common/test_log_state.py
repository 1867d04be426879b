"""The log record's rules (pure) and its fenced transactions (against the in-memory etcd)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.errors import FailedPrecondition, HistoryConflict
from danube_common.keys import Keys
from danube_common.log_state import (
    MAX_CARRIED_SEQUENCES,
    UNBOUNDED,
    LogRecords,
    LogState,
    LogView,
    Refuse,
    Reservation,
    Start,
    Wait,
    checkpoint_of,
    checkpoint_value,
    decide_open,
    forced_end,
    merge_sequences,
    upload_bound,
)
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Compare
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

T = TopicName("default", "t")
INC = 7


def open_by(
    writer: str, start: int, *, epoch: int = 3, cloud: bool = False, seqs: dict[str, int] | None = None
):
    return LogState(writer, epoch, start, INC, producer_sequences=seqs or {}, cloud_acks=cloud)


def closed_by(writer: str, start: int, end: int, how: str = "hand_over") -> LogState:
    return open_by(writer, start).closed(end, how, sequences={"p": 9})


def view(state: LogState | None, *, checkpoint: int | None = None, reserved: int | None = None) -> LogView:
    res = None
    if state is not None and reserved is not None:
        res = Reservation(reserved, state.writer, state.epoch, state.start_offset)
    return LogView(state, res, checkpoint, state_revision=5 if state else 0)


# ---------------------------------------------------------------------- decide_open
@pytest.mark.parametrize(
    ("state", "checkpoint", "uploaded", "local_end", "expected"),
    [
        # a brand-new topic
        (None, None, None, None, Start(0, {}, None, "a new log")),
        # only object storage knows anything (no record): never below what it holds
        (None, 40, 30, None, 40),
        # a record of another incarnation (a deleted topic of the same name) is not ours
        (replace(closed_by("a", 0, 99), incarnation=INC + 1), None, None, None, 0),
        # a closed record: continue exactly at its end
        (closed_by("a", 0, 120), 100, 100, None, 120),
        (closed_by("a", 0, 120, "uploader"), 120, 120, 500, 120),
        # object storage past the recorded end: two histories
        (closed_by("a", 0, 120), 130, None, None, Refuse),
        # another broker's open record: wait for its end, whatever object storage says
        (open_by("a", 50), 80, 80, None, Wait),
        (open_by("a", 50), 80, 80, 90, Wait),
        # our own open record and our disk holds it: continue at the disk's end
        (open_by("me", 50), 60, 60, 75, 75),
        # our own record but no local log (another disk?): wait like any other writer
        (open_by("me", 50), 60, 60, None, Wait),
        (open_by("me", 50), 60, 60, 40, Wait),
        # a writer that acked only what was uploaded: continue after what object storage holds
        (open_by("a", 50, cloud=True), 80, 85, None, 85),
        (open_by("a", 50, cloud=True), None, None, None, 50),
    ],
)
def test_decide_open(
    state: LogState | None,
    checkpoint: int | None,
    uploaded: int | None,
    local_end: int | None,
    expected: object,
) -> None:
    d = decide_open(
        view(state, checkpoint=checkpoint),
        me="me",
        incarnation=INC,
        uploaded_end=uploaded,
        local_end=local_end,
    )
    if isinstance(expected, Start):
        assert d == expected
    elif isinstance(expected, int):
        assert isinstance(d, Start) and d.offset == expected
    else:
        assert isinstance(d, expected)  # type: ignore[arg-type]


def test_a_closed_record_hands_its_sequences_and_history_on() -> None:
    d = decide_open(view(closed_by("a", 10, 120)), me="b", incarnation=INC)
    assert isinstance(d, Start)
    assert d.inherited == {"p": 9}
    assert d.previous == {
        "writer": "a",
        "epoch": 3,
        "start_offset": 10,
        "next_offset": 120,
        "closed_by": "hand_over",
    }


def test_a_wait_says_whose_end_is_missing() -> None:
    d = decide_open(view(open_by("a", 50, epoch=11)), me="b", incarnation=INC)
    assert (
        isinstance(d, Wait) and "broker a" in d.reason and "offset 50" in d.reason and "epoch 11" in d.reason
    )


# ---------------------------------------------------------------------- upload_bound
@pytest.mark.parametrize(
    ("state", "me", "incarnation", "bound"),
    [
        (None, "me", INC, None),  # no record: nothing of this directory is history (yet)
        (open_by("me", 10), "me", INC, UNBOUNDED),  # our open log: everything
        (open_by("me", 10), "me", None, None),  # an unmarked directory: nothing
        (open_by("me", 10), "me", INC + 1, None),  # a deleted incarnation's directory: nothing
        (closed_by("me", 10, 90), "me", INC, 90),  # our closed stint: up to its end
        (open_by("other", 90), "me", INC, 90),  # another writer now: only what came before it
        (closed_by("other", 90, 200), "me", INC, 90),
    ],
)
def test_upload_bound(state: LogState | None, me: str, incarnation: int | None, bound: int | None) -> None:
    assert upload_bound(state, me=me, incarnation=incarnation) == bound


# ---------------------------------------------------------------------- forced_end
def test_a_forced_end_starts_past_the_reservation_and_records_the_loss() -> None:
    end, gap = forced_end(view(open_by("a", 100), checkpoint=130, reserved=1_000_100))
    assert end == 1_000_100
    assert gap is not None and (gap.start_offset, gap.next_offset, gap.writer) == (130, 1_000_100, "a")


def test_a_forced_end_never_claims_what_an_earlier_writer_still_uploads() -> None:
    # The checkpoint is below the stint's start: the earlier stint's tail is its uploader's job.
    end, gap = forced_end(view(open_by("a", 100), checkpoint=60, reserved=500))
    assert end == 500 and gap is not None and gap.start_offset == 100


def test_a_forced_end_needs_the_writers_reservation_and_an_open_record() -> None:
    with pytest.raises(HistoryConflict, match="reservation"):
        forced_end(view(open_by("a", 100), checkpoint=130))
    wrong = LogView(open_by("a", 100), Reservation(900, "a", 2, 0), 130, state_revision=5)
    with pytest.raises(HistoryConflict):
        forced_end(wrong)
    with pytest.raises(FailedPrecondition):
        forced_end(view(closed_by("a", 0, 100), reserved=500))
    with pytest.raises(FailedPrecondition):
        forced_end(view(None))


# ---------------------------------------------------------------------- values
def test_records_round_trip_and_old_records_are_read() -> None:
    for state in (
        open_by("a", 5, seqs={"x": 1}),
        closed_by("a", 5, 50, "uploader"),
        open_by("a", 0, cloud=True),
    ):
        assert LogState.from_json(state.to_json()) == state
    legacy = LogState.from_json({"next_offset": 40, "broker_id": "a", "epoch": 2, "at_ms": 1})
    assert not legacy.open and legacy.next_offset == 40 and legacy.matches(INC)
    with pytest.raises(HistoryConflict, match="malformed"):
        LogState.from_json({"writer": "a"}, key="/k")


def test_checkpoints_of_another_incarnation_are_not_ours() -> None:
    assert checkpoint_of({"next_offset": 5, "incarnation": INC}, INC) == 5
    assert checkpoint_of({"next_offset": 5, "incarnation": INC + 1}, INC) is None
    assert checkpoint_of({"next_offset": 5}, INC) == 5  # before incarnations
    assert checkpoint_of(None, INC) is None


@given(
    st.lists(st.dictionaries(st.text(min_size=1, max_size=3), st.integers(0, 10**6), max_size=5), max_size=4)
)
def test_merge_sequences_takes_the_highest(maps: list[dict[str, int]]) -> None:
    merged = merge_sequences(*maps)
    for m in maps:
        for name, seq in m.items():
            assert merged.get(name, 0) >= seq or seq == 0
    assert all(any(m.get(k) == v for m in maps) for k, v in merged.items())


def test_merge_sequences_is_bounded() -> None:
    many = {f"p{i}": i + 1 for i in range(MAX_CARRIED_SEQUENCES + 50)}
    merged = merge_sequences(many)
    assert len(merged) == MAX_CARRIED_SEQUENCES and "p0" not in merged


# ---------------------------------------------------------------------- transactions
@pytest.fixture
async def records() -> LogRecords:
    store = MemoryStore()
    return LogRecords(store, Keys("u"))


async def test_a_stint_is_recorded_once_and_fenced_on_what_was_read(records: LogRecords) -> None:
    v = await records.read(T, incarnation=INC)
    start = Start(0, {}, None, "a new log")
    opened = await records.open_stint(T, v, start, writer="b1", epoch=4, incarnation=INC, reserve=1000)
    assert opened is not None
    stint, res = opened
    assert stint.open and stint.writer == "b1" and res.reserved_to == 1000 and res.belongs_to(stint)
    # A second opener that read the same (empty) view loses.
    assert await records.open_stint(T, v, start, writer="b2", epoch=5, incarnation=INC, reserve=1000) is None
    # The reservation only moves while the stint is the recorded one.
    moved = await records.extend_reservation(T, stint, res, 5000)
    assert moved is not None and moved.reserved_to == 5000
    assert await records.extend_reservation(T, stint, res, 6000) is None, "stale reservation revision"
    assert await records.close(T, stint, next_offset=900, closed_by="release")
    assert await records.extend_reservation(T, stint, moved, 9000) is None, "closed: the writer must stop"
    assert not await records.close(T, stint, next_offset=950, closed_by="uploader"), "closed once"
    state = await records.state(T)
    assert state is not None and state.next_offset == 900 and state.closed_by == "release"


async def test_a_new_log_starts_the_upload_checkpoint_and_a_continued_one_leaves_it(
    records: LogRecords,
) -> None:
    """The first stint of a log sets the upload checkpoint to its start (so no uploader takes its
    own first local offset for where the history starts); later stints never touch it, and a
    checkpoint of a deleted incarnation is replaced."""
    cp_key = records.keys.upload_checkpoint(T)
    await records.store.put(cp_key, checkpoint_value(500, broker_id="old", incarnation=INC - 1))
    v = await records.read(T, incarnation=INC)
    assert v.checkpoint is None  # another incarnation's
    opened = await records.open_stint(
        T, v, Start(0, {}, None, "a new log"), writer="b1", epoch=4, incarnation=INC, reserve=10
    )
    assert opened is not None
    v = await records.read(T, incarnation=INC)
    assert v.checkpoint == 0
    kv = await records.store.get(cp_key)
    assert kv is not None and kv.json()["incarnation"] == INC and kv.json()["broker_id"] == "b1"
    # b1 dies before uploading anything; b2 continues at 252: the checkpoint stays at 0.
    assert await records.close(T, opened[0], next_offset=252, closed_by="uploader")
    v = await records.read(T, incarnation=INC)
    decision = decide_open(v, me="b2", incarnation=INC)
    assert isinstance(decision, Start) and decision.offset == 252 and decision.previous is not None
    assert await records.open_stint(T, v, decision, writer="b2", epoch=5, incarnation=INC, reserve=10)
    assert (await records.read(T, incarnation=INC)).checkpoint == 0


async def test_an_owner_fence_guards_the_open(records: LogRecords) -> None:
    owner = records.keys.owner(T)
    rev = await records.store.put(owner, {"broker_id": "b1"})
    v = await records.read(T)
    start = Start(0, {}, None, "a new log")
    fence = [Compare.mod_revision_is(owner, rev)]
    await records.store.put(owner, {"broker_id": "b2"})
    assert (
        await records.open_stint(
            T, v, start, writer="b1", epoch=rev, incarnation=INC, reserve=10, owner_fence=fence
        )
        is None
    )


async def test_closing_before_the_start_is_refused(records: LogRecords) -> None:
    v = await records.read(T)
    opened = await records.open_stint(
        T, v, Start(100, {}, None, ""), writer="b1", epoch=1, incarnation=INC, reserve=10
    )
    assert opened is not None
    with pytest.raises(HistoryConflict):
        records.close_txn(T, opened[0], next_offset=99, closed_by="release")


async def test_a_forced_takeover_records_its_decision_and_the_gap(records: LogRecords) -> None:
    v = await records.read(T)
    opened = await records.open_stint(
        T, v, Start(100, {"p": 3}, None, ""), writer="a", epoch=1, incarnation=INC, reserve=500
    )
    assert opened is not None
    await records.store.put(records.keys.upload_checkpoint(T), {"next_offset": 150, "incarnation": INC})
    closed, gap = await records.force_close(T, decided_by="admin alice", reason="disk lost", incarnation=INC)
    assert closed.next_offset == 600 and closed.closed_by == "forced" and "alice" in closed.detail
    assert gap is not None and (gap.start_offset, gap.next_offset) == (150, 600)
    assert [(g.start_offset, g.next_offset, g.decided_by) for g in await records.gaps(T)] == [
        (150, 600, "admin alice")
    ]
    with pytest.raises(FailedPrecondition):
        await records.force_close(T, decided_by="admin", reason="again")
    d = decide_open(await records.read(T, incarnation=INC), me="b", incarnation=INC, uploaded_end=150)
    assert isinstance(d, Start) and d.offset == 600 and d.inherited == {"p": 3}
