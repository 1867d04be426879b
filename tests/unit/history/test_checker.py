"""The history checker (tests/fault/history.py): histories built by hand and by hypothesis, no I/O
except the JSON-lines round trip in tmp_path."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.fault.history import (
    UNKNOWN_OFFSET,
    VIOLATION_KINDS,
    Event,
    History,
    MsgId,
    Verdict,
    check,
    decode_payload,
    dump_final_reads,
    encode_payload,
    load_final_reads,
)

pytestmark = pytest.mark.unit

T = "/default/t"
U = "/default/u"


class Clock:
    """A fake monotonic clock: every reading is 1 ms after the previous one."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Sim:
    """A tiny stand-in for a reliable topic: sends append to a per-topic log, and the test
    records what a workload would. ``final()`` is what a fresh reader would get."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.history = History(clock=self.clock)
        self.logs: dict[str, list[MsgId | None]] = defaultdict(list)

    def store(self, topic: str, msg: MsgId | None) -> int:
        self.logs[topic].append(msg)
        return len(self.logs[topic]) - 1

    def send(
        self,
        producer: str,
        seq: int,
        topic: str = T,
        *,
        outcome: str = "ok",
        stored: bool | None = None,
        acked_offset: int | None = None,
    ) -> MsgId:
        msg = MsgId(producer, seq)
        handle = self.history.send_invoked(producer, topic, msg)
        offset = self.store(topic, msg) if (outcome == "ok" if stored is None else stored) else None
        if outcome == "ok":
            self.history.send_ok(handle, acked_offset if acked_offset is not None else offset)  # type: ignore[arg-type]
        elif outcome == "fail":
            self.history.send_failed(handle, "MessageTooLarge: over the limit", definite=True)
        elif outcome == "info":
            self.history.send_failed(handle, TimeoutError("not acknowledged within 60 s"), definite=False)
        return msg

    def consume(
        self, topic: str = T, sub: str = "s", process: str = "consumer-1", *, cursor: bool = False
    ) -> None:
        for offset, msg in enumerate(self.logs[topic]):
            self.history.delivered(process, topic, sub, msg, offset)
            self.history.acked(process, topic, sub, offset, msg)
        if cursor and self.logs[topic]:
            self.history.cursor(topic, sub, len(self.logs[topic]) - 1)

    def final(self) -> dict[str, list[tuple[int, MsgId | None]]]:
        return {topic: list(enumerate(log)) for topic, log in self.logs.items()}

    def check(self, final: dict[str, list[tuple[int, MsgId | None]]] | None = None, **kw: object) -> Verdict:
        return check(self.history, final_reads=self.final() if final is None else final, **kw)  # type: ignore[arg-type]


def kinds(v: Verdict) -> set[str]:
    return set(v.by_kind)


# ------------------------------------------------------------------------------ payloads


@given(st.text(min_size=1, max_size=40), st.integers(min_value=0, max_value=2**63), st.integers(0, 300))
def test_payload_round_trip(producer: str, seq: int, pad_to: int) -> None:
    msg = MsgId(producer, seq)
    payload = encode_payload(msg, pad_to=pad_to)
    assert len(payload) >= pad_to
    assert decode_payload(payload) == msg


def test_payloads_that_are_not_ours_decode_to_none() -> None:
    good = encode_payload(MsgId("producer-1", 42), pad_to=64)
    corrupted = bytearray(good)
    corrupted[good.index(b"42")] = ord("7")  # a flipped digit: the CRC no longer matches
    assert decode_payload(bytes(corrupted)) is None
    assert decode_payload(good[:-1]) == MsgId("producer-1", 42)  # shorter padding is still ours
    assert decode_payload(good[:10]) is None  # torn inside the header
    assert decode_payload(good[:-1] + b"x") is None  # garbage in the padding
    assert decode_payload(b"") is None
    assert decode_payload(b"hello world") is None
    with pytest.raises(ValueError):
        encode_payload(MsgId("", 1))


# ------------------------------------------------------------------------------ clean histories


def test_a_clean_history_passes() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-2", 1, U)
    sim.send("producer-1", 2, outcome="info", stored=True)  # unknown outcome, stored: fine
    sim.send("producer-2", 2, outcome="info", stored=False)  # unknown outcome, not stored: fine
    sim.send("producer-1", 3, outcome="fail")  # refused, not stored
    sim.send("producer-2", 3)
    sim.send("producer-1", 4)
    sim.consume(T, "shared", cursor=True)
    sim.consume(U, "shared", cursor=True)
    sim.consume(T, "excl", "consumer-2")
    # an at-least-once redelivery of an offset not covered by a cursor sample yet
    sim.history.delivered("consumer-2", T, "excl", sim.logs[T][0], 0, redelivery=True)

    v = sim.check()

    assert v.ok, v.summary()
    assert v.violations == []
    c = v.counts
    assert (c.sends_invoked, c.sends_ok, c.sends_failed, c.sends_info, c.sends_unresolved) == (7, 4, 1, 2, 0)
    assert c.final_read == {T: 4, U: 1}
    assert c.deliveries == 4 + 1 + 4 + 1
    assert c.redeliveries == 1
    assert c.cursor_samples == 2
    assert c.duplicates == 0
    assert v.summary().startswith("history check: OK")


def test_an_unresolved_send_counts_like_info() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.history.send_invoked("producer-1", T, MsgId("producer-1", 2))
    v = sim.check()
    assert v.ok and v.counts.sends_unresolved == 1
    assert sim.history.unresolved_sends == 1


def test_an_empty_history_passes() -> None:
    v = check(History(), final_reads={})
    assert v.ok and v.longest_ack_gap_s == 0.0


def test_a_duplicate_acked_without_its_offset_must_still_be_stored() -> None:
    """A re-send acked with UNKNOWN_OFFSET: only its presence is checked (and its absence is loss)."""
    sim = Sim()
    first = sim.send("producer-1", 1)
    h = sim.history.send_invoked("producer-1", T, first)  # the SDK re-sent it after a failover
    sim.history.send_ok(h, UNKNOWN_OFFSET)
    sim.send("producer-1", 2)
    assert sim.check().ok, sim.check().summary()
    ghost = MsgId("producer-1", 3)
    h = sim.history.send_invoked("producer-1", T, ghost)
    sim.history.send_ok(h, UNKNOWN_OFFSET)  # acked, but stored nowhere
    assert kinds(sim.check()) == {"lost"}


# ------------------------------------------------------------------------------ each violation


def test_a_lost_acked_message_is_caught() -> None:
    sim = Sim()
    for seq in range(1, 6):
        sim.send("producer-1", seq)
    final = sim.final()
    final[T].pop()  # the last one: no gap, only the loss

    v = sim.check(final)

    assert kinds(v) == {"lost"}
    (line,) = v.by_kind["lost"]
    assert "producer-1#5" in line and "offset 4" in line and T in line


def test_a_forked_history_is_reported_apart_from_loss() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-1", 2)  # acked at offset 1 by the old owner ...
    final = sim.final()
    sim.send("producer-2", 1, acked_offset=1)  # ... and the new owner hands offset 1 out again
    final[T][1] = (1, MsgId("producer-2", 1))

    v = sim.check(final)

    assert {"lost", "offset-mismatch", "conflict"} <= kinds(v)
    assert any("producer-1#2" in line and "forked" in line for line in v.by_kind["offset-mismatch"])
    assert any("producer-1#2" in line for line in v.by_kind["lost"])


def test_an_ack_naming_the_wrong_offset_is_caught() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-1", 2, acked_offset=7)  # stored at 1, but the ack said 7

    v = sim.check()

    assert kinds(v) == {"offset-mismatch"}
    assert "offset 7" in v.by_kind["offset-mismatch"][0]


def test_a_never_sent_message_is_a_phantom() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    ghost = MsgId("ghost", 9)
    sim.store(T, ghost)
    sim.consume(T, "s")
    sim.consume(T, "s2", "consumer-2")

    v = sim.check()

    assert kinds(v) == {"phantom"}
    (line,) = v.by_kind["phantom"]  # one line per message, however often it was seen
    assert "ghost#9" in line and "never sent" in line and "seen 3 time(s)" in line


def test_a_message_sent_to_another_topic_is_a_phantom_here() -> None:
    sim = Sim()
    msg = sim.send("producer-1", 1, U)
    sim.store(T, msg)
    assert kinds(sim.check()) == {"phantom"}


def test_an_undecodable_payload_is_a_phantom() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.store(T, None)
    sim.send("producer-1", 2)

    v = sim.check()

    assert kinds(v) == {"phantom"}
    assert "undecodable" in v.by_kind["phantom"][0] and "[1]" in v.by_kind["phantom"][0]


def test_a_definitely_failed_send_that_appears_is_a_phantom() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-1", 2, outcome="fail", stored=True)

    v = sim.check()

    assert kinds(v) == {"phantom"}
    assert "failed definitely" in v.by_kind["phantom"][0] and "MessageTooLarge" in v.by_kind["phantom"][0]


def test_a_producer_reorder_is_caught_in_acks_and_in_the_final_read() -> None:
    sim = Sim()
    h = sim.history
    first, second = MsgId("producer-1", 1), MsgId("producer-1", 2)
    h1 = h.send_invoked("producer-1", T, first)
    h2 = h.send_invoked("producer-1", T, second)
    h.send_ok(h2, sim.store(T, second))  # seq 2 stored before seq 1
    h.send_ok(h1, sim.store(T, first))

    v = sim.check()

    assert kinds(v) == {"reorder"}
    lines = v.by_kind["reorder"]
    assert len(lines) == 2
    assert any("acked at offset 1" in line for line in lines)
    assert any("final read" in line and "producer-1#1" in line for line in lines)


def test_other_producers_interleaving_is_not_a_reorder() -> None:
    sim = Sim()
    for seq in range(1, 4):
        sim.send("producer-2", seq)
        sim.send("producer-1", seq)
    assert sim.check().ok


def test_an_offset_gap_is_caught() -> None:
    sim = Sim()
    for seq in range(1, 5):
        sim.send("producer-1", seq, outcome="info", stored=True)
    final = sim.final()
    del final[T][1:3]  # offsets 1 and 2 never come back (their sends' outcome was unknown)

    v = sim.check(final)

    assert kinds(v) == {"gap"}
    assert "offsets 1..2 missing" in v.by_kind["gap"][0]


def test_a_final_read_not_starting_at_zero_has_a_gap() -> None:
    sim = Sim()
    sim.send("producer-1", 1, outcome="info", stored=True)
    sim.send("producer-1", 2)
    final = sim.final()
    del final[T][0]
    assert kinds(sim.check(final)) == {"gap"}


def test_offsets_going_back_in_the_final_read_are_caught() -> None:
    sim = Sim()
    for seq in range(1, 4):
        sim.send("producer-1", seq)
    final = sim.final()
    final[T].append(final[T][1])  # offset 1 again, after 2

    v = sim.check(final)

    assert "offset-order" in kinds(v)
    assert "offset 1" in v.by_kind["offset-order"][0]


def test_two_messages_at_one_offset_is_a_conflict() -> None:
    sim = Sim()
    a = sim.send("producer-1", 1)
    b = sim.send("producer-2", 1)
    sim.consume()
    sim.history.delivered("consumer-9", T, "s", a, 1)  # another subscription saw `a` at b's offset

    v = sim.check()

    assert kinds(v) == {"conflict"}
    (line,) = v.by_kind["conflict"]
    assert f"{T}@1" in line and str(a) in line and str(b) in line and "consumer-9" in line


def test_a_message_at_two_offsets_is_a_duplicate_when_idempotent() -> None:
    sim = Sim()
    msg = sim.send("producer-1", 1)
    sim.send("producer-1", 2)
    sim.store(T, msg)  # a resend stored again

    strict = sim.check()
    assert kinds(strict) == {"duplicate"}
    assert "offsets [0, 2]" in strict.by_kind["duplicate"][0]
    assert strict.counts.duplicates == 1

    lenient = sim.check(idempotent=False)
    assert lenient.ok, lenient.summary()
    assert lenient.counts.duplicates == 1


def test_redeliveries_are_counted_not_violations() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-1", 2)
    sim.consume(T, "s")
    sim.consume(T, "s")  # everything again (a reconnect before the acks were durable)
    v = sim.check()
    assert v.ok and v.counts.redeliveries == 2 and v.counts.deliveries == 4


def test_a_cursor_going_back_is_caught() -> None:
    sim = Sim()
    for seq in range(1, 7):
        sim.send("producer-1", seq)
    sim.history.cursor(T, "s", 5)
    sim.history.cursor(T, "s", 3)
    sim.history.cursor(T, "other", 1)  # another subscription's cursor is its own

    v = sim.check()

    assert kinds(v) == {"cursor-regression"}
    assert "cursor 3" in v.by_kind["cursor-regression"][0]


def test_a_delivery_after_a_covering_cursor_sample_is_caught() -> None:
    sim = Sim()
    for seq in range(1, 8):
        sim.send("producer-1", seq)
    sim.history.cursor(T, "s", 5)
    sim.history.delivered("consumer-1", T, "s", MsgId("producer-1", 7), 6)  # above: fine
    sim.history.delivered("consumer-2", T, "other", MsgId("producer-1", 5), 4)  # other sub: fine
    sim.history.delivered("consumer-1", T, "s", MsgId("producer-1", 5), 4)  # covered: violation

    v = sim.check()

    assert kinds(v) == {"delivery-after-ack"}
    (line,) = v.by_kind["delivery-after-ack"]
    assert f"{T}@4" in line and "consumer-1" in line and "cursor 5" in line


def test_losses_inside_an_allowed_gap_are_counted_not_violations() -> None:
    sim = Sim()
    for seq in range(1, 8):
        sim.send("producer-1", seq)
    final = sim.final()
    del final[T][2:5]  # offsets 2, 3, 4 lost with a destroyed disk, accepted by the operator

    v = sim.check(final, allowed_gaps={T: [(2, 5)]})
    assert v.ok, v.summary()
    assert v.counts.lost_in_allowed_gaps == 3

    # split into two touching ranges: the same
    assert sim.check(final, allowed_gaps={T: [(2, 4), (4, 5)]}).ok

    narrower = sim.check(final, allowed_gaps={T: [(2, 4)]})
    assert kinds(narrower) == {"gap", "lost"}
    assert narrower.counts.lost_in_allowed_gaps == 2
    assert "producer-1#5" in narrower.by_kind["lost"][0]


def test_a_send_acked_without_an_offset_is_judged_by_where_it_was_delivered() -> None:
    """A resend acknowledged as a duplicate whose original offset the broker did not know (offset
    None), stored at 1, before a retention cut at 3 the final read starts after."""
    sim = Sim()
    sim.send("producer-1", 1)
    resent = MsgId("producer-1", 2)
    handle = sim.history.send_invoked("producer-1", T, resent)
    assert sim.store(T, resent) == 1
    sim.history.send_ok(handle, None)  # the only ack says no offset
    for seq in range(3, 6):
        sim.send("producer-1", seq)
    final = sim.final()
    del final[T][:3]
    cut = {T: [(0, 3)]}
    assert kinds(sim.check(final, allowed_gaps=cut)) == {"lost"}, "never delivered: no proof where it was"

    sim.consume(T, "s")
    v = sim.check(final, allowed_gaps=cut)
    assert v.ok, v.summary()
    assert v.counts.lost_in_allowed_gaps == 3


def test_a_bad_allowed_gap_is_refused() -> None:
    with pytest.raises(ValueError, match="half-open"):
        Sim().check(allowed_gaps={T: [(5, 5)]})


# ------------------------------------------------------------------------------ timing, summary


def test_the_longest_pause_between_send_acks_is_reported() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer-1", 2, U)
    sim.clock.advance(3.0)  # a failover
    sim.send("producer-1", 3)
    sim.clock.advance(1.0)
    sim.send("producer-1", 4, U)

    v = sim.check()

    assert v.longest_ack_gap_s == pytest.approx(3.002, abs=0.002)
    assert v.longest_ack_gap_s_per_topic[T] == pytest.approx(3.004, abs=0.002)
    assert v.longest_ack_gap_s_per_topic[U] == pytest.approx(4.006, abs=0.003)
    assert v.longest_ack_gap_at is not None
    assert v.longest_ack_gap_at[1] - v.longest_ack_gap_at[0] == pytest.approx(v.longest_ack_gap_s)


def test_the_summary_lists_each_kind_with_at_most_ten_examples() -> None:
    sim = Sim()
    for seq in range(1, 31):
        sim.send("producer-1", seq)
    final = {T: sim.final()[T][:5]}  # 25 acked messages lost at the end

    text = sim.check(final).summary()

    lines = text.splitlines()
    assert lines[0] == "history check: FAILED (25 violations)"
    assert "sends 30 invoked: 30 ok" in lines[1]
    assert "lost (25):" in lines
    assert sum(line.startswith("  - ") for line in lines) == 10
    assert lines[-1] == "  ... and 15 more"


# ------------------------------------------------------------------------------ the recorder


def test_a_send_outcome_is_recorded_once() -> None:
    h = History()
    handle = h.send_invoked("producer-1", T, MsgId("producer-1", 1))
    h.send_ok(handle, 0)
    with pytest.raises(ValueError, match="already has an outcome"):
        h.send_failed(handle, "late", definite=False)
    with pytest.raises(ValueError):
        h.send_ok(12345, 0)


def test_check_needs_a_final_read_for_each_topic_with_acked_sends() -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    with pytest.raises(ValueError, match=T):
        sim.check({})


def test_an_outcome_without_an_invoke_is_a_malformed_history() -> None:
    ev = Event(
        process="producer-1", kind="send", phase="ok", topic=T, msg=MsgId("producer-1", 1),
        offset=0, subscription=None, time=1.0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="no open invoke"):
        check([ev], final_reads={T: [(0, MsgId("producer-1", 1))]})


def test_appends_from_threads_are_all_kept_in_time_order() -> None:
    h = History()

    def produce(name: str) -> None:
        for seq in range(500):
            handle = h.send_invoked(name, T, MsgId(name, seq))
            h.send_failed(handle, "x", definite=False)

    threads = [threading.Thread(target=produce, args=(f"producer-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    events = h.events
    assert len(events) == 4000
    assert h.unresolved_sends == 0
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert check(h, final_reads={}).counts.sends_info == 2000


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    sim = Sim()
    sim.send("producer-1", 1)
    sim.send("producer|2", 1, U, outcome="info", stored=True)
    sim.send("producer-1", 2, outcome="fail")
    sim.store(T, None)
    sim.consume(T, "s", cursor=True)
    sim.history.delivered("consumer-1", U, "s", MsgId("producer|2", 1), 0, redelivery=True)
    path = tmp_path / "history.jsonl"
    reads = tmp_path / "final.json"

    sim.history.dump(path)
    dump_final_reads(reads, sim.final())
    loaded = History.load(path)

    assert loaded.events == sim.history.events
    assert len(path.read_text().splitlines()) == len(sim.history)
    assert load_final_reads(reads) == sim.final()
    assert check(loaded, final_reads=load_final_reads(reads)) == sim.check()


def test_a_large_history_checks_quickly_enough_for_the_timeout() -> None:
    """100k+ events: linear passes only (a quadratic scan would blow the per-test timeout)."""
    sim = Sim()
    for seq in range(20_000):
        sim.send(f"producer-{seq % 4}", seq // 4, T if seq % 2 else U)
    for topic in (T, U):
        sim.consume(topic, "a")
        sim.consume(topic, "b", "consumer-2", cursor=True)
    assert len(sim.history) > 100_000

    v = sim.check()

    assert v.ok, v.summary()
    assert v.counts.final_read == {T: 10_000, U: 10_000}


# ------------------------------------------------------------------------------ hypothesis

TOPICS = (T, U)
SUBS = ("shared", "excl")
#: A send's fate: acknowledged; outcome unknown but stored; unknown and lost; refused.
OUTCOMES = ("ok", "ok", "ok", "info-stored", "info-lost", "fail")


@st.composite
def clean_runs(draw: st.DrawFn) -> tuple[History, dict[str, list[tuple[int, MsgId | None]]]]:
    """A history a correct broker could produce: random producers and topics, interleaved
    invokes, outcomes resolved in any order, deliveries to two subscriptions with redeliveries
    and cursor samples."""
    topics = TOPICS[: draw(st.integers(1, 2))]
    plans = {
        f"producer-{i}": draw(
            st.lists(st.tuples(st.sampled_from(topics), st.sampled_from(OUTCOMES)), max_size=20)
        )
        for i in range(draw(st.integers(1, 4)))
    }
    sent = dict.fromkeys(plans, 0)
    clock = Clock()
    h = History(clock=clock)
    logs: dict[str, list[MsgId]] = {t: [] for t in topics}
    unresolved: list[tuple[int, str, int | None]] = []  # handle, outcome, offset
    next_delivery = {(t, s): 0 for t in topics for s in SUBS}

    while True:
        actions: list[tuple[str, Any]] = [("send", p) for p, plan in plans.items() if sent[p] < len(plan)]
        actions += [("resolve", i) for i in range(len(unresolved))]
        actions += [("deliver", key) for key, nxt in next_delivery.items() if nxt < len(logs[key[0]])]
        if not actions:
            break
        kind, arg = draw(st.sampled_from(actions))
        if draw(st.booleans()):
            clock.advance(draw(st.floats(0, 0.5)))
        if kind == "send":
            producer = arg
            topic, outcome = plans[producer][sent[producer]]
            sent[producer] += 1
            msg = MsgId(producer, sent[producer])
            handle = h.send_invoked(producer, topic, msg)
            offset = None
            if outcome in ("ok", "info-stored"):
                logs[topic].append(msg)
                offset = len(logs[topic]) - 1
            unresolved.append((handle, outcome, offset))
        elif kind == "resolve":
            handle, outcome, offset = unresolved.pop(arg)
            if outcome == "ok":
                assert offset is not None
                h.send_ok(handle, offset)
            else:
                h.send_failed(handle, outcome, definite=outcome == "fail")
        else:
            topic, sub = arg
            offset = next_delivery[(topic, sub)]
            for _ in range(draw(st.integers(1, 2))):  # maybe redelivered before the ack
                h.delivered(f"consumer-{sub}", topic, sub, logs[topic][offset], offset)
            h.acked(f"consumer-{sub}", topic, sub, offset, logs[topic][offset])
            next_delivery[(topic, sub)] = offset + 1
            if draw(st.booleans()):
                h.cursor(topic, sub, offset)
    return h, {t: list(enumerate(log)) for t, log in logs.items()}


@settings(max_examples=100, deadline=None)
@given(clean_runs(), st.booleans())
def test_generated_clean_histories_pass(
    run: tuple[History, dict[str, list[tuple[int, MsgId | None]]]], idempotent: bool
) -> None:
    history, final = run
    v = check(history, final_reads=final, idempotent=idempotent)
    assert v.ok, v.summary()
    assert v.counts.sends_invoked == history.count("send", "invoke")
    assert v.counts.sends_unresolved == 0
    assert set(v.by_kind) <= set(VIOLATION_KINDS)


@settings(max_examples=100, deadline=None)
@given(clean_runs(), st.data())
def test_dropping_one_acked_message_from_the_final_read_is_caught(
    run: tuple[History, dict[str, list[tuple[int, MsgId | None]]]], data: st.DataObject
) -> None:
    history, final = run
    acked = {(e.topic, e.msg) for e in history.events if e.kind == "send" and e.phase == "ok"}
    candidates = [
        (topic, i)
        for topic, entries in final.items()
        for i, (_, m) in enumerate(entries)
        if (topic, m) in acked
    ]
    assume(candidates)
    topic, index = data.draw(st.sampled_from(candidates))
    _, dropped = final[topic].pop(index)

    v = check(history, final_reads=final)

    assert not v.ok
    assert any(str(dropped) in line for line in v.by_kind.get("lost", [])), v.summary()


# ------------------------------------------------------------------------------ deliveries (retention)


def test_an_acknowledged_message_a_subscription_never_got_is_undelivered() -> None:
    """Where retention cuts the history the final read cannot show a loss: the scenario checks
    instead that every subscription received every acknowledged message (tests/fault/scenarios.py)."""
    from tests.fault.scenarios import undelivered

    sim = Sim()
    for seq in range(1, 5):
        sim.send("producer-1", seq)
    sim.send("producer-1", 5, outcome="info", stored=False)  # outcome unknown, never delivered: not required
    sim.consume(T, "shared")
    assert undelivered(sim.history, ["shared"], {}) == []

    sim.consume(T, "excl")
    sim.history = History(e for e in sim.history.events if not (e.subscription == "excl" and e.offset == 2))
    missing = undelivered(sim.history, ["shared", "excl"], {})
    assert missing == [f"{T} excl: {MsgId('producer-1', 3)} (acked at offset 2)"]
    assert undelivered(sim.history, ["shared", "excl"], {T: [(2, 3)]}) == [], "inside an accepted gap"


# ------------------------------------------------------------------------------ compacted reads


def test_a_compacted_read_must_end_each_key_at_its_newest_acknowledged_send() -> None:
    """tests/fault/scenarios.py's check of a compacted read: every key's last value read is its
    newest acknowledged send, or a newer one whose outcome was unknown; nothing read was not sent."""
    from tests.fault.scenarios import compaction_problems

    def key(process: str, seq: int) -> str:
        return f"{process}-{seq % 3}"

    sim = Sim()
    for seq in range(1, 10):
        sim.send("producer-1", seq)
    late = sim.send("producer-1", 10, outcome="info", stored=True)  # key 1: stored, not acknowledged
    newest = {seq % 3: seq for seq in range(1, 10)}  # 7, 8, 9 by key 1, 2, 0
    log = sim.final()[T]
    view = [(o, m) for o, m in log if m is not None and m.seq in (8, 9, 10)]
    assert compaction_problems(sim.history, {T: view}, key) == [], (
        "key 1 ends at an unacknowledged newer send"
    )

    stale = [(o, m) for o, m in log if m is not None and m.seq in (4, 8, 9)]  # key 1 at #4, acked #7
    assert compaction_problems(sim.history, {T: stale}, key) == [
        f"{T} key producer-1-1: the compacted read ends at send #4, older than acknowledged #{newest[1]}"
    ]
    missing = [(o, m) for o, m in view if m is not late and m.seq != 9]
    assert compaction_problems(sim.history, {T: missing}, key) == [
        f"{T} key producer-1-0: newest acknowledged send #9 missing from the compacted read",
        f"{T} key producer-1-1: newest acknowledged send #7 missing from the compacted read",
    ]
    phantom = [*view, (20, MsgId("producer-9", 1))]
    assert compaction_problems(sim.history, {T: phantom}, key) == [
        f"{T}: offset 20 holds {MsgId('producer-9', 1)}, which was never sent"
    ]
    backwards = [view[1], view[0], view[2]]
    assert compaction_problems(sim.history, {T: backwards}, key)[0].startswith(
        f"{T}: offset {view[0][0]} read after"
    )
