"""Fault scenarios over a :class:`~tests.fault.cluster.FaultCluster`, each judged by the history checker.

A run of one scenario (:func:`run_scenario`):

1. create two reliable topics (one ``fsync``, one ``cloud``) and put both on one broker, the
   *victim* of broker faults;
2. start the :class:`~tests.fault.workload.Workload` (4 producers, 4 consumers on a shared and an
   exclusive subscription), recording every operation, and sample the subscriptions' durable
   cursors from etcd meanwhile;
3. inject the fault, heal it, and wait until acknowledgements flow again on every topic;
4. stop the workload, read each topic once more from the earliest offset, and check:
   the history (:func:`tests.fault.history.check`: no acknowledged message lost, no phantom, order,
   unique and gap-free offsets, duplicates counted, acks never regress), the log records' chain in
   etcd (:func:`check_log_chain`: each stint starts exactly where the previous one ended, so no two
   brokers ever wrote the same offsets), and that every owner write of a load manager carried the
   term that led at that revision.

Faults (:data:`SCENARIOS`): kill -9 of the owner; SIGSTOP past the lease; a partition between the
owner and etcd; an etcd restart; etcd frozen (SIGSTOP) past every lease's TTL, every broker
stopping itself and restarted by a supervisor; object storage refusing then timing out; the WAL disk full; a topic
move and a broker drain under load; the owner paused in the middle of a move or of a drain; a
graceful stop (SIGTERM: the lame duck hands the topics over); a load manager paused and resumed; and
the owner's machine lost (broker and uploader killed) with an operator's recorded, unclean takeover
(its accepted gap is the only loss the checker allows); and retention deleting the topics' oldest
history from object storage while the owner is killed and the topics move (their final read
starts where retention left the history; every subscription must have received every
acknowledged message: :func:`undelivered`).

Faults on top of faults: the broker taking over is killed in the middle of its takeover
(``cascade_kill9``) or cut off from etcd while the first owner is frozen (``takeover_cut_from_etcd``);
a move's destination is killed while loading the topic (``move_target_killed``); etcd restarts in
the middle of a takeover (``etcd_restart_during_takeover``); the broker taking over freezes past
its lease (``new_owner_paused``); the owner is killed in the middle of its graceful stop
(``kill9_during_graceful_stop``); object storage is down while the owner dies
(``object_store_down_during_takeover``); the owner dies with its WAL disk full
(``disk_full_then_kill9``); the owner dies while its WAL uploader is frozen
(``uploader_paused_during_takeover``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from danube_common.leadership import read_leaders
from danube_common.log_state import LogState
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_sdk import SubType
from tests.fault.cluster import LEADERSHIP_TTL_S, REGISTRATION_TTL_S, FaultCluster
from tests.fault.history import History, MsgId, Verdict, check, delivered_offsets
from tests.fault.workload import DEFAULT_SUBSCRIPTIONS, Workload, final_read
from tests.support import unique, wait_until
from tests.unit.wal_uploader.helpers import UploaderClient

log = logging.getLogger(__name__)


@dataclass
class Ctx:
    """What a scenario body gets."""

    fc: FaultCluster
    res: Resources
    topics: list[str]
    victim: str
    rng: random.Random
    workload: Workload
    notes: list[str] = field(default_factory=list)

    async def acks_flow(self, n: int = 200, timeout_s: float = 60.0) -> None:
        """Wait until every topic has ``n`` more acknowledged sends than now."""
        base = self.workload.acked_per_topic()
        await wait_until(
            lambda: all(self.workload.acked_per_topic().get(t, 0) >= base.get(t, 0) + n for t in self.topics),
            timeout_s=timeout_s,
            interval_s=0.1,
            what=f"{n} more acknowledged sends on every topic",
        )

    async def owner(self, topic: str) -> str | None:
        return await self.fc.owner(self.res, topic)

    async def acks_stalled(self, *, quiet_s: float, timeout_s: float = 30.0) -> None:
        """Wait until no topic has had a new acknowledged send for ``quiet_s``."""
        last = self.workload.acked_per_topic()
        changed = time.monotonic()

        def quiet() -> bool:
            nonlocal last, changed
            now = self.workload.acked_per_topic()
            if now != last:
                last, changed = now, time.monotonic()
            return time.monotonic() - changed >= quiet_s

        await wait_until(quiet, timeout_s=timeout_s, interval_s=0.05, what=f"acks stalled for {quiet_s}s")

    async def logs_taken_over(self, timeout_s: float = 60.0, *, away_from: set[str] | None = None) -> None:
        """Wait until another broker (not the victim, nor any of ``away_from``) holds the log of
        every topic (an open stint of its own in etcd): a frozen broker woken after this finds its
        lease, its ownership and its logs gone."""
        gone = {self.victim, *(away_from or ())}

        async def taken() -> bool:
            states = [await _state(self.res, t) for t in self.topics]
            return all(s is not None and s.open and s.writer not in gone for s in states)

        await wait_until(taken, timeout_s=timeout_s, interval_s=0.1, what="the logs taken over")

    async def first_described(self, topic: str) -> int:
        """Where the topic's history in object storage starts (0: nothing uploaded or cut yet)."""
        return await _first_described(self.res, topic)

    async def history_cut(self, past: dict[str, int], timeout_s: float = 60.0) -> dict[str, int]:
        """Wait until retention deleted uploaded history of every topic past ``past[topic]``."""
        await wait_until(
            lambda: _all_past(self.res, past),
            timeout_s=timeout_s,
            interval_s=0.2,
            what=f"retention deleting uploaded history past {past}",
        )
        return {t: await self.first_described(t) for t in self.topics}

    async def owned_elsewhere(self, topic: str, than: str, timeout_s: float = 60.0) -> str:
        async def moved() -> str | None:
            o = await self.owner(topic)
            return o if o is not None and o != than else None

        return str(
            await wait_until(moved, timeout_s=timeout_s, interval_s=0.1, what=f"{topic} owned elsewhere")
        )


