"""Every etcd key of the system, built in this one module under a per-cluster root.

Layout (values are JSON unless noted)::

    /{cluster}/brokers/{broker_id}                         registration; lease
    /{cluster}/load/{broker_id}                            load report; lease
    /{cluster}/broker_states/{broker_id}                   admin state {state}: draining, drained, active
    /{cluster}/move_requests/{ns}/{topic}                  topic move requests {to} (admin -> load manager)
    /{cluster}/unassigned/{ns}/{topic}                     placement requests
    /{cluster}/owners/{ns}/{topic}                         ownership {broker_id}; epoch = mod_revision
    /{cluster}/assignments/{broker_id}/{ns}/{topic}        the same ownership, per broker (watched)
    /{cluster}/leaders/{role}                              election keys
    /{cluster}/load_report                                 aggregated report
    /{cluster}/rebalance/plans/{plan_id}                   plans and their status
    /{cluster}/rebalance/requests/{request_id}             on-demand planner cycle requests
    /{cluster}/pinned/{ns}/{topic}                         topics the planner never moves
    /{cluster}/namespaces/{ns}                             namespace policies
    /{cluster}/topics/{ns}/{topic}                         topic metadata
    /{cluster}/topics/{ns}/{topic}/subscriptions/{sub}     subscription metadata
    /{cluster}/topics/{ns}/{topic}/subscriptions/{sub}/cursor   acked cursor (reliable)
    /{cluster}/subscription_policies/{ns}/{topic}/{sub}    failure policy (reliable; apart from the
                                                           cursors so one broker-wide watch sees only policies)
    /{cluster}/storage/{ns}/{topic}/state                  the log's current writer (stint) or where it ended
    /{cluster}/storage/{ns}/{topic}/reserved               offsets the current writer may assign (below reserved_to)
    /{cluster}/storage/{ns}/{topic}/gaps/{start:020d}      offsets lost by an accepted unclean takeover
    /{cluster}/storage/{ns}/{topic}/uploaded               uploader checkpoint {next_offset}
    /{cluster}/storage/{ns}/{topic}/segments/{start:020d}  segment descriptors
    /{cluster}/uploaders/{broker_id}                       a running WAL uploader of that broker; lease
    /{cluster}/schemas/subjects/{subject}                  a subject: {schema_id, schema_type, compatibility_mode, latest_version}
    /{cluster}/schemas/subjects/{subject}/versions/{v:010d}  one version: definition, fingerprint, author
    /{cluster}/schemas/ids/{schema_id}                     schema id -> subject (ids are unique cluster-wide)
    /{cluster}/schemas/next_id                             the next schema id to allocate {next}
    /{cluster}/schemas/topics/{ns}/{topic}                 a topic's schema: {subject, validation_policy, ...}
    /{cluster}/auth/roles/{role}                           an RBAC role: {permissions, description}
    /{cluster}/auth/bindings/{binding}                     a role binding: {principal, role, scope, resource}
    /{cluster}/counters/{name}                             reserved: id allocation (nothing uses it yet)

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

    def broker_states_prefix(self) -> str:
        return f"/{self.cluster}/broker_states/"

    def broker_state(self, broker_id: str) -> str:
        """``{"state": "draining" | "drained" | "active"}`` set by admins and the load manager.

        Not leased: a drained broker that restarts stays drained until activated.
        """
        return f"/{self.cluster}/broker_states/{broker_id}"

    def move_requests_prefix(self) -> str:
        return f"/{self.cluster}/move_requests/"

    def move_request(self, topic: TopicName) -> str:
        """``{"to": broker_id | ""}``: an admin asks the load manager to move a topic."""
        return f"/{self.cluster}/move_requests/{topic.namespace}/{topic.local}"

    def parse_topic_suffix(self, prefix: str, key: str) -> TopicName | None:
        """``{prefix}{ns}/{topic}`` -> TopicName (None if ``key`` is not exactly that)."""
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) != 2:
            return None
        return TopicName(parts[0], parts[1])

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

    def leaders_prefix(self) -> str:
        return f"/{self.cluster}/leaders/"

    def leader_candidates_prefix(self, role: str) -> str:
        """Every candidate of ``role`` (the trailing ``/`` keeps ``lm`` apart from ``lm-2``)."""
        return f"{self.leader(role)}/"

    def leader_candidate(self, role: str, candidate_id: str) -> str:
        """``{candidate_id, metadata, ttl_s}``; leased. The live key with the lowest
        create_revision leads the role, and that revision is its term (fencing token)."""
        return f"{self.leader(role)}/{candidate_id}"

    def parse_leader_candidate(self, key: str) -> tuple[str, str] | None:
        """``/{cluster}/leaders/{role}/{candidate_id}`` -> (role, candidate_id); None if not one."""
        prefix = self.leaders_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            return None
        return parts[0], parts[1]

    def load_report(self) -> str:
        return f"/{self.cluster}/load_report"

    def rebalance_plan(self, plan_id: str) -> str:
        return f"/{self.cluster}/rebalance/plans/{plan_id}"

    def rebalance_plans_prefix(self) -> str:
        """Every rebalancing plan; plan ids start with the creation time, so key order is age order."""
        return f"/{self.cluster}/rebalance/plans/"

    def rebalance_requests_prefix(self) -> str:
        return f"/{self.cluster}/rebalance/requests/"

    def rebalance_request(self, request_id: str) -> str:
        """``{"requested_at_ms", "by"}``: ask the planner for a cycle now (an admin command writes
        it; the planner deletes it once the cycle's report, and plan if any, are written)."""
        return f"/{self.cluster}/rebalance/requests/{request_id}"

    def pinned_prefix(self) -> str:
        return f"/{self.cluster}/pinned/"

    def pinned(self, topic: TopicName) -> str:
        """``{"by", "reason", "at_ms"}`` (any JSON): an admin pinned the topic to its broker; the
        rebalancing planner never plans a move of it."""
        return f"/{self.cluster}/pinned/{topic.namespace}/{topic.local}"

    # ---- namespaces and topics
    def namespaces_prefix(self) -> str:
        return f"/{self.cluster}/namespaces/"

    def namespace(self, ns: str) -> str:
        return f"/{self.cluster}/namespaces/{ns}"

    def topic_policies(self, topic: TopicName) -> str:
        """A topic's own limits over its namespace's (under the namespace, so the brokers'
        namespace policy watch carries them)."""
        return f"{self.topic_policies_prefix(topic.namespace)}{topic.local}"

    def topic_policies_prefix(self, ns: str) -> str:
        """Every topic's own limits in namespace ``ns`` (the key ends with the topic's local name)."""
        return f"/{self.cluster}/namespaces/{ns}/topic_policies/"

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

    def subscription_policies_prefix(self, topic: TopicName | None = None) -> str:
        """Every subscription policy (``topic`` None: of every topic; the broker watches this)."""
        base = f"/{self.cluster}/subscription_policies/"
        return base if topic is None else f"{base}{topic.namespace}/{topic.local}/"

    def subscription_policy(self, topic: TopicName, sub: str) -> str:
        """The subscription's failure policy (written by admins, read and watched by the owning
        broker). Not under the topic's subscriptions: the cursors written there are not watched."""
        return f"{self.subscription_policies_prefix(topic)}{sub}"

    def parse_subscription_policy(self, key: str) -> tuple[TopicName, str] | None:
        """A ``subscription_policy`` key -> (topic, subscription); None for any other key."""
        prefix = self.subscription_policies_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) != 3 or not all(parts):
            return None
        return TopicName(parts[0], parts[1]), parts[2]

    # ---- storage, schemas, auth, counters
    def segments_prefix(self, topic: TopicName) -> str:
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/segments/"

    def storage_topic_prefix(self, topic: TopicName) -> str:
        """Everything stored about one reliable topic's log (deleted with the topic)."""
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/"

    def storage_state(self, topic: TopicName) -> str:
        """The log record (``danube_common.log_state.LogState``): which broker writes the log now,
        from which offset, at which ownership epoch, or where the last writer's log ended."""
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/state"

    def storage_reservation(self, topic: TopicName) -> str:
        """``{"reserved_to", "writer", "state_revision"}``: the current writer never assigns an
        offset at or above ``reserved_to`` (an unclean takeover starts there)."""
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/reserved"

    def storage_gaps_prefix(self, topic: TopicName) -> str:
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/gaps/"

    def storage_gap(self, topic: TopicName, start_offset: int) -> str:
        """An accepted loss: offsets ``[start_offset, next_offset)`` are skipped by readers."""
        return f"{self.storage_gaps_prefix(topic)}{start_offset:020d}"

    def upload_checkpoint(self, topic: TopicName) -> str:
        """``{"next_offset": N}``: every offset below N is in object storage (the WAL uploader)."""
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/uploaded"

    def compaction(self, topic: TopicName) -> str:
        """The topic's compacted view (``danube_broker.compaction.CompactionInfo``): its horizon,
        size, CRC32C and object key; written by the owner, fenced on its epoch."""
        return f"/{self.cluster}/storage/{topic.namespace}/{topic.local}/compaction"

    def storage_prefix(self) -> str:
        return f"/{self.cluster}/storage/"

    def segment(self, topic: TopicName, start_offset: int) -> str:
        return f"{self.segments_prefix(topic)}{start_offset:020d}"

    # ---- WAL uploaders
    def uploaders_prefix(self) -> str:
        return f"/{self.cluster}/uploaders/"

    def uploader(self, broker_id: str) -> str:
        """``{"broker_id", "addr", "started_at_ms"}``; leased. A WAL uploader serving ``broker_id``'s
        data directory is running (when that broker dies, it records where its logs end)."""
        return f"/{self.cluster}/uploaders/{broker_id}"

    # ---- schema registry
    def schemas_prefix(self) -> str:
        return f"/{self.cluster}/schemas/"

    def schema_subjects_prefix(self) -> str:
        return f"/{self.cluster}/schemas/subjects/"

    def schema_subject(self, subject: str) -> str:
        return f"/{self.cluster}/schemas/subjects/{subject}"

    def schema_versions_prefix(self, subject: str) -> str:
        return f"/{self.cluster}/schemas/subjects/{subject}/versions/"

    def schema_version(self, subject: str, version: int) -> str:
        return f"{self.schema_versions_prefix(subject)}{version:010d}"

    def parse_schema_key(self, key: str) -> tuple[str, int | None] | None:
        """``(subject, None)`` for a subject key, ``(subject, version)`` for a version key."""
        prefix = self.schema_subjects_prefix()
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix) :].split("/")
        if len(parts) == 1 and parts[0]:
            return parts[0], None
        if len(parts) == 3 and parts[1] == "versions" and parts[2].isdigit():
            return parts[0], int(parts[2])
        return None

    def schema_id(self, schema_id: int) -> str:
        return f"/{self.cluster}/schemas/ids/{schema_id}"

    def schema_next_id(self) -> str:
        return f"/{self.cluster}/schemas/next_id"

    def topic_schemas_prefix(self) -> str:
        return f"/{self.cluster}/schemas/topics/"

    def topic_schema(self, topic: TopicName) -> str:
        """The topic's schema configuration (under the registry's prefix, so one watch sees
        every schema change; deleted with the topic)."""
        return f"{self.topic_schemas_prefix()}{topic.namespace}/{topic.local}"

    def parse_topic_schema(self, key: str) -> TopicName | None:
        return self.parse_topic_suffix(self.topic_schemas_prefix(), key)

    def auth_prefix(self) -> str:
        """Everything of RBAC (roles and bindings): one watch sees every change."""
        return f"/{self.cluster}/auth/"

    def auth_roles_prefix(self) -> str:
        return f"/{self.cluster}/auth/roles/"

    def auth_role(self, role: str) -> str:
        return f"/{self.cluster}/auth/roles/{role}"

    def auth_bindings_prefix(self) -> str:
        return f"/{self.cluster}/auth/bindings/"

    def auth_binding(self, name: str) -> str:
        return f"/{self.cluster}/auth/bindings/{name}"

    def parse_auth_key(self, key: str) -> tuple[str, str] | None:
        """``("role", name)`` or ``("binding", name)`` for an auth key; None for anything else."""
        for kind, prefix in (("role", self.auth_roles_prefix()), ("binding", self.auth_bindings_prefix())):
            if key.startswith(prefix):
                name = key[len(prefix) :]
                return (kind, name) if name and "/" not in name else None
        return None

    def counter(self, name: str) -> str:
        return f"/{self.cluster}/counters/{name}"
