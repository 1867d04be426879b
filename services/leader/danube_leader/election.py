"""The election, etcd side: campaigns and leader watches on any MetadataStore.

A campaign is one leased key ``/{cluster}/leaders/{role}/{candidate_id}`` created by a
transaction (``create_revision == 0``); the live key with the lowest create_revision leads
and that revision is its term. A waiting campaign follows the role's prefix with a watch
from the revision it read at (no polling) until every key ahead of it is gone.

Each :class:`Campaign` and :class:`LeaderWatch` runs one loop task that it owns; the
:class:`Elections` registry owns them all and ends them at shutdown. A stream's reader stops
its campaign with the synchronous :meth:`Campaign.stop` (safe from gRPC done-callbacks): the
campaign's own task then revokes the lease, so revocation never depends on the reader's task
surviving its cancellation.

The decisions are pure functions at the top of the module (:func:`campaign_view`,
:func:`apply_event`, :func:`choose_ttl_s`, ...), tested in tables without I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from danube_common.aio import cancel_and_wait
from danube_common.errors import (
    AlreadyExists,
    DanubeError,
    InvalidArgument,
    MetadataUnavailable,
    ResourceExhausted,
    ServiceShuttingDown,
)
from danube_common.keys import Keys
from danube_common.leadership import (
    LeaderInfo,
    backoff_delay_s,
    candidate_value,
    leader_of,
    read_leader,
    read_leaders,
)
from danube_common.metadata.lease import KeptLease
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op, WatchCompacted, WatchEvent

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

_NOTHING_SHOWN = object()

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
NAME_RULE = "1-128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit"

#: Backoff of the re-reads after an etcd failure (the watch itself reconnects on its own).
RETRY_BASE_S = 0.05
RETRY_CAP_S = 2.0


# ---------------------------------------------------------------- pure decisions
class UpdateKind(enum.Enum):
    WAITING = "waiting"
    ELECTED = "elected"
    HEARTBEAT = "heartbeat"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class CampaignUpdate:
    """What a campaign tells its candidate (the domain twin of ``CampaignEvent``)."""

    kind: UpdateKind
    #: The candidate's own etcd key.
    key: str
    #: The term, once elected (ELECTED, and HEARTBEAT/LOST after it); 0 before.
    term: int = 0
    #: WAITING: who leads now; ELECTED: the candidate itself.
    leader: LeaderInfo | None = None
    reason: str = ""
    ttl_s: int = 0


def validate_name(what: str, value: str) -> str:
    """A role or candidate id becomes one etcd key segment: refuse anything else."""
    if not NAME_RE.fullmatch(value):
        raise InvalidArgument(f"{what} {value!r} is not allowed: use {NAME_RULE}")
    return value


def choose_ttl_s(requested: int, *, default_s: int, min_s: int, max_s: int) -> int:
    """The lease TTL of a campaign: ``requested``, or the default for 0; refused outside bounds."""
    if requested == 0:
        return default_s
    if not min_s <= requested <= max_s:
        raise InvalidArgument(
            f"ttl_s {requested} is outside this replica's bounds: use {min_s}..{max_s} seconds "
            f"(0 takes the default, {default_s})"
        )
    return requested


def validate_metadata(metadata: Mapping[str, str], *, max_bytes: int) -> dict[str, str]:
    size = sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items())
    if size > max_bytes:
        raise InvalidArgument(
            f"campaign metadata is {size} bytes (keys + values); at most {max_bytes} are allowed"
        )
    if any(not k for k in metadata):
        raise InvalidArgument("campaign metadata has an empty key")
    return dict(metadata)


def is_candidate_key(prefix: str, key: str) -> bool:
    """A key directly under a role's prefix (deeper keys are not campaigns)."""
    return key.startswith(prefix) and len(key) > len(prefix) and "/" not in key[len(prefix) :]