Scenario = Callable[[Ctx], Awaitable[None]]


@contextlib.asynccontextmanager
async def uploader_errors(fc: FaultCluster, broker: str) -> AsyncIterator[Callable[[int], Awaitable[bool]]]:
    """``errors(n)``: has broker's WAL uploader counted ``n`` more failed uploads than on entry?"""
    client = UploaderClient(fc.c.uploaders[broker].addr)
    try:
        base = (await client.status()).upload_errors_total

        async def errors(n: int) -> bool:
            return (await client.status()).upload_errors_total >= base + n

        yield errors
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- the faults
async def kill9_owner(ctx: Ctx) -> None:
    await ctx.fc.kill(ctx.victim)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def pause_past_lease(ctx: Ctx) -> None:
    name = f"broker-{ctx.victim}"
    ctx.fc.pause(name)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.logs_taken_over()  # stay frozen past the takeover of its logs
    ctx.fc.resume(name)  # it wakes with its lease gone: it must not acknowledge anything, and exits
    await ctx.acks_flow()


async def etcd_partition(ctx: Ctx) -> None:
    """The owner loses etcd while its clients still reach it."""
    ctx.fc.cut_from_etcd(ctx.victim)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.acks_flow()
    ctx.fc.reconnect_to_etcd(ctx.victim)


async def etcd_restart(ctx: Ctx) -> None:
    await ctx.fc.restart_etcd(down_s=1.5)
    await ctx.acks_flow()


async def etcd_pause(ctx: Ctx) -> None:
    """etcd frozen (SIGSTOP) past every lease's TTL, then thawed. Owners must stop acknowledging
    once they cannot be sure of their lease; on waking etcd may expire the leases before any
    renewal is read, so brokers lose their registrations and topics at once and must come back
    without two of them writing one log. A broker that lost its lease stops itself; a supervisor
    (here as in ``danube-local up``) starts it again."""
    ctx.fc.pause_etcd()
    try:
        await ctx.acks_stalled(quiet_s=1.0)  # nobody may be sure of a lease: nothing is acknowledged
        await asyncio.sleep(REGISTRATION_TTL_S + 1.0)  # the fault's length: every lease past its TTL
    finally:
        ctx.fc.resume_etcd()
    async with ctx.fc.supervised() as restarted:
        await ctx.acks_flow()

        # Every broker whose lease expired stops (its lame duck takes a few seconds) and is
        # started again by the supervisor: done once every broker runs and is registered and
        # active in etcd.
        await wait_until(
            lambda: ctx.fc.is_whole(ctx.res),
            timeout_s=60,
            interval_s=0.2,
            what="every broker running and registered again",
        )
    ctx.notes.append(f"restarted after the pause: {', '.join(sorted(restarted)) or 'nothing'}")


async def object_store_errors(ctx: Ctx) -> None:
    """S3 refuses connections, then swallows requests; each phase lasts until the victim's
    uploader counted an upload failed by it (a refused one, then one timed out)."""
    async with uploader_errors(ctx.fc, ctx.victim) as errors:
        ctx.fc.object_store("refuse")
        await wait_until(lambda: errors(1), timeout_s=30, interval_s=0.1, what="a refused upload counted")
        ctx.fc.object_store("blackhole")
        await wait_until(lambda: errors(2), timeout_s=30, interval_s=0.1, what="a timed-out upload counted")
    ctx.fc.object_store("pass")
    await ctx.acks_flow()


async def disk_full(ctx: Ctx) -> None:
    if not ctx.fc.can_fill_disk(ctx.victim):
        ctx.notes.append("the WAL disk is not a tmpfs here (not root): the disk stayed free")
        await ctx.acks_flow()
        return
    await asyncio.to_thread(ctx.fc.fill_disk, ctx.victim)
    await ctx.acks_stalled(quiet_s=1.0)  # the full disk bites: nothing is acknowledged any more
    ctx.fc.free_disk(ctx.victim)
    await ctx.acks_flow()


async def move_under_load(ctx: Ctx) -> None:
    for topic in ctx.topics:
        await ctx.fc.admin("topics", "move", topic)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, ctx.victim)
    await ctx.acks_flow()


async def drain_under_load(ctx: Ctx) -> None:
    await ctx.fc.admin("brokers", "drain", ctx.victim)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, ctx.victim)
    await ctx.acks_flow()
    await ctx.fc.admin("brokers", "activate", ctx.victim)


