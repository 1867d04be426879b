"""The planner's configuration: defaults < YAML < ``DANUBE_PLANNER_*`` env < flags."""

from __future__ import annotations

import re
import secrets
from typing import Literal

from pydantic import Field, field_validator

from danube_common.config import Frozen
from danube_common.load_score import ScoreWeights
from danube_common.objstore.config import ObjectStoreConfig
from danube_common.service import ServiceConfig, check_id, check_leader_endpoints

_CONF_KEY = re.compile(r"^spark\.[A-Za-z0-9_.\-]+$")


class SparkSettings(Frozen):
    #: Spark master: local[*] (every core of this machine), local[N], or spark://host:7077 ...
    master: str = "local[*]"
    app_name: str = "danube-planner"
    #: spark.sql.shuffle.partitions; a few suit local runs (Spark's 200 is for big clusters).
    shuffle_partitions: int = Field(default=2, ge=1)
    #: spark.driver.memory (JVM heap of the driver), e.g. "1g".
    driver_memory: str = "1g"
    #: Address the driver binds and advertises (SPARK_LOCAL_IP, spark.driver.host). The
    #: default keeps local runs on loopback; on a cluster, use an address the executors reach.
    driver_host: str = "127.0.0.1"
    #: Spark's web UI (off by default: no port is opened).
    ui_enabled: bool = False
    #: Any other Spark settings, e.g. {"spark.executor.memory": "2g"}.
    conf: dict[str, str] = Field(default_factory=dict)
    #: The Python interpreter the executors run (``PYSPARK_PYTHON``); empty: the planner's own
    #: (``sys.executable``). It must have this project installed (the executors import it).
    python: str = ""
    #: The executors fetch the load history objects themselves (the driver lists them and hands
    #: out the keys), so the driver's work does not grow with the history. They need the object
    #: store: the same ``local_dir`` path, or the S3 endpoint and credentials. False: the driver
    #: fetches the objects and ships their lines to Spark.
    history_on_executors: bool = True
    #: Spark partitions of the history keys (one object-store client each); 0: the default
    #: parallelism (the executor cores).
    history_partitions: int = Field(default=0, ge=0)

    @field_validator("master")
    @classmethod
    def _master(cls, v: str) -> str:
        if not re.match(r"^(local(\[(\*|[0-9]+)(,[0-9]+)?\])?|(spark|yarn|k8s|mesos)(://\S+)?)$", v):
            raise ValueError(
                f"invalid Spark master {v!r}: use local[*], local[N], spark://host:7077, yarn or k8s://..."
            )
        return v

    @field_validator("conf")
    @classmethod
    def _conf(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _CONF_KEY.match(key):
                raise ValueError(f"invalid Spark setting {key!r}: keys look like spark.executor.memory")
        return v


class PlannerConfig(ServiceConfig):
    #: This planner's name in the election (letters, digits, '_', '-', '.'); random if unset.
    candidate_id: str = Field(default_factory=lambda: f"planner-{secrets.token_hex(3)}")
    #: Leader service replicas (danube-leader). Empty: no election; only ``--once`` may run then,
    #: and its writes are not fenced.
    leader_endpoints: list[str] = Field(default_factory=lambda: ["127.0.0.1:6680"])
    #: Lease TTL of our candidacy: a dead planner is replaced after about this long.
    leadership_ttl_s: int = Field(default=10, ge=2)
    #: A campaign stream silent (no heartbeat) for this long counts as broken.
    leader_heartbeat_deadline_s: float = Field(default=3.0, gt=0)
    #: Deadline of each call to the leader service.
    leader_rpc_timeout_s: float = Field(default=5.0, gt=0)
    #: ``--once`` with a leader service: give up if not elected within this long.
    election_timeout_s: float = Field(default=30.0, gt=0)
    #: Seconds between two cycles (a request key starts one sooner).
    interval_s: float = Field(default=60.0, gt=0)
    #: "spark": DataFrames on a SparkSession; "python": the same computation in plain Python
    #: (no Java needed; fine for a few hundred brokers).
    engine: Literal["spark", "python"] = "spark"
    spark: SparkSettings = Field(default_factory=SparkSettings)
    #: Where load history lives (brokers write it; the planner reads and prunes it).
    object_store: ObjectStoreConfig = Field(default_factory=ObjectStoreConfig)
    #: Reports of the last this many seconds (history + current) are averaged per topic.
    history_window_s: float = Field(default=600.0, ge=0)
    #: History partitions older than this are deleted by the leading planner (0: keep forever).
    history_retention_s: float = Field(default=7 * 24 * 3600.0, ge=0)
    #: History objects fetched at once.
    history_read_concurrency: int = Field(default=16, ge=1)
    weights: ScoreWeights = Field(default_factory=ScoreWeights)
    #: Busiest topics listed in the report.
    hot_topics: int = Field(default=20, ge=0)
    #: Namespaces listed in the report (the busiest), to bound its size.
    report_max_namespaces: int = Field(default=1000, ge=0)
    #: No moves are planned while the imbalance (CV of broker scores) is at or below this.
    target_cv: float = Field(default=0.15, ge=0)
    #: Moves per plan.
    max_moves_per_cycle: int = Field(default=10, ge=0)
    #: A topic moved by a plan (pending or done) is not moved again for this long.
    move_cooldown_s: float = Field(default=600.0, ge=0)
    #: A topic is not moved until it has been on its broker this long (owner key assigned_at_ms).
    min_topic_age_s: float = Field(default=300.0, ge=0)
    #: A plan's moves may start until created_at + this; while a plan is pending and not
    #: expired, no new plan is made.
    plan_ttl_s: float = Field(default=300.0, gt=0)
    #: Plans kept in etcd (the newest; older finished or expired ones are deleted, but never
    #: while they still count for a topic's cooldown).
    plans_keep: int = Field(default=50, ge=1)
    #: Deadline of one cycle's computation (a stuck Spark job fails the cycle, not the planner).
    cycle_timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("candidate_id")
    @classmethod
    def _candidate(cls, v: str) -> str:
        return check_id(v, "candidate id")

    @field_validator("leader_endpoints")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        return check_leader_endpoints(v, required=False)
