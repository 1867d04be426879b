"""Observability, configured once per process: OpenTelemetry tracing (:mod:`.tracing`, with the
trace context carried inside messages by :mod:`.messages` and on RPCs by :mod:`.grpc_tracing`),
Prometheus metrics (names in :mod:`.metric_names`, registries in :mod:`.metrics`) and the HTTP
endpoint that serves them (:mod:`.http`).
"""