def apply_event(live: Mapping[str, KeyValue], ev: WatchEvent) -> dict[str, KeyValue]:
    """The live keys after one watch event (a new dict; ``live`` is not changed)."""
    out = dict(live)
    if ev.kind == "delete":
        out.pop(ev.key, None)
    else:
        out[ev.key] = KeyValue(ev.key, ev.value, ev.create_revision or ev.revision, ev.revision, 0)
    return out


def campaign_view(
    live: Mapping[str, KeyValue], *, role: str, key: str, term: int
) -> tuple[UpdateKind, LeaderInfo | None]:
    """Where a campaign stands among the role's live keys.

    LOST when its own key is gone or is not the one it created (``term`` is that key's
    create_revision); ELECTED when it has the lowest create_revision; else WAITING behind
    the leader returned.
    """
    mine = live.get(key)
    if mine is None or mine.create_revision != term:
        return UpdateKind.LOST, None
    top = leader_of(live.values())
    assert top is not None  # our own key is live
    info = LeaderInfo.from_kv(role, top)
    return (UpdateKind.ELECTED if top.key == key else UpdateKind.WAITING), info


# ---------------------------------------------------------------- loops
class Latest(Generic[T]):
    """A value that changes; a reader waits for a newer one (intermediate values may be skipped)."""

    def __init__(self) -> None:
        self._value: T | None = None
        self.version = 0
        self._changed = asyncio.Event()

    def set(self, value: T) -> None:
        self._value = value
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def newer_than(self, seen: int, *, timeout_s: float | None) -> tuple[int, T] | None:
        """The newest value if its version is not ``seen``, waiting up to ``timeout_s``;
        None when nothing newer came in time."""
        if self.version == seen:
            changed = self._changed
            try:
                async with asyncio.timeout(timeout_s):
                    await changed.wait()
            except TimeoutError:
                return None
        assert self._value is not None
        return self.version, self._value


async def follow_prefix(
    store: MetadataStore,
    prefix: str,
    on_change: Callable[[dict[str, KeyValue]], R | None],
) -> R:
    """Call ``on_change`` with the live candidate keys under ``prefix`` after the first read
    and after every watch event, until it returns something other than None.

    The watch starts at the revision the read was made at, so no change is missed; a
    compacted watch or an etcd failure re-reads (with backoff) and watches again.
    """
    attempt = 0
    while True:
        try:
            kvs, rev = await store.get_prefix(prefix)
            live = {kv.key: kv for kv in kvs if is_candidate_key(prefix, kv.key)}
            found = on_change(live)
            if found is not None:
                return found
            watch = store.watch_prefix(prefix, start_revision=rev + 1)
            try:
                async for ev in watch:
                    attempt = 0
                    if not is_candidate_key(prefix, ev.key):
                        continue
                    live = apply_event(live, ev)
                    found = on_change(live)
                    if found is not None:
                        return found
            finally:
                aclose = getattr(watch, "aclose", None)
                if aclose is not None:
                    await aclose()
            raise MetadataUnavailable(f"the etcd watch on {prefix} ended")
        except WatchCompacted as exc:
            log.info("watch on %s compacted (%s); reading again", prefix, exc)
            continue
        except DanubeError as exc:
            if not exc.retryable:
                raise
            failure = exc
        delay = backoff_delay_s(attempt, base_s=RETRY_BASE_S, cap_s=RETRY_CAP_S)
        log.warning("following %s failed (%s); again in %.2fs", prefix, failure, delay)
        attempt += 1
        await asyncio.sleep(delay)


