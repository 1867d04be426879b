"""``danube.Discovery`` on the client port: the shared servicer from libs/common.

The lookup never owns topics, so every TopicLookup answer is ``Redirect`` to the owning
broker (placing the topic first, or taking it over from a dead owner; see
``danube_common.placement``). TopicPartitions is the shared implementation.
"""

from __future__ import annotations

from danube_common.cluster_view import ClusterView
from danube_common.discovery import DiscoveryServicer
from danube_common.resources import Resources


class LookupDiscovery(DiscoveryServicer):
    def __init__(self, resources: Resources, view: ClusterView, *, auto_create_topics: bool = True) -> None:
        super().__init__(resources, view, self_broker_id=None, auto_create_topics=auto_create_topics)
