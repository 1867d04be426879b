"""Logging set-up shared by every process: one line per record, with context fields."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "INFO", *, service: str) -> None:
    fmt = f"%(asctime)s %(levelname)-7s {service} %(name)s: %(message)s"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("grpc").setLevel(logging.WARNING)
