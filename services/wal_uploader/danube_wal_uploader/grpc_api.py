"""``danube.uploader.v1.WalUploader``: protobuf <-> the uploader, nothing else."""

from __future__ import annotations

import grpc.aio

from danube_common.errors import InvalidArgument
from danube_common.pb import DanubeWalUploader_pb2 as upb
from danube_common.pb import DanubeWalUploader_pb2_grpc as upb_grpc
from danube_common.topic_name import TopicName
from danube_wal_uploader.metrics import TopicProgress
from danube_wal_uploader.uploader import Uploader


def progress_pb(p: TopicProgress) -> upb.TopicProgress:
    return upb.TopicProgress(
        topic=p.topic,
        uploaded_next_offset=p.uploaded_next_offset,
        local_next_offset=p.local_next_offset,
        lag_bytes=p.lag_bytes,
        last_error=p.last_error,
        last_upload_at_ms=p.last_upload_at_ms,
        upload_errors=p.upload_errors,
        final=p.final,
    )


class WalUploaderApi(upb_grpc.WalUploaderServicer):
    def __init__(self, uploader: Uploader) -> None:
        self._u = uploader

    async def Flush(self, request: upb.FlushRequest, context: grpc.aio.ServicerContext) -> upb.FlushResponse:
        remaining = context.time_remaining()
        timeout_s = remaining if remaining is not None else float("inf")
        if request.all_topics:
            if request.topic:
                raise InvalidArgument("give either topic or all_topics = true, not both")
            progress = await self._u.flush_all(timeout_s=timeout_s)
            return upb.FlushResponse(topics=[progress_pb(p) for p in progress])
        if not request.topic:
            raise InvalidArgument('topic is required ("/namespace/topic"), or set all_topics = true')
        name = TopicName.parse(request.topic)
        p = await self._u.flush(name, request.up_to_offset or None, timeout_s=timeout_s)
        return upb.FlushResponse(topics=[progress_pb(p)], uploaded_next_offset=p.uploaded_next_offset)

    async def Status(
        self, request: upb.StatusRequest, context: grpc.aio.ServicerContext
    ) -> upb.StatusResponse:
        name = TopicName.parse(request.topic) if request.topic else None
        t = self._u.totals
        return upb.StatusResponse(
            broker_id=self._u.cfg.broker_id,
            broker_alive=self._u.broker_alive,
            topics=[progress_pb(p) for p in self._u.status(name)],
            uploads_total=t.uploads,
            upload_errors_total=t.upload_errors,
            bytes_uploaded_total=t.bytes_uploaded,
            overlaps_refused_total=t.overlaps_refused,
            final_states_total=t.final_states,
        )