async def pause_during_move(ctx: Ctx) -> None:
    """The owner freezes right as a move of its topics starts: the move cannot finish; the topics
    come back through the dead-broker path instead."""
    name = f"broker-{ctx.victim}"
    await ctx.fc.admin("topics", "move", ctx.topics[0])
    ctx.fc.pause(name)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.logs_taken_over()
    ctx.fc.resume(name)
    await ctx.acks_flow()


async def pause_during_drain(ctx: Ctx) -> None:
    """The owner freezes right as an operator drains it."""
    name = f"broker-{ctx.victim}"
    await ctx.fc.admin("brokers", "drain", ctx.victim)
    ctx.fc.pause(name)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.logs_taken_over()
    ctx.fc.resume(name)
    await ctx.acks_flow()
    await ctx.fc.admin("brokers", "activate", ctx.victim)


async def graceful_stop(ctx: Ctx) -> None:
    """SIGTERM of the owner: its lame duck hands every topic over while it still serves it."""
    await asyncio.to_thread(ctx.fc.c.stop_broker, ctx.victim)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, ctx.victim)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def load_manager_pause(ctx: Ctx) -> None:
    """The active load manager freezes past its leadership, the owner broker dies meanwhile (the
    standby must re-place its topics), then the old leader wakes: none of its writes may land."""
    leader = (await read_leaders(ctx.res.store, ctx.res.keys)).get(LOAD_MANAGER_ROLE)
    assert leader is not None, "no load manager leads"
    name = next(s.name for s in ctx.fc.c.load_managers if s.name.endswith(leader.candidate_id.split("-")[-1]))
    ctx.fc.pause(name)

    async def standby_leads() -> bool:
        now = (await read_leaders(ctx.res.store, ctx.res.keys)).get(LOAD_MANAGER_ROLE)
        return now is not None and now.term > leader.term

    # Frozen past its leadership: the standby has been elected (a term after the frozen one's).
    await wait_until(standby_leads, timeout_s=LEADERSHIP_TTL_S + 30, interval_s=0.1, what="the standby leads")
    await ctx.fc.kill(ctx.victim)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    ctx.fc.resume(name)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def machine_lost(ctx: Ctx) -> None:
    """Broker and uploader are gone with their disk: the topics wait (no start offset is ever
    guessed) until an operator forces the takeover, accepting the loss of what was not uploaded."""
    uploader = ctx.fc.c.uploaders[ctx.victim]
    await ctx.fc.kill(ctx.victim)
    ctx.fc.c.signal(uploader.name, 9)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    before = ctx.workload.acked_per_topic()
    await asyncio.sleep(REGISTRATION_TTL_S + 2.0)
    fsync_topic = ctx.topics[0]
    stuck = ctx.workload.acked_per_topic().get(fsync_topic, 0) - before.get(fsync_topic, 0)
    ctx.notes.append(f"acks on the fsync topic while waiting for the lost broker: {stuck}")
    assert stuck == 0, "an fsync topic of a lost broker must wait for an explicit decision"
    for topic in ctx.topics:
        state = await _state(ctx.res, topic)
        if state is not None and state.open and state.writer == ctx.victim:
            out = await ctx.fc.admin(
                "topics", "force-takeover", topic, "--accept-loss", "--reason", "fault test: machine lost"
            )
            ctx.notes.append(out.strip())
    await ctx.acks_flow()
    # The loss is surfaced: in the topic's stats, and to the consumers (their SDK logs and lists it).
    stats = json.loads(await ctx.fc.admin("-o", "json", "topics", "stats", fsync_topic))
    assert stats["accepted_gaps"], stats
    await wait_until(
        lambda: any(t == fsync_topic for _, t in ctx.workload.skipped_now()),
        timeout_s=30,
        what="consumers told about the skipped offsets",
    )
    await asyncio.to_thread(ctx.fc.c.restart, uploader.name)
    await ctx.fc.restart(ctx.victim)


async def retention_under_faults(ctx: Ctx) -> None:
    """The topics keep :data:`RETENTION_SIZE_BYTES` of acknowledged history. A subscription that
    received nothing yet (:data:`HELD`) holds it all back until three segments are uploaded
    (retention deleting them anyway would show as messages it never gets); released, it reads
    them from S3. Then retention deletes the oldest objects on the victim, which is killed; the
    new owner deletes more; the topics move under load, and the next owner deletes more again."""
    await wait_until(
        lambda: _uploaded_at_least(ctx.res, ctx.topics, 3),
        timeout_s=60,
        interval_s=0.2,
        what="three uploaded segments on every topic",
    )
    held = {t: await ctx.first_described(t) for t in ctx.topics}
    ctx.notes.append(f"history start while a subscription held it: {held}")
    ctx.workload.release_held()
    cut = await ctx.history_cut({t: 0 for t in ctx.topics})
    ctx.notes.append(f"history cut by the first owner: {cut}")
    await ctx.fc.kill(ctx.victim)
    owners = {t: await ctx.owned_elsewhere(t, ctx.victim) for t in ctx.topics}  # not always the same one
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)
    cut = await ctx.history_cut(cut)
    ctx.notes.append(f"history cut after the takeover: {cut}")
    for topic in ctx.topics:
        await ctx.fc.admin("topics", "move", topic)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, owners[topic])
    await ctx.acks_flow()
    cut = await ctx.history_cut(cut)
    ctx.notes.append(f"history cut after the move: {cut}")


