"""Leadership of named roles: who leads (read from etcd), and campaigning through ``danube-leader``.

The election lives in etcd (services/leader/README.md): each candidate of a role is a leased
key ``/{cluster}/leaders/{role}/{candidate_id}``; the live key with the lowest create_revision
leads and that revision is its **term**, the fencing token every privileged write compares::

    elector = Elector(["10.0.0.1:6680", "10.0.0.2:6680"])
    async with contextlib.aclosing(
        elector.lead("load-manager", candidate_id="lm-1", ttl_s=10, metadata={"addr": "..."})
    ) as leads:
        async for lead in leads:            # each time this candidate is elected
            while not lead.lost.is_set():
                await store.txn([lead.fence(), ...], [...])   # the compare is the truth
                ...
    await elector.aclose()

``lost`` is a hint that is set as soon as this process knows (stream broken, heartbeat
missed, LOST event); it is set *before* the candidate campaigns again. A write fenced with
:meth:`Leadership.fence` fails once the key is gone, whatever the process believes.

Pure functions (:func:`leader_of`, :func:`leaders_from`, :func:`backoff_delay_s`) take values
and return values; :func:`read_leaders` answers from etcd alone, without the service.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import grpc.aio

from danube_common.aio import cancel_and_wait
from danube_common.errors import (
    AlreadyExists,
    DanubeError,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    error_from_rpc,
)
from danube_common.grpc_util import open_channel, strip_scheme
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, KeyValue, MetadataStore
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors after which campaigning again cannot help: the request itself is wrong.
_FATAL: tuple[type[DanubeError], ...] = (InvalidArgument, PermissionDenied, Unauthenticated)


# ---------------------------------------------------------------- values and pure functions
@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The leader of one role: its candidate id, term (fencing token), key and metadata."""

    role: str
    candidate_id: str
    term: int
    key: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_kv(cls, role: str, kv: KeyValue) -> LeaderInfo:
        """Decode a candidate key; a value that is not the expected JSON still names the key."""
        try:
            data = kv.json()
        except (ValueError, UnicodeDecodeError):
            data = None
        data = data if isinstance(data, dict) else {}
        raw_md = data.get("metadata")
        metadata = {str(k): str(v) for k, v in raw_md.items()} if isinstance(raw_md, dict) else {}
        candidate_id = data.get("candidate_id")
        if not isinstance(candidate_id, str) or not candidate_id:
            candidate_id = kv.key.rsplit("/", 1)[-1]
        return cls(role, candidate_id, kv.create_revision, kv.key, metadata)

    def fence(self) -> Compare:
        """The compare that holds only while this leader's key is the one of this term."""
        return fence(self.key, self.term)


def candidate_value(candidate_id: str, metadata: Mapping[str, str], ttl_s: int) -> bytes:
    """The JSON value of a candidate key."""
    doc = {"candidate_id": candidate_id, "metadata": dict(metadata), "ttl_s": ttl_s}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def fence(key: str, term: int) -> Compare:
    """``Compare(key, create == term)``: true only while the leader key of ``term`` lives.

    A re-created key (same candidate, new campaign) has a new create_revision, so an old
    term can never pass again.
    """
    if term <= 0:
        raise ValueError(f"a term is a positive etcd revision, got {term}")
    return Compare(key, "create", "==", term)


def leader_of(kvs: Iterable[KeyValue]) -> KeyValue | None:
    """The leading candidate among the live keys of one role: the lowest create_revision.

    Campaigns create one key per transaction, so revisions are unique; keys written together
    by hand would tie, and the key name breaks the tie so every reader agrees.
    """
    return min(kvs, key=lambda kv: (kv.create_revision, kv.key), default=None)


def leaders_from(kvs: Iterable[KeyValue], keys: Keys) -> dict[str, LeaderInfo]:
    """role -> its leader, for every role with at least one candidate key among ``kvs``."""
    by_role: dict[str, list[KeyValue]] = {}
    for kv in kvs:
        parsed = keys.parse_leader_candidate(kv.key)
        if parsed is not None:
            by_role.setdefault(parsed[0], []).append(kv)
    out: dict[str, LeaderInfo] = {}
    for role in sorted(by_role):
        top = leader_of(by_role[role])
        if top is not None:
            out[role] = LeaderInfo.from_kv(role, top)
    return out


def backoff_delay_s(
    attempt: int, *, base_s: float, cap_s: float, rand: Callable[[], float] = random.random
) -> float:
    """Delay before retry ``attempt`` (0-based): ``min(cap, base * 2**attempt)``, jittered
    into its upper half so that candidates spread out but still back off."""
    ceiling = min(cap_s, base_s * (2 ** min(attempt, 32)))
    return ceiling * (0.5 + 0.5 * rand())


