"""The tests' OTLP/gRPC receiver: the local cluster's trace sink (a real TraceService endpoint
built on the collector's protobufs, :mod:`danube_local.traces`), keeping every span in memory::

    with OtlpReceiver() as otlp:
        cluster = LocalCluster(..., extra_env=otlp.env())
        ...
        spans = otlp.wait_for(lambda s: s.name == "process /default/t", what="a process span")
"""

from __future__ import annotations

from danube_local.traces import ReceivedSpan, TraceSink, children

__all__ = ["OtlpReceiver", "ReceivedSpan", "children"]


class OtlpReceiver(TraceSink):
    """A :class:`TraceSink` on a free loopback port, without a file."""