# ---------------------------------------------------------------------- faults on top of faults
async def cascade_kill9(ctx: Ctx) -> None:
    """The owner is killed, and so is the broker taking its topics over, the moment it owns one
    (its takeover under way: the log's tail fetched from the first owner's uploader, its stint
    being opened). The third broker takes over from both."""
    await ctx.fc.kill(ctx.victim)
    second = await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.fc.kill(second)
    dead = {ctx.victim, second}
    owners = {t: await _owned_outside(ctx, t, dead) for t in ctx.topics}
    ctx.notes.append(f"killed {ctx.victim}, then {second} taking over; now owned by {owners}")
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)
    await ctx.fc.restart(second)


async def takeover_cut_from_etcd(ctx: Ctx) -> None:
    """The owner freezes past its lease; the broker taking over is cut off from etcd as soon as it
    owns a topic; the third takes over. Then the frozen owner wakes (its lease, ownership and logs
    gone: it must acknowledge nothing) and the cut one is reconnected."""
    name = f"broker-{ctx.victim}"
    ctx.fc.pause(name)
    second = await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    ctx.fc.cut_from_etcd(second)
    owners = {t: await _owned_outside(ctx, t, {ctx.victim, second}) for t in ctx.topics}
    ctx.notes.append(f"froze {ctx.victim}, cut {second} from etcd; now owned by {owners}")
    ctx.fc.resume(name)
    await ctx.acks_flow()
    ctx.fc.reconnect_to_etcd(second)


async def move_target_killed(ctx: Ctx) -> None:
    """A move under load whose destination is killed as soon as it owns the topic (loading it):
    the topic is placed again, on a live broker (the former owner included)."""
    target = next(b for b in ctx.fc.running_brokers() if b != ctx.victim)
    topic = ctx.topics[0]
    await ctx.fc.move_topic(topic, to=target)
    await wait_until(
        lambda: _is(ctx.owner(topic), target),
        timeout_s=60,
        interval_s=0.05,
        what=f"{topic} moved to {target}",
    )
    await ctx.fc.kill(target)
    owner = await _owned_outside(ctx, topic, {target})
    ctx.notes.append(f"moved to {target}, killed it; now owned by {owner}")
    await ctx.acks_flow()
    await ctx.fc.restart(target)


async def etcd_restart_during_takeover(ctx: Ctx) -> None:
    """The owner is killed; etcd restarts the moment another broker owns its topic (the takeover's
    etcd writes meet a restarting etcd)."""
    await ctx.fc.kill(ctx.victim)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.fc.restart_etcd(down_s=1.5)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def new_owner_paused(ctx: Ctx) -> None:
    """The owner is killed; the broker taking over freezes past its lease the moment it owns a
    topic; the third takes over from both. The frozen one then wakes with its lease, ownership
    and logs gone: it must acknowledge nothing."""
    await ctx.fc.kill(ctx.victim)
    second = await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    name = f"broker-{second}"
    ctx.fc.pause(name)
    owners = {t: await _owned_outside(ctx, t, {ctx.victim, second}) for t in ctx.topics}
    await ctx.logs_taken_over(away_from={second})
    ctx.notes.append(f"killed {ctx.victim}, froze {second} taking over; now owned by {owners}")
    ctx.fc.resume(name)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def kill9_during_graceful_stop(ctx: Ctx) -> None:
    """SIGTERM of the owner, then kill -9 once its lame duck handed the first topic over: the
    other topic's hand-over may be under way, and what the lame duck had not handed over comes
    back through the dead-broker path."""
    ctx.fc.c.signal(f"broker-{ctx.victim}", signal.SIGTERM)
    await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
    await ctx.fc.kill(ctx.victim)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, ctx.victim)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def object_store_down_during_takeover(ctx: Ctx) -> None:
    """Object storage refuses, then the owner is killed: its uploader records where the log
    ends (etcd works) but cannot ship it; the new owner continues from the recorded end, and the
    killed owner's log reaches object storage once it is back (the final read needs it)."""
    async with uploader_errors(ctx.fc, ctx.victim) as errors:
        ctx.fc.object_store("refuse")
        await ctx.fc.kill(ctx.victim)
        await ctx.owned_elsewhere(ctx.topics[0], ctx.victim)
        await wait_until(lambda: errors(1), timeout_s=30, interval_s=0.1, what="a refused upload counted")
    ctx.fc.object_store("pass")
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


async def disk_full_then_kill9(ctx: Ctx) -> None:
    """The owner's WAL disk fills up (acknowledgements stall; the last frame may be torn), and
    the owner is killed there: its uploader finds the intact end of the log on the full disk and
    records it; the new owner continues from it; the owner restarts on the freed disk."""
    if not ctx.fc.can_fill_disk(ctx.victim):
        ctx.notes.append("the WAL disk is not a tmpfs here (not root): the disk stayed free")
        await ctx.acks_flow()
        return
    await asyncio.to_thread(ctx.fc.fill_disk, ctx.victim)
    await ctx.acks_stalled(quiet_s=1.0)
    await ctx.fc.kill(ctx.victim)
    for topic in ctx.topics:
        await ctx.owned_elsewhere(topic, ctx.victim)
    await ctx.acks_flow()
    ctx.fc.free_disk(ctx.victim)
    await ctx.fc.restart(ctx.victim)