async def read_leaders(store: MetadataStore, keys: Keys) -> dict[str, LeaderInfo]:
    """role -> leader, straight from etcd (for readers that do not run the service)."""
    kvs, _ = await store.get_prefix(keys.leaders_prefix())
    return leaders_from(kvs, keys)


async def read_leader(store: MetadataStore, keys: Keys, role: str) -> LeaderInfo | None:
    """The leader of ``role`` straight from etcd; None when nobody leads."""
    kvs, _ = await store.get_prefix(keys.leader_candidates_prefix(role))
    top = leader_of(kvs)
    return LeaderInfo.from_kv(role, top) if top is not None else None


def leader_from_pb(msg: Any) -> LeaderInfo | None:
    """A ``danube.leader.v1.LeaderInfo`` -> LeaderInfo; None for "nobody leads"."""
    if not msg.candidate_id:
        return None
    return LeaderInfo(msg.role, msg.candidate_id, int(msg.term), msg.key, dict(msg.metadata))


# ---------------------------------------------------------------- client of danube-leader
@dataclass(eq=False, slots=True)
class Leadership:
    """One term of leadership, handed out each time the candidate is elected."""

    role: str
    candidate_id: str
    term: int
    key: str
    #: The leader replica that carried the campaign (host:port).
    replica: str
    #: Set as soon as this process knows the term is over (before it campaigns again).
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    def fence(self) -> Compare:
        """Add to every etcd transaction made as leader: it fails once the term is over."""
        return fence(self.key, self.term)

    @property
    def is_lost(self) -> bool:
        return self.lost.is_set()


