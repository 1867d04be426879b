"""``danube.leader.v1.LeaderElection``: protobuf <-> the election domain, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc.aio

from danube_common.leadership import LeaderInfo
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc
from danube_leader.election import CampaignUpdate, Elections, UpdateKind

_KINDS = {
    UpdateKind.WAITING: lpb.CampaignEvent.WAITING,
    UpdateKind.ELECTED: lpb.CampaignEvent.ELECTED,
    UpdateKind.HEARTBEAT: lpb.CampaignEvent.HEARTBEAT,
    UpdateKind.LOST: lpb.CampaignEvent.LOST,
}


def leader_pb(role: str, info: LeaderInfo | None) -> lpb.LeaderInfo:
    """A LeaderInfo message; nobody leads: only ``role`` is set."""
    if info is None:
        return lpb.LeaderInfo(role=role)
    return lpb.LeaderInfo(
        role=info.role, candidate_id=info.candidate_id, term=info.term, metadata=info.metadata, key=info.key
    )


def event_pb(update: CampaignUpdate) -> lpb.CampaignEvent:
    ev = lpb.CampaignEvent(
        kind=_KINDS[update.kind], key=update.key, term=update.term, reason=update.reason, ttl_s=update.ttl_s
    )
    if update.leader is not None:
        ev.leader.CopyFrom(leader_pb(update.leader.role, update.leader))
    return ev


class LeaderElectionApi(lpb_grpc.LeaderElectionServicer):
    def __init__(self, elections: Elections) -> None:
        self._elections = elections

    async def Campaign(
        self, request: lpb.CampaignRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[lpb.CampaignEvent]:
        campaign = await self._elections.start_campaign(
            request.role, request.candidate_id, ttl_s=request.ttl_s, metadata=dict(request.metadata)
        )
        # However the RPC ends (cancelled mid-write included), the campaign's own task resigns.
        context.add_done_callback(lambda _ctx: campaign.stop())
        try:
            async for update in campaign.updates():
                yield event_pb(update)
        finally:
            campaign.stop()

    async def GetLeader(
        self, request: lpb.GetLeaderRequest, context: grpc.aio.ServicerContext
    ) -> lpb.LeaderInfo:
        return leader_pb(request.role, await self._elections.get_leader(request.role))

    async def ListLeaders(
        self, request: lpb.ListLeadersRequest, context: grpc.aio.ServicerContext
    ) -> lpb.ListLeadersResponse:
        leaders = await self._elections.list_leaders()
        return lpb.ListLeadersResponse(leaders=[leader_pb(role, leaders[role]) for role in sorted(leaders)])

    async def WatchLeader(
        self, request: lpb.WatchLeaderRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[lpb.LeaderInfo]:
        watch = self._elections.start_watch(request.role)
        context.add_done_callback(lambda _ctx: watch.stop())
        try:
            async for info in watch.updates():
                yield leader_pb(request.role, info)
        finally:
            watch.stop()
