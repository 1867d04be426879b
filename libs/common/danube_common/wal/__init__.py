"""The WAL's on-disk format: frames (:mod:`.codec`) and segment files (:mod:`.segment`).

Pure and synchronous so that tools other than the broker (the uploader, a dump command) can
read segments. The broker's engine lives in ``danube_broker.wal``.
"""

from danube_common.wal.codec import (
    FRAME_HEADER_BYTES,
    Frame,
    ScanResult,
    StopReason,
    encode_frame,
    encode_frames,
    frame_size,
    scan,
)
from danube_common.wal.segment import (
    HEADER_BYTES,
    SegmentHeader,
    SegmentIndex,
    build_index,
    decode_header,
    decode_index,
    encode_header,
    encode_index,
    index_name,
    parse_name,
    scan_segment_file,
    segment_name,
)

__all__ = [
    "FRAME_HEADER_BYTES",
    "HEADER_BYTES",
    "Frame",
    "ScanResult",
    "SegmentHeader",
    "SegmentIndex",
    "StopReason",
    "build_index",
    "decode_header",
    "decode_index",
    "encode_frame",
    "encode_frames",
    "encode_header",
    "encode_index",
    "frame_size",
    "index_name",
    "parse_name",
    "scan",
    "scan_segment_file",
    "segment_name",
]
