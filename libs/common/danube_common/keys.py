"""Every etcd key of the system, built in this one module under a per-cluster root.

Layout (values are JSON unless noted)::

    /{cluster}/brokers/{broker_id}                         registration; lease
    /{cluster}/load/{broker_id}                            load report; lease
    /{cluster}/unassigned/{ns}/{topic}                     placement requests
    /{cluster}/owners/{ns}/{topic}                         ownership {broker_id}; epoch = mod_revision
    /{cluster}/assignments/{broker_id}/{ns}/{topic}        the same ownership, per broker (watched)
    /{cluster}/leaders/{role}                              election keys
    /{cluster}/load_report                                 aggregated report
    /{cluster}/rebalance/plans/{plan_id}                   plans and their status
    /{cluster}/namespaces/{ns}                             namespace policies
    /{cluster}/topics/{ns}/{topic}                         topic metadata
    /{cluster}/topics/{ns}/{topic}/subscriptions/{sub}     subscription metadata
    /{cluster}/topics/{ns}/{topic}/subscriptions/{sub}/cursor   acked cursor (reliable)
    /{cluster}/topics/{ns}/{topic}/subscriptions/{sub}/policy   failure policy (reliable)
    /{cluster}/storage/{ns}/{topic}/segments/{start:020d}  segment descriptors
    /{cluster}/schemas/{subject}/...                       schema registry
    /{cluster}/auth/...                                    roles and bindings
    /{cluster}/counters/{name}                             monotonic id allocation

Topic-scoped keys take the parsed TopicName so a malformed name can never become a key.
"""

from __future__ import annotations

from dataclasses import dataclass

from danube_common.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class Keys:
    cluster: str

    @property
    def root(self) -> str:
        return f"/{self.cluster}/"

    # ---- brokers
    def brokers_prefix(self) -> str:
        return f"/{self.cluster}/brokers/"

    def broker(self, broker_id: str) -> str:
        return f"/{self.cluster}/brokers/{broker_id}"

    def load_prefix(self) -> str:
        return f"/{self.cluster}/load/"

    def load(self, broker_id: str) -> str:
        return f"/{self.cluster}/load/{broker_id}"

    # ---- placement and ownership
    def unassigned_prefix(self) -> str:
        return f"/{self.cluster}/unassigned/"

    def unassigned(self, topic: TopicName) -> str:
        return f"/{self.cluster}/unassigned/{topic.namespace}/{topic.local}"

    def owners_prefix(self) -> str:
        return f"/{self.cluster}/owners/"

    def owner(self, topic: TopicName) -> str:
        return f"/{self.cluster}/owners/{topic.namespace}/{topic.local}"

    def parse_owner(self, key: str) -> TopicName | None:
        prefix = self.owners_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        return TopicName(parts[0], parts[1]) if len(parts) == 2 else None

    def assignments_prefix(self) -> str:
        return f"/{self.cluster}/assignments/"

    def broker_assignments_prefix(self, broker_id: str) -> str:
        return f"/{self.cluster}/assignments/{broker_id}/"

    def assignment(self, broker_id: str, topic: TopicName) -> str:
        return f"/{self.cluster}/assignments/{broker_id}/{topic.namespace}/{topic.local}"

    def parse_assignment(self, key: str) -> tuple[str, TopicName] | None:
        """``/{cluster}/assignments/{broker}/{ns}/{topic}`` -> (broker, topic); None if not one."""
        prefix = self.assignments_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) != 3:
            return None
        return parts[0], TopicName(parts[1], parts[2])

    # ---- control plane
    def leader(self, role: str) -> str:
        return f"/{self.cluster}/leaders/{role}"

    def load_report(self) -> str:
        return f"/{self.cluster}/load_report"

    def rebalance_plan(self, plan_id: str) -> str:
        return f"/{self.cluster}/rebalance/plans/{plan_id}"

    # ---- namespaces and topics
    def namespaces_prefix(self) -> str:
        return f"/{self.cluster}/namespaces/"

    def namespace(self, ns: str) -> str:
        return f"/{self.cluster}/namespaces/{ns}"

    def topics_prefix(self, ns: str | None = None) -> str:
        return f"/{self.cluster}/topics/{ns}/" if ns else f"/{self.cluster}/topics/"

    def topic(self, topic: TopicName) -> str:
        return f"/{self.cluster}/topics/{topic.namespace}/{topic.local}"

    def parse_topic(self, key: str) -> TopicName | None:
        """A topic metadata key -> TopicName; None for keys below a topic (subscriptions)."""
        prefix = self.topics_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) != 2:
            return None
        return TopicName(parts[0], parts[1])

    def subscriptions_prefix(self, topic: TopicName) -> str:
        return f"{self.topic(topic)}/subscriptions/"

    def subscription(self, topic: TopicName, sub: str) -> str:
        return f"{self.topic(topic)}/subscriptions/{sub}"

    def subscription_cursor(self, topic: TopicName, sub: str) -> str:
        """``{"cursor": N}``: every offset <= N is acknowledged (written by the owning broker)."""
        return f"{self.topic(topic)}/subscriptions/{sub}/cursor"

    def subscription_policy(self, topic: TopicName, sub: str) -> str:
        """The subscription's failure policy (written by admins, read by the owning broker)."""
        return f"{self.topic(topic)}/subscriptions/{sub}/policy"

    # ---- storage, schemas, auth, counters
    def segments_prefix(self, topic: TopicName) -> str:
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/segments/"

    def segment(self, topic: TopicName, start_offset: int) -> str:
        return f"{self.segments_prefix(topic)}{start_offset:020d}"

    def schemas_prefix(self) -> str:
        return f"/{self.cluster}/schemas/"

    def auth_prefix(self) -> str:
        return f"/{self.cluster}/auth/"

    def counter(self, name: str) -> str:
        return f"/{self.cluster}/counters/{name}"