async def uploader_paused_during_takeover(ctx: Ctx) -> None:
    """The owner is killed while its WAL uploader is frozen, past the uploader's own
    registration: nobody records where the log ends, so the ``fsync`` topic waits (no offset is
    guessed) until the uploader wakes and records it."""
    uploader = ctx.fc.c.uploaders[ctx.victim]
    fsync_topic = ctx.topics[0]
    ctx.fc.pause(uploader.name)
    await ctx.fc.kill(ctx.victim)
    await ctx.owned_elsewhere(fsync_topic, ctx.victim)
    before = ctx.workload.acked_per_topic().get(fsync_topic, 0)
    await asyncio.sleep(UPLOADER_PAUSE_S)  # the fault's length, once the topic is owned elsewhere
    stuck = ctx.workload.acked_per_topic().get(fsync_topic, 0) - before
    ctx.notes.append(f"acks on the fsync topic while the uploader was frozen: {stuck}")
    assert stuck == 0, "the fsync topic continued before the killed owner's log end was recorded"
    ctx.fc.resume(uploader.name)
    await ctx.acks_flow()
    await ctx.fc.restart(ctx.victim)


#: How long ``uploader_paused_during_takeover`` keeps the uploader frozen once the topic has a
#: new owner (it was frozen since before the kill: longer than its registration TTL in all).
UPLOADER_PAUSE_S = 2.0


async def _owned_outside(ctx: Ctx, topic: str, brokers: set[str], timeout_s: float = 60.0) -> str:
    """Wait until ``topic``'s owner is a broker not in ``brokers``; return it."""

    async def placed() -> str | None:
        o = await ctx.owner(topic)
        return o if o is not None and o not in brokers else None

    return str(
        await wait_until(
            placed,
            timeout_s=timeout_s,
            interval_s=0.1,
            what=f"{topic} owned by a broker not in {sorted(brokers)}",
        )
    )


#: Scenarios whose topics keep only this much acknowledged history (the others keep an hour).
RETENTION_SIZE_BYTES: dict[str, int] = {"retention_under_faults": 64 * 1024}
#: Their extra subscription, which receives nothing until the scenario releases it.
HELD = (("held-sub", SubType.EXCLUSIVE),)
#: Their sends per second per producer (segments fill faster: a shorter run).
RETENTION_RATE_PER_PRODUCER_S = 400.0
#: Scenarios whose topics are compacted by their owner (the ``compaction_threshold_bytes``
#: policy) and whose sends carry routing keys (:func:`compaction_key`); a compacted read of each
#: topic at the end must hold every key's newest acknowledged value (:func:`compaction_problems`).
COMPACTION_THRESHOLD_BYTES: dict[str, int] = {"retention_under_faults": 16 * 1024}
#: A producer's first sends each have a key of their own (written once, early: once retention
#: deleted them, only the compacted view has them); its later sends cycle through a few keys.
COLD_SENDS = 100
HOT_KEYS = 8


def compaction_key(process: str, seq: int) -> str:
    return f"{process}-cold-{seq}" if seq <= COLD_SENDS else f"{process}-hot-{seq % HOT_KEYS}"


def compaction_problems(
    history: History,
    reads: dict[str, list[tuple[int, MsgId | None]]],
    key_for: Callable[[str, int], str | None],
) -> list[str]:
    """A compacted read of each topic (``reads``: offset order) against the history: for every
    key, the last value read must be the key's newest acknowledged send or a newer send of it
    (a send whose outcome was unknown may have been stored); every value read was sent (no
    phantom), once per offset, offsets increasing. One line per problem."""
    newest_acked: dict[tuple[str, str], int] = {}
    sent: set[tuple[str, MsgId]] = set()
    for e in history.events:
        if e.kind != "send" or e.msg is None:
            continue
        if e.phase == "invoke":
            sent.add((e.topic, e.msg))
        elif e.phase == "ok":
            key = key_for(e.msg.producer, e.msg.seq)
            if key is not None:
                k = (e.topic, key)
                newest_acked[k] = max(newest_acked.get(k, 0), e.msg.seq)
    out: list[str] = []
    last: dict[tuple[str, str], int] = {}
    for topic, entries in reads.items():
        previous = -1
        for offset, msg in entries:
            if offset <= previous:
                out.append(f"{topic}: offset {offset} read after {previous}")
            previous = offset
            if msg is None or (topic, msg) not in sent:
                out.append(f"{topic}: offset {offset} holds {msg}, which was never sent")
                continue
            key = key_for(msg.producer, msg.seq)
            if key is not None:
                last[(topic, key)] = msg.seq
    for (topic, key), seq in sorted(newest_acked.items()):
        got = last.get((topic, key))
        if got is None:
            out.append(f"{topic} key {key}: newest acknowledged send #{seq} missing from the compacted read")
        elif got < seq:
            out.append(
                f"{topic} key {key}: the compacted read ends at send #{got}, older than acknowledged #{seq}"
            )
    return out