class Candidacy:
    """One candidate campaigning for one role, through whichever replica answers.

    A loop task (owned here; :meth:`aclose` ends it) holds one Campaign stream at a time.
    When the stream breaks, ends, sends LOST, or stays silent past the heartbeat deadline,
    the current :class:`Leadership` gets ``lost`` set first; then the loop campaigns again on
    the next address after a capped exponential backoff. Iterate to receive each
    Leadership; one that was already lost before it was picked up is skipped.
    """

    def __init__(
        self,
        elector: Elector,
        role: str,
        *,
        candidate_id: str,
        ttl_s: int,
        metadata: Mapping[str, str],
    ) -> None:
        self.role = role
        self.candidate_id = candidate_id
        self.ttl_s = ttl_s
        self.metadata = dict(metadata)
        self._elector = elector
        #: The replica carrying the campaign now (host:port), None between attempts.
        self.replica: str | None = None
        #: The newest leader a replica reported (WAITING/ELECTED), None if nobody / unknown.
        self.leader: LeaderInfo | None = None
        #: "waiting", "elected" or "" (no live campaign stream).
        self.state = ""
        #: The term being held now, if any.
        self.current: Leadership | None = None
        self._latest: Leadership | None = None
        self._handed: Leadership | None = None
        self._changed = asyncio.Event()
        #: Why the candidacy stopped by itself (a request the replicas refuse, or a bug).
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def start(self) -> Candidacy:
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name=f"campaign-{self.role}-{self.candidate_id}")
        return self

    def __aiter__(self) -> Candidacy:
        return self.start()

    async def __anext__(self) -> Leadership:
        self.start()
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            latest = self._latest
            if latest is not None and latest is not self._handed and not latest.is_lost:
                self._handed = latest
                return latest
            self._changed.clear()
            await self._changed.wait()

    async def __aenter__(self) -> Candidacy:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _wake(self) -> None:
        self._changed.set()

    def _drop_current(self, why: str, *, resigned: bool = False) -> None:
        lead, self.current = self.current, None
        self.state = ""
        if lead is not None and not lead.is_lost:
            lead.lost.set()
            log.log(
                logging.INFO if resigned else logging.WARNING,
                "%s %s the %s leadership (term %d): %s",
                self.candidate_id,
                "resigned" if resigned else "lost",
                self.role,
                lead.term,
                why,
            )

    async def _run(self) -> None:
        addresses = self._elector.addresses
        attempt = 0
        index = 0
        try:
            while True:
                addr = addresses[index % len(addresses)]
                self.replica = addr
                why = "campaign stream ended"
                healthy = False
                try:
                    healthy, why = await self._campaign_once(addr)
                except _FATAL as err:
                    self._error = err
                    log.error("%s cannot campaign for %s: %s", self.candidate_id, self.role, err)
                    return
                except AlreadyExists as err:
                    # Our previous campaign's key (its replica died) lives until its lease ends.
                    why = str(err)
                    log.info("%s: %s; retrying", self.candidate_id, err)
                except DanubeError as err:
                    why = f"{addr}: {err}"
                    log.warning("campaign of %s for %s broke: %s", self.candidate_id, self.role, why)
                finally:
                    self._drop_current(why)  # lost first, then anything else
                    self.replica = None
                    self._wake()
                attempt = 0 if healthy else attempt + 1
                index += 1
                await asyncio.sleep(
                    backoff_delay_s(
                        attempt, base_s=self._elector.backoff_base_s, cap_s=self._elector.backoff_cap_s
                    )
                )
        except Exception as exc:  # a bug: say so to the consumer rather than hang it
            self._error = exc
            log.exception("campaign loop of %s for %s failed", self.candidate_id, self.role)
        finally:
            self._drop_current("candidacy closed", resigned=True)
            self._wake()

    async def _campaign_once(self, addr: str) -> tuple[bool, str]:
        """Hold one Campaign stream; return (any event received, why it ended)."""
        req = lpb.CampaignRequest(
            role=self.role, candidate_id=self.candidate_id, ttl_s=self.ttl_s, metadata=self.metadata
        )
        call = self._elector._stub(addr).Campaign(req)
        got_any = False
        deadline_s = self._elector.rpc_timeout_s
        try:
            while True:
                try:
                    async with asyncio.timeout(deadline_s):
                        ev = await call.read()
                except TimeoutError:
                    raise Unavailable(
                        f"leader replica {addr} sent nothing for {deadline_s:.1f}s (heartbeat missed)"
                    ) from None
                except grpc.aio.AioRpcError as exc:
                    raise error_from_rpc(exc) from exc
                if ev is grpc.aio.EOF:
                    return got_any, f"{addr} ended the campaign stream"
                got_any = True
                deadline_s = self._elector.heartbeat_deadline_s
                if ev.kind == lpb.CampaignEvent.LOST:
                    self._drop_current(ev.reason or "LOST")
                    return got_any, ev.reason or "LOST"
                if ev.kind == lpb.CampaignEvent.ELECTED:
                    self._elected(ev, addr)
                elif ev.kind == lpb.CampaignEvent.WAITING:
                    self.state = "waiting"
                    self.leader = leader_from_pb(ev.leader) if ev.HasField("leader") else None
                    self._wake()
        finally:
            call.cancel()  # a live replica revokes the lease at once

    def _elected(self, ev: Any, addr: str) -> None:
        self._drop_current("elected again with a new term")
        lead = Leadership(self.role, self.candidate_id, int(ev.term), ev.key, addr)
        self.current = lead
        self._latest = lead
        self.state = "elected"
        self.leader = leader_from_pb(ev.leader)
        log.info("%s leads %s (term %d, via %s)", self.candidate_id, self.role, lead.term, addr)
        self._wake()

    async def aclose(self) -> None:
        """Stop campaigning: the current term is lost, the replica revokes the lease at once."""
        if self._closed:
            return
        self._closed = True
        self._drop_current("candidacy closed", resigned=True)
        err = await cancel_and_wait(self._task)
        if err is not None:
            raise err
        self._elector._forget(self)
        self._wake()


