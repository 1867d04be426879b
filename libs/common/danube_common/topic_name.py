"""Topic and namespace names: parsing, validation and partition naming.

A topic is ``/{namespace}/{topic}``. Both parts use letters, digits, ``_``, ``-`` and ``.``;
a namespace is at most 64 characters and a topic part at most 200. A partition of a
partitioned topic ``/ns/t`` is the independent topic ``/ns/t-part-{n}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from danube_common.errors import InvalidNamespaceName, InvalidTopicName

_PART = re.compile(r"[A-Za-z0-9_.\-]+")
_PARTITION_SUFFIX = re.compile(r"(?P<base>.+)-part-(?P<n>0|[1-9][0-9]*)")
MAX_NAMESPACE_LEN = 64
MAX_TOPIC_LEN = 200
_ALLOWED = "letters, digits, '_', '-' and '.'"


def validate_namespace(name: str) -> str:
    if not name or len(name) > MAX_NAMESPACE_LEN or not _PART.fullmatch(name) or name in (".", ".."):
        raise InvalidNamespaceName(
            f"invalid namespace name {name!r}: use 1-{MAX_NAMESPACE_LEN} characters of {_ALLOWED}"
        )
    return name


@dataclass(frozen=True, slots=True)
class TopicName:
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse ``/namespace/topic``; raise InvalidTopicName with what is allowed."""
        hint = f"topic names look like /namespace/topic, each part made of {_ALLOWED}"
        if not isinstance(name, str) or not name.startswith("/"):
            raise InvalidTopicName(f"invalid topic name {name!r}: {hint}")
        parts = name[1:].split("/")
        if len(parts) != 2:
            raise InvalidTopicName(f"invalid topic name {name!r}: {hint}")
        ns, local = parts
        try:
            validate_namespace(ns)
        except InvalidNamespaceName as exc:
            raise InvalidTopicName(f"invalid topic name {name!r}: {exc.message}; {hint}") from exc
        if not local or len(local) > MAX_TOPIC_LEN or not _PART.fullmatch(local) or local in (".", ".."):
            raise InvalidTopicName(
                f"invalid topic name {name!r}: the topic part must be 1-{MAX_TOPIC_LEN} characters of {_ALLOWED}"
            )
        return cls(ns, local)

    def __str__(self) -> str:
        return f"/{self.namespace}/{self.local}"

    @property
    def name(self) -> str:
        return str(self)

    def partition(self, n: int) -> TopicName:
        return TopicName(self.namespace, f"{self.local}-part-{n}")

    @property
    def partition_index(self) -> int | None:
        """The partition number if this is a partition topic (``t-part-N``), else None."""
        m = _PARTITION_SUFFIX.fullmatch(self.local)
        return int(m.group("n")) if m else None

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        m = _PARTITION_SUFFIX.fullmatch(self.local)
        return TopicName(self.namespace, m.group("base")) if m else self


def partition_names(name: str, partitions: int) -> list[str]:
    base = TopicName.parse(name)
    return [str(base.partition(i)) for i in range(partitions)]