SCENARIOS: dict[str, Scenario] = {
    "kill9_owner": kill9_owner,
    "pause_past_lease": pause_past_lease,
    "etcd_partition": etcd_partition,
    "etcd_restart": etcd_restart,
    "etcd_pause": etcd_pause,
    "object_store_errors": object_store_errors,
    "disk_full": disk_full,
    "move_under_load": move_under_load,
    "drain_under_load": drain_under_load,
    "pause_during_move": pause_during_move,
    "pause_during_drain": pause_during_drain,
    "graceful_stop": graceful_stop,
    "load_manager_pause": load_manager_pause,
    "machine_lost": machine_lost,
    "retention_under_faults": retention_under_faults,
    "cascade_kill9": cascade_kill9,
    "takeover_cut_from_etcd": takeover_cut_from_etcd,
    "move_target_killed": move_target_killed,
    "etcd_restart_during_takeover": etcd_restart_during_takeover,
    "new_owner_paused": new_owner_paused,
    "kill9_during_graceful_stop": kill9_during_graceful_stop,
    "object_store_down_during_takeover": object_store_down_during_takeover,
    "disk_full_then_kill9": disk_full_then_kill9,
    "uploader_paused_during_takeover": uploader_paused_during_takeover,
}


#: Run by the soak only, not by CI's one pass over the scenarios (CI's time budget): each pairs
#: two faults that CI covers apart (a frozen broker and a kill -9 in ``cascade_kill9`` and
#: ``pause_past_lease``; object storage errors and kill -9; a full disk and kill -9).
SOAK_ONLY = frozenset({"new_owner_paused", "object_store_down_during_takeover", "disk_full_then_kill9"})


# ---------------------------------------------------------------------- a run
@dataclass
class Outcome:
    scenario: str
    verdict: Verdict
    chain_violations: list[str]
    #: How each topic's stints ended, in order (e.g. ["hand_over"], ["uploader"], ["forced"]).
    closes: dict[str, list[str]]
    term_writes_checked: int
    longest_ack_gap_s: dict[str, float]
    lost_in_accepted_gaps: int
    took_s: float
    notes: list[str]
    #: Acknowledged messages some subscription never received (checked where retention cuts
    #: the history: the final read cannot show those).
    undelivered: list[str] = field(default_factory=list)
    #: What a compacted read of the topics got wrong (compacted scenarios only).
    compaction: list[str] = field(default_factory=list)
    #: Messages the compacted reads received, per topic (compacted scenarios only).
    compacted_reads: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.chain_violations and not self.undelivered and not self.compaction

    def summary(self) -> str:
        gaps = ", ".join(f"{t.rsplit('/', 1)[-1]} {s:.2f}s" for t, s in self.longest_ack_gap_s.items())
        lines = [
            f"== {self.scenario}: {'OK' if self.ok else 'FAILED'} in {self.took_s:.0f}s; longest pause in acks: {gaps}",
            self.verdict.summary(),
        ]
        if self.chain_violations:
            lines.append("log record chain violations:")
            lines += [f"  {v}" for v in self.chain_violations[:20]]
        if self.undelivered:
            lines.append(
                f"undelivered: {len(self.undelivered)} acknowledged message(s) a subscription never got:"
            )
            lines += [f"  {v}" for v in self.undelivered[:20]]
        if self.compacted_reads:
            lines.append(f"compacted reads: {self.compacted_reads} message(s)")
        if self.compaction:
            lines.append(f"compacted view: {len(self.compaction)} problem(s):")
            lines += [f"  {v}" for v in self.compaction[:20]]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


async def _described(res: Resources, topic: str) -> list[int]:
    """The start offsets of the topic's uploaded segments (their descriptors in etcd)."""
    kvs, _ = await res.store.get_prefix(res.keys.segments_prefix(TopicName.parse(topic)))
    return [int(kv.json()["start_offset"]) for kv in kvs]


async def _first_described(res: Resources, topic: str) -> int:
    return min(await _described(res, topic), default=0)


async def _uploaded_at_least(res: Resources, topics: list[str], n: int) -> bool:
    for t in topics:
        if len(await _described(res, t)) < n:
            return False
    return True


async def _all_past(res: Resources, past: dict[str, int]) -> bool:
    for t, at in past.items():
        if await _first_described(res, t) <= at:
            return False
    return True


async def _settled_history_start(
    res: Resources, topics: list[str], *, quiet_s: float = 3.0
) -> dict[str, int]:
    """Each topic's first described offset once retention stopped moving it for ``quiet_s``
    (nothing is written any more: what the limits keep stays)."""
    last = {t: await _first_described(res, t) for t in topics}
    since = time.monotonic()

    async def settled() -> bool:
        nonlocal last, since
        now = {t: await _first_described(res, t) for t in topics}
        if now != last:
            last, since = now, time.monotonic()
        return time.monotonic() - since >= quiet_s

    await wait_until(settled, timeout_s=60, interval_s=0.2, what="retention settled")
    return last