class Elector:
    """Client of the ``danube-leader`` replicas at ``addresses`` (``host:port`` or URLs).

    Every unary call carries ``rpc_timeout_s`` and fails over to the next address on a
    transport failure. Campaign streams are judged dead when no event (heartbeats included)
    arrives for ``heartbeat_deadline_s``; keep it above the replicas' heartbeat interval and
    below the campaign TTL. ``credentials`` (a service's ``channel_credentials(cfg.tls)``) make
    the channels TLS, with the service's own certificate as its mTLS identity.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        rpc_timeout_s: float = 5.0,
        heartbeat_deadline_s: float = 3.0,
        backoff_base_s: float = 0.1,
        backoff_cap_s: float = 2.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        targets = [strip_scheme(a) for a in addresses if a.strip()]
        if not targets:
            raise ValueError("no leader service address given, e.g. 127.0.0.1:6680")
        if rpc_timeout_s <= 0 or heartbeat_deadline_s <= 0:
            raise ValueError("rpc_timeout_s and heartbeat_deadline_s must be > 0 seconds")
        self.addresses = targets
        self.rpc_timeout_s = rpc_timeout_s
        self.heartbeat_deadline_s = heartbeat_deadline_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        #: TLS towards the leader service (the candidate's own certificate: mTLS); None: plaintext.
        self._credentials = credentials
        self._stubs: dict[str, lpb_grpc.LeaderElectionStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._candidacies: set[Candidacy] = set()
        self._preferred = 0
        self._closed = False

    def _stub(self, addr: str) -> lpb_grpc.LeaderElectionStub:
        if self._closed:
            raise Unavailable("the elector is closed")
        stub = self._stubs.get(addr)
        if stub is None:
            channel = open_channel(addr, self._credentials)
            self._channels.append(channel)
            stub = self._stubs[addr] = lpb_grpc.LeaderElectionStub(channel)
        return stub

    def _forget(self, candidacy: Candidacy) -> None:
        self._candidacies.discard(candidacy)

    # ---- campaigning
    def campaign(
        self,
        role: str,
        *,
        candidate_id: str,
        ttl_s: int = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> Candidacy:
        """A started candidacy for ``role``; iterate it for each Leadership, ``aclose()`` it
        to resign. ``ttl_s = 0`` takes the replicas' default."""
        if self._closed:
            raise Unavailable("the elector is closed")
        candidacy = Candidacy(self, role, candidate_id=candidate_id, ttl_s=ttl_s, metadata=metadata or {})
        self._candidacies.add(candidacy)
        return candidacy.start()

    async def lead(
        self,
        role: str,
        *,
        candidate_id: str,
        ttl_s: int = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Leadership, None]:
        """Each Leadership of this candidate, for as long as the iteration lasts (wrap in
        ``contextlib.aclosing`` so that leaving the loop resigns at once)."""
        candidacy = self.campaign(role, candidate_id=candidate_id, ttl_s=ttl_s, metadata=metadata)
        try:
            async for lead in candidacy:
                yield lead
        finally:
            await candidacy.aclose()

    # ---- observing
    async def _unary(self, what: str, call: Callable[[lpb_grpc.LeaderElectionStub], Any]) -> Any:
        """One unary call, on the preferred address first, then the others on a transport failure."""
        last: DanubeError | None = None
        n = len(self.addresses)
        for i in range(n):
            idx = (self._preferred + i) % n
            addr = self.addresses[idx]
            try:
                result = await call(self._stub(addr))
            except grpc.aio.AioRpcError as exc:
                err = error_from_rpc(exc)
                if not err.retryable:
                    raise err from exc
                log.info("%s on leader replica %s failed (%s); trying the next", what, addr, err)
                last = err
                continue
            self._preferred = idx
            return result
        assert last is not None
        raise last

    async def get_leader(self, role: str) -> LeaderInfo | None:
        """The leader of ``role`` now; None when nobody leads."""
        req = lpb.GetLeaderRequest(role=role)
        msg = await self._unary("GetLeader", lambda s: s.GetLeader(req, timeout=self.rpc_timeout_s))
        return leader_from_pb(msg)

    async def list_leaders(self) -> dict[str, LeaderInfo]:
        """role -> leader, for every role that has one now."""
        msg = await self._unary(
            "ListLeaders", lambda s: s.ListLeaders(lpb.ListLeadersRequest(), timeout=self.rpc_timeout_s)
        )
        out: dict[str, LeaderInfo] = {}
        for item in msg.leaders:
            info = leader_from_pb(item)
            if info is not None:
                out[info.role] = info
        return out

    async def watch_leader(self, role: str) -> AsyncGenerator[LeaderInfo | None, None]:
        """The leader of ``role`` now, then at every change (None: nobody leads).

        Follows replicas as they come and go: a broken stream is re-opened on the next
        address (capped backoff) and only a changed leader is yielded again.
        """
        req = lpb.WatchLeaderRequest(role=role)
        last: tuple[str, int] | None = None
        first = True
        attempt = 0
        index = self._preferred
        while True:
            addr = self.addresses[index % len(self.addresses)]
            call = self._stub(addr).WatchLeader(req)
            try:
                while True:
                    try:
                        msg = await call.read()
                    except grpc.aio.AioRpcError as exc:
                        raise error_from_rpc(exc) from exc
                    if msg is grpc.aio.EOF:
                        break
                    attempt = 0
                    info = leader_from_pb(msg)
                    ident = (info.key, info.term) if info is not None else None
                    if first or ident != last:
                        first = False
                        last = ident
                        yield info
            except _FATAL:
                raise
            except DanubeError as err:
                log.info("watch of the %s leader on %s broke (%s); watching elsewhere", role, addr, err)
                attempt += 1
            finally:
                call.cancel()
            index += 1
            await asyncio.sleep(
                backoff_delay_s(attempt, base_s=self.backoff_base_s, cap_s=self.backoff_cap_s)
            )

    async def aclose(self) -> None:
        """Resign every candidacy (their replicas revoke at once), then close the channels."""
        if self._closed:
            return
        for candidacy in list(self._candidacies):
            await candidacy.aclose()
        self._closed = True
        channels, self._channels = self._channels, []
        self._stubs.clear()
        for channel in channels:
            await channel.close()