async def _first_of(main: asyncio.Task[R], stops: Mapping[asyncio.Event, str]) -> tuple[R | None, str]:
    """Wait for ``main`` or one of ``stops``; cancel what is left. (result, "") when ``main``
    finished (its exception propagates), else (None, the reason of the first stop set)."""
    waiters = {asyncio.create_task(ev.wait(), name=f"wait-{why}"): why for ev, why in stops.items()}
    try:
        done, _ = await asyncio.wait({main, *waiters}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (main, *waiters):
            t.cancel()
        await asyncio.gather(main, *waiters, return_exceptions=True)
    if main in done:
        return main.result(), ""
    for ev, why in stops.items():
        if ev.is_set():
            return None, why
    raise AssertionError("a stop was reported but none is set")


class Campaign:
    """One candidate's campaign: its lease, its key, the loop that follows the role.

    Create with :meth:`Elections.start_campaign`; read :meth:`updates`; end with
    :meth:`stop` (revokes the lease at once) or let it end by itself (LOST).
    """

    def __init__(
        self,
        store: MetadataStore,
        keys: Keys,
        role: str,
        candidate_id: str,
        *,
        ttl_s: int,
        metadata: Mapping[str, str],
        heartbeat_interval_s: float,
        closing: asyncio.Event,
    ) -> None:
        self.role = role
        self.candidate_id = candidate_id
        self.ttl_s = ttl_s
        self.metadata = dict(metadata)
        self.key = keys.leader_candidate(role, candidate_id)
        self.prefix = keys.leader_candidates_prefix(role)
        #: create_revision of our key: the term once elected.
        self.term = 0
        self.elected = False
        self.lease = KeptLease(store, ttl_s, name=f"campaign lease {role}/{candidate_id}")
        self._store = store
        self._heartbeat_s = heartbeat_interval_s
        self._closing = closing
        self._stop = asyncio.Event()
        self._updates: Latest[CampaignUpdate] = Latest()
        self._shown: tuple[UpdateKind, str, int] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        """Grant the lease and create the key (one transaction); then follow the role."""
        await self.lease.start()
        try:
            res = await self._store.txn(
                [Compare.absent(self.key)],
                [
                    Op.put(
                        self.key,
                        candidate_value(self.candidate_id, self.metadata, self.ttl_s),
                        lease=self.lease.lease_id,
                    ),
                    Op.get(self.key),
                ],
                [Op.get(self.key)],
            )
        except BaseException:
            await self.lease.aclose(revoke=True)  # also removes the key if the txn did apply
            raise
        held = res.gets[0] if res.gets else None
        if not res.succeeded or held is None:
            await self.lease.aclose(revoke=True)
            since = f" since revision {held.create_revision}" if held is not None else ""
            raise AlreadyExists(
                f"candidate {self.candidate_id!r} already campaigns for role {self.role!r} "
                f"(key {self.key}{since}): use a unique candidate_id, or retry once the earlier "
                f"campaign's lease ends (at most its ttl_s)"
            )
        self.term = held.create_revision
        log.info(
            "campaign %s/%s started: key revision %d, lease %x, ttl %ds",
            self.role,
            self.candidate_id,
            self.term,
            self.lease.lease_id,
            self.ttl_s,
        )
        self._task = asyncio.create_task(self._run(), name=f"campaign-{self.role}-{self.candidate_id}")

    def stop(self) -> None:
        """Resign (the stream ended): the loop revokes the lease at once. Idempotent, sync."""
        self._stop.set()

    async def wait_closed(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    def _update(self, kind: UpdateKind, leader: LeaderInfo | None = None, reason: str = "") -> CampaignUpdate:
        term = self.term if self.elected else 0
        return CampaignUpdate(kind, self.key, term, leader, reason, self.ttl_s)

    def _observe(self, live: dict[str, KeyValue]) -> str | None:
        kind, leader = campaign_view(live, role=self.role, key=self.key, term=self.term)
        if kind is UpdateKind.LOST:
            return "candidate key deleted (lease expired or revoked, or the key was removed)"
        assert leader is not None
        shown = (kind, leader.key, leader.term)
        if shown != self._shown:
            self._shown = shown
            if kind is UpdateKind.ELECTED:
                self.elected = True
                log.info("%s elected for %s (term %d)", self.candidate_id, self.role, self.term)
            self._updates.set(self._update(kind, leader))
        return None

    async def _run(self) -> None:
        reason = "campaign ended"
        try:
            follow = asyncio.create_task(
                follow_prefix(self._store, self.prefix, self._observe), name=f"follow-{self.key}"
            )
            found, why = await _first_of(
                follow,
                {
                    self._stop: "resigned: the campaign stream ended",
                    self._closing: "the leader replica is shutting down",
                    self.lease.lost: "lease lost: it expired in etcd, or etcd was unreachable for a whole TTL",
                },
            )
            reason = found or why
        except Exception as exc:
            reason = f"the election loop failed: {exc}"
            log.error("campaign %s/%s: %s", self.role, self.candidate_id, reason, exc_info=True)
        finally:
            self._updates.set(self._update(UpdateKind.LOST, reason=reason))
            await self.lease.aclose(revoke=True)
            if self.lease.lost.is_set():
                # Lost to an etcd outage, the lease may still exist (etcd renews leases when
                # it recovers): revoke anyway, best effort, so no ghost key holds the role.
                with contextlib.suppress(DanubeError):
                    await self._store.revoke_lease(self.lease.lease_id)
            level = logging.INFO if self._stop.is_set() or self._closing.is_set() else logging.WARNING
            log.log(
                level, "campaign %s/%s over (term %d): %s", self.role, self.candidate_id, self.term, reason
            )

    async def updates(self) -> AsyncIterator[CampaignUpdate]:
        """WAITING/ELECTED as they happen, HEARTBEAT when idle, LOST last (then the end)."""
        seen = 0
        while True:
            got = await self._updates.newer_than(seen, timeout_s=self._heartbeat_s)
            if got is None:
                yield self._update(UpdateKind.HEARTBEAT)
                continue
            seen, update = got
            yield update
            if update.kind is UpdateKind.LOST:
                return


class LeaderWatch:
    """Follows who leads one role; :meth:`updates` yields the leader now, then each change."""

    def __init__(self, store: MetadataStore, keys: Keys, role: str, *, closing: asyncio.Event) -> None:
        self.role = role
        self.prefix = keys.leader_candidates_prefix(role)
        self._store = store
        self._closing = closing
        self._stop = asyncio.Event()
        # (state, leader): state "leader" (None: nobody), "closed" or "failed".
        self._updates: Latest[tuple[str, LeaderInfo | None]] = Latest()
        self._shown: object = _NOTHING_SHOWN
        self._error = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def start(self) -> LeaderWatch:
        self._task = asyncio.create_task(self._run(), name=f"watch-leader-{self.role}")
        return self

    def stop(self) -> None:
        self._stop.set()

    def _observe(self, live: dict[str, KeyValue]) -> None:
        top = leader_of(live.values())
        info = LeaderInfo.from_kv(self.role, top) if top is not None else None
        shown = (info.key, info.term) if info is not None else None
        if shown != self._shown:
            self._shown = shown
            self._updates.set(("leader", info))
        return None

    async def _run(self) -> None:
        state = "closed"
        try:
            follow: asyncio.Task[None] = asyncio.create_task(
                follow_prefix(self._store, self.prefix, self._observe), name=f"follow-{self.prefix}"
            )
            await _first_of(follow, {self._stop: "stopped", self._closing: "closing"})
        except Exception as exc:
            state, self._error = "failed", str(exc)
            log.error("watch of the %s leader failed: %s", self.role, exc, exc_info=True)
        finally:
            self._updates.set((state, None))

    async def updates(self) -> AsyncIterator[LeaderInfo | None]:
        seen = 0
        while True:
            got = await self._updates.newer_than(seen, timeout_s=None)
            assert got is not None
            seen, (state, info) = got
            if state == "closed":
                raise ServiceShuttingDown(
                    f"leader replica stopped watching role {self.role!r}: watch again on another replica"
                )
            if state == "failed":
                raise MetadataUnavailable(f"watching the leader of {self.role!r} failed: {self._error}")
            yield info


class Elections:
    """Every campaign and leader watch of this replica; config is injected here."""

    def __init__(
        self,
        store: MetadataStore,
        keys: Keys,
        *,
        default_ttl_s: int = 10,
        min_ttl_s: int = 2,
        max_ttl_s: int = 300,
        heartbeat_interval_s: float = 1.0,
        max_streams: int = 10_000,
        max_metadata_bytes: int = 4096,
    ) -> None:
        self._store = store
        self._keys = keys
        self.default_ttl_s = default_ttl_s
        self.min_ttl_s = min_ttl_s
        self.max_ttl_s = max_ttl_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.max_streams = max_streams
        self.max_metadata_bytes = max_metadata_bytes
        self._closing = asyncio.Event()
        self._streams: set[Campaign | LeaderWatch] = set()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    @property
    def campaigns(self) -> list[Campaign]:
        return [s for s in self._streams if isinstance(s, Campaign)]

    @property
    def streams(self) -> list[Campaign | LeaderWatch]:
        """Every campaign and watch this replica carries now."""
        return list(self._streams)

    def _admit(self, what: str) -> None:
        if self._closing.is_set():
            raise ServiceShuttingDown(f"this leader replica is shutting down: {what} on another replica")
        if len(self._streams) >= self.max_streams:
            raise ResourceExhausted(
                f"this leader replica carries its maximum of {self.max_streams} streams: "
                f"{what} on another replica"
            )

    def _track(self, stream: Campaign | LeaderWatch) -> None:
        task = stream.task
        assert task is not None
        task.add_done_callback(lambda _t: self._streams.discard(stream))

    async def start_campaign(
        self,
        role: str,
        candidate_id: str,
        *,
        ttl_s: int = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> Campaign:
        """Validate, grant the lease, create the key; the campaign then follows the role.

        Raises InvalidArgument, AlreadyExists (a live key of this candidate), or
        Unavailable/Timeout from etcd.
        """
        validate_name("role", role)
        validate_name("candidate_id", candidate_id)
        ttl = choose_ttl_s(ttl_s, default_s=self.default_ttl_s, min_s=self.min_ttl_s, max_s=self.max_ttl_s)
        md = validate_metadata(metadata or {}, max_bytes=self.max_metadata_bytes)
        self._admit("campaign")
        campaign = Campaign(
            self._store,
            self._keys,
            role,
            candidate_id,
            ttl_s=ttl,
            metadata=md,
            heartbeat_interval_s=self.heartbeat_interval_s,
            closing=self._closing,
        )
        self._streams.add(campaign)  # counted while starting, so the limit holds
        try:
            await campaign.start()
        except BaseException:
            self._streams.discard(campaign)
            raise
        self._track(campaign)
        return campaign

    def start_watch(self, role: str) -> LeaderWatch:
        validate_name("role", role)
        self._admit("watch")
        watch = LeaderWatch(self._store, self._keys, role, closing=self._closing).start()
        self._streams.add(watch)
        self._track(watch)
        return watch

    async def get_leader(self, role: str) -> LeaderInfo | None:
        validate_name("role", role)
        return await read_leader(self._store, self._keys, role)

    async def list_leaders(self) -> dict[str, LeaderInfo]:
        return await read_leaders(self._store, self._keys)

    async def aclose(self, *, timeout_s: float = 5.0) -> None:
        """Refuse new streams; end every campaign (LOST, lease revoked) and watch; wait up
        to ``timeout_s`` for their loops, then cancel what is left. Idempotent."""
        self._closing.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._streams:
            tasks = {s.task for s in self._streams if s.task is not None}
            left = deadline - loop.time()
            if not tasks or left <= 0:
                break
            await asyncio.wait(tasks, timeout=left)
        stragglers = {s.task for s in self._streams if s.task is not None and not s.task.done()}
        if stragglers:
            log.warning("%d election loops did not end in %.1fs; cancelled", len(stragglers), timeout_s)
            await cancel_and_wait(*stragglers)