def undelivered(
    history: History, subscriptions: list[str], gaps: dict[str, list[tuple[int, int]]]
) -> list[str]:
    """Every acknowledged send (outside accepted gaps) must have been delivered on every
    subscription of its topic: one line per (topic, subscription, message) that was not."""
    acked: dict[str, dict[object, int | None]] = {}
    got: dict[tuple[str, str], set[object]] = {}
    for e in history.events:
        if e.kind == "send" and e.phase == "ok":
            if not (e.offset is not None and any(a <= e.offset < b for a, b in gaps.get(e.topic, []))):
                acked.setdefault(e.topic, {})[e.msg] = e.offset
        elif e.kind == "deliver" and e.subscription is not None:
            got.setdefault((e.topic, e.subscription), set()).add(e.msg)
    out: list[str] = []
    for topic, msgs in acked.items():
        for sub in subscriptions:
            have = got.get((topic, sub), set())
            out += [f"{topic} {sub}: {m} (acked at offset {o})" for m, o in msgs.items() if m not in have]
    return out


async def _state(res: Resources, topic: str) -> LogState | None:
    kv = await res.store.get(res.keys.storage_state(TopicName.parse(topic)))
    return LogState.from_kv(kv) if kv is not None else None


async def _place_on(ctx_fc: FaultCluster, res: Resources, topics: list[str]) -> str:
    """Put every topic on the owner of the first one; return that broker."""
    owner = await wait_until(
        lambda: ctx_fc.owner(res, topics[0]), timeout_s=30, interval_s=0.1, what=f"{topics[0]} placed"
    )
    for topic in topics[1:]:
        current = await wait_until(
            lambda t=topic: ctx_fc.owner(res, t), timeout_s=30, interval_s=0.1, what=f"{topic} placed"
        )
        if current != owner:
            await ctx_fc.move_topic(topic, to=str(owner))
            await wait_until(
                lambda t=topic: _is(ctx_fc.owner(res, t), owner), timeout_s=40, interval_s=0.1, what="moved"
            )
    return str(owner)


