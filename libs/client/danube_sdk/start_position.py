"""Where a reader starts (pure): the earliest or latest offset, an offset, or a publish time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from danube_common.errors import InvalidArgument
from danube_common.pb import DanubeApi_pb2 as pb

StartKind = Literal["earliest", "latest", "offset", "timestamp"]


@dataclass(frozen=True, slots=True)
class StartPosition:
    """A reader's start: ``StartPosition.EARLIEST``, ``LATEST``, ``offset(n)`` or
    ``timestamp(ms_or_datetime)``. :meth:`of` also takes ``"earliest"``, ``"latest"``, an int
    (an offset) and a :class:`datetime` (a timestamp; naive means local time)."""

    kind: StartKind = "latest"
    #: The offset, or the publish time in Unix milliseconds.
    value: int = 0

    #: The topic's first offset kept; the next offset (what is published from now on).
    EARLIEST: ClassVar[StartPosition]
    LATEST: ClassVar[StartPosition]

    def __post_init__(self) -> None:
        if self.kind not in ("earliest", "latest", "offset", "timestamp"):
            raise InvalidArgument(f"unknown start kind {self.kind!r}: earliest, latest, offset or timestamp")
        if self.value < 0:
            raise InvalidArgument(f"a start {self.kind} must be >= 0, got {self.value}")

    @classmethod
    def offset(cls, offset: int) -> StartPosition:
        """Start at ``offset`` (clamped by the broker to the offsets the topic keeps)."""
        return cls("offset", int(offset))

    @classmethod
    def timestamp(cls, when: int | datetime) -> StartPosition:
        """Start at the first message published at or after ``when`` (Unix ms, or a datetime)."""
        ms = round(when.timestamp() * 1000) if isinstance(when, datetime) else int(when)
        return cls("timestamp", ms)

    @classmethod
    def of(cls, start: StartPosition | str | int | datetime) -> StartPosition:
        if isinstance(start, StartPosition):
            return start
        if isinstance(start, datetime):
            return cls.timestamp(start)
        if isinstance(start, bool):
            raise InvalidArgument(f"not a start position: {start!r}")
        if isinstance(start, int):
            return cls.offset(start)
        if isinstance(start, str) and start.lower() in ("earliest", "latest"):
            return cls(start.lower())  # type: ignore[arg-type]
        raise InvalidArgument(
            f"not a start position: {start!r}; use 'earliest', 'latest', an offset (int), a datetime, "
            "or StartPosition.offset(n) / StartPosition.timestamp(ms)"
        )

    @classmethod
    def parse(cls, text: str) -> StartPosition:
        """The CLI's form: ``earliest``, ``latest``, an offset ``N``, or ``@ISO-TIME``
        (``@2026-11-27T10:00:00Z``; without a zone, local time)."""
        text = text.strip()
        if text.startswith("@"):
            iso = text[1:]
            try:
                when = datetime.fromisoformat(iso[:-1] + "+00:00" if iso.endswith(("Z", "z")) else iso)
            except ValueError:
                raise InvalidArgument(f"bad time {iso!r}: use ISO 8601, e.g. @2026-11-27T10:00:00Z") from None
            return cls.timestamp(when)
        if text.isdigit():
            return cls.offset(int(text))
        return cls.of(text)

    def to_proto(self) -> pb.ReaderStart:
        if self.kind == "earliest":
            return pb.ReaderStart(earliest=True)
        if self.kind == "offset":
            return pb.ReaderStart(offset=self.value)
        if self.kind == "timestamp":
            return pb.ReaderStart(publish_time_ms=self.value)
        return pb.ReaderStart(latest=True)

    def __str__(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        return f"{self.kind} {self.value}"


StartPosition.EARLIEST = StartPosition("earliest")
StartPosition.LATEST = StartPosition("latest")