async def _is(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected


async def _sample_cursors(res: Resources, history: History, topics: list[str], stop: asyncio.Event) -> None:
    subs = [name for name, _ in DEFAULT_SUBSCRIPTIONS]
    while not stop.is_set():
        for topic in topics:
            t = TopicName.parse(topic)
            for sub in subs:
                with contextlib.suppress(Exception):
                    value = await res.store.get_json(res.keys.subscription_cursor(t, sub))
                    if isinstance(value, dict) and "cursor" in value:
                        history.cursor(topic, sub, int(value["cursor"]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def _expected_reads(history: History, gaps: dict[str, list[tuple[int, int]]]) -> dict[str, int]:
    """Acknowledged messages per topic that a final read must find (those acked at an offset an
    accepted gap gave up are not expected; one acked without an offset: where it was delivered)."""
    delivered = delivered_offsets(history.events)
    seen: dict[str, set[object]] = {}
    for e in history.events:
        if e.kind == "send" and e.phase == "ok":
            at = [e.offset] if e.offset is not None else sorted(delivered.get((e.topic, e.msg), ()))
            lost = bool(at) and all(any(a <= o < b for a, b in gaps.get(e.topic, [])) for o in at)
            if not lost:
                seen.setdefault(e.topic, set()).add(e.msg)
    return {t: len(msgs) for t, msgs in seen.items()}


def check_log_chain(records: dict[str, list[LogState]]) -> list[str]:
    """Each topic's log records, in revision order, form one chain: every stint starts exactly
    where the previous one ended (its close, or what the next writer recorded of it), and a close
    never changes who wrote from where. So no two brokers wrote the same offsets."""
    bad: list[str] = []
    for topic, states in records.items():
        prev: LogState | None = None
        for s in states:
            if prev is None:
                prev = s
                continue
            if s.open:
                if prev.open:
                    recorded = (s.previous or {}).get("next_offset")
                    if recorded != s.start_offset or s.start_offset < prev.start_offset:
                        bad.append(
                            f"{topic}: broker {s.writer} opened at {s.start_offset} over broker {prev.writer}'s open "
                            f"stint from {prev.start_offset} (recorded end {recorded})"
                        )
                elif prev.next_offset != s.start_offset:
                    bad.append(
                        f"{topic}: broker {s.writer} opened at {s.start_offset}, the log ended at {prev.next_offset}"
                    )
            else:
                same = (s.writer, s.epoch, s.start_offset) == (prev.writer, prev.epoch, prev.start_offset)
                if not prev.open or not same:
                    bad.append(
                        f"{topic}: a close of broker {s.writer}'s stint that is not the open one ({prev})"
                    )
                elif s.next_offset is not None and s.next_offset < s.start_offset:
                    bad.append(f"{topic}: broker {s.writer}'s stint closed before its start")
            prev = s
    return bad


async def read_log_chain(res: Resources, topics: list[str]) -> dict[str, list[LogState]]:
    """Every write of the topics' log records, replayed from etcd's history."""
    keys = {res.keys.storage_state(TopicName.parse(t)): t for t in topics}
    out: dict[str, list[LogState]] = {t: [] for t in topics}
    _, now_rev = await res.store.get_prefix(res.keys.storage_state(TopicName.parse(topics[0])))
    async for ev in res.store.watch_prefix(res.keys.root, start_revision=1):  # every event: reaches now_rev
        topic = keys.get(ev.key)
        if topic is not None and ev.kind == "put":
            out[topic].append(LogState.from_json(ev.json(), revision=ev.revision))
        if ev.revision >= now_rev:
            break
    return out


async def run_scenario(
    fc: FaultCluster,
    name: str,
    *,
    seed: int | None = None,
    warmup_acks: int = 400,
    rate_per_producer_s: float = 150.0,
) -> Outcome:
    """Run scenario ``name`` once (see the module docstring); the cluster is whole again after."""
    from tests.e2e.control_plane import history_check  # the load-manager term check

    rng = random.Random(seed)
    t0 = time.monotonic()
    log.info("%s: creating the topics", name)
    tag = name.replace("_", "-")
    topics = [f"/default/{unique(f'{tag}-fsync')}", f"/default/{unique(f'{tag}-cloud')}"]
    retention = RETENTION_SIZE_BYTES.get(name)
    compaction = COMPACTION_THRESHOLD_BYTES.get(name)
    await fc.create_topic(topics[0], durability="fsync", retention_size_bytes=retention)
    await fc.create_topic(topics[1], durability="cloud", retention_size_bytes=retention)
    history = History()
    workload = Workload(
        fc.service_url,
        topics,
        history=history,
        producers=4,
        consumers=4,
        rate_per_producer_s=rate_per_producer_s if retention is None else RETENTION_RATE_PER_PRODUCER_S,
        payload_bytes=100,
        send_timeout_s=120,
        operation_timeout_s=120,
        held=HELD if retention is not None else (),
        key_for=compaction_key if compaction is not None else None,
    )
    stop_sampling = asyncio.Event()
    async with fc.etcd() as res:
        if compaction is not None:
            for t in topics:
                await res.update_topic_policies(
                    TopicName.parse(t), {"compaction_threshold_bytes": compaction}
                )
        await workload.start()
        sampler = asyncio.create_task(_sample_cursors(res, history, topics, stop_sampling))
        notes: list[str] = []
        try:
            victim = await _place_on(fc, res, topics)
            log.info("%s: topics %s on broker %s; warming up", name, topics, victim)
            ctx = Ctx(fc, res, topics, victim, rng, workload, notes)
            await ctx.acks_flow(warmup_acks // 2, timeout_s=60)
            log.info("%s: injecting the fault", name)
            await SCENARIOS[name](ctx)
            log.info("%s: healed; waiting for acknowledgements to flow", name)
            await ctx.acks_flow(100, timeout_s=60)
        finally:
            log.info("%s: stopping the workload", name)
            caught_up = await workload.stop(catch_up_timeout_s=60)
            stop_sampling.set()
            await sampler
            await fc.ensure_running()
        log.info("%s: final reads", name)
        if not caught_up:
            notes.append(f"consumers had not caught up when stopped: {workload.lagging()}")
        notes += [f"workload error: {e}" for e in workload.errors]
        allowed: dict[str, list[tuple[int, int]]] = {}
        for t in topics:
            gaps, _ = await res.store.get_prefix(res.keys.storage_gaps_prefix(TopicName.parse(t)))
            allowed[t] = [(int(kv.json()["start_offset"]), int(kv.json()["next_offset"])) for kv in gaps]
        missed: list[str] = []
        if retention is not None:
            # Every subscription got every acknowledged message (what retention deleted, too);
            # the final read starts where retention left the history.
            missed = undelivered(history, [s for s, _ in (*DEFAULT_SUBSCRIPTIONS, *HELD)], allowed)
            starts = await _settled_history_start(res, topics)
            notes.append(f"the history starts at {starts} after retention")
            for t, first in starts.items():
                if first > 0:
                    allowed[t] = [(0, first), *allowed[t]]
        expected = _expected_reads(history, allowed)
        reads = dict(
            zip(
                topics,
                await asyncio.gather(
                    *(
                        final_read(
                            fc.service_url,
                            t,
                            expect_at_least=expected.get(t, 0),
                            timeout_s=60,
                            idle_s=1.5,
                            admin_addr=fc.admin_addr,
                        )
                        for t in topics
                    )
                ),
                strict=True,
            )
        )
        compacted: dict[str, list[tuple[int, MsgId | None]]] = {}
        if compaction is not None:
            for t in topics:
                compacted[t] = await final_read(
                    fc.service_url,
                    t,
                    expect_at_least=0,
                    timeout_s=60,
                    idle_s=1.5,
                    admin_addr=fc.admin_addr,
                    read_compacted=True,
                )
        log.info("%s: checking %d events", name, len(history.events))
        verdict = check(history, final_reads=reads, allowed_gaps=allowed, idempotent=True)
        records = await read_log_chain(res, topics)
        chain = check_log_chain(records)
        closes = {t: [r.closed_by for r in rs if not r.open] for t, rs in records.items()}
        terms = await history_check(res)
    return Outcome(
        scenario=name,
        verdict=verdict,
        chain_violations=chain,
        closes=closes,
        term_writes_checked=terms,
        longest_ack_gap_s=dict(verdict.longest_ack_gap_s_per_topic),
        lost_in_accepted_gaps=verdict.counts.lost_in_allowed_gaps,
        took_s=time.monotonic() - t0,
        notes=notes,
        undelivered=missed,
        compaction=compaction_problems(history, compacted, compaction_key) if compacted else [],
        compacted_reads={t: len(r) for t, r in compacted.items()},
    )
