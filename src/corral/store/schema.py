"""The one schema both stores share. Alembic migrations create it; the code reads it from here."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    false,
    literal_column,
)
from sqlalchemy.sql.elements import ColumnElement

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("state", String(20), nullable=False),
    Column("gang", Boolean, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("replicas", Integer, nullable=False),
    Column("max_task_failures", Integer, nullable=False),
    Column("max_retries_failure", Integer, nullable=False),
    Column("max_retries_preemption", Integer, nullable=False),
    Column("scheduling_timeout", Float),
    # The terminal state a TERMINATING job is bound for; cancelled wins over it.
    Column("outcome", String(20)),
    Column("cancelled", Boolean, nullable=False, default=False),
    Column("pending_reason", Text),
    Column("tries", Integer, nullable=False, default=0),
    Column("idempotency_key", String(200), unique=True),
    Column("created_at", Float, nullable=False),
    Column("state_since", Float, nullable=False),
    Column("finished_at", Float),
    # Preemption: a counter bumped by every preemption order (a gang drain, a priority preemption),
    # the index of the task whose end started the last gang drain, and the SIGTERM grace period.
    Column("preemption_epoch", Integer, nullable=False, default=0, server_default="0"),
    Column("drain_trigger", Integer),
    Column("grace_period", Float, nullable=False, default=15.0, server_default="15"),
    # The job whose task submitted this one (corral.current()); the cancel cascade follows it.
    Column("launched_by", Integer),
    # The retry chain (core/retries.py): the job a retry was created from, the chain's first job,
    # this job's place in it, its effective policy, and when its own retry is due.
    Column("parent_job_id", Integer),
    Column("retry_root_id", Integer),
    Column("retry_count", Integer, nullable=False, default=0, server_default="0"),
    Column("max_retries", Integer, nullable=False, default=0, server_default="0"),
    Column("retry_policy", JSON),
    Column("retry_cause", String(32)),
    Column("retry_state", String(16)),
    Column("retry_due_at", Float),
    # Who submitted it (a user's name; "admin" for the admin token); a job token's submission is its job's owner's.
    Column("owner", String(64), nullable=False, server_default="admin"),
    Index("ix_jobs_state", "state"),
    Index("ix_jobs_launched_by", "launched_by"),
    Index("ix_jobs_name", "name"),  # the dashboard sorts 100k jobs by name
    Index("ix_jobs_retry", "retry_state", "retry_due_at"),
    Index("ix_jobs_retry_root", "retry_root_id"),
    Index("ix_jobs_parent", "parent_job_id"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("index", Integer, nullable=False),
    Column("state", String(20), nullable=False),
    Column("state_since", Float, nullable=False),
    Column("attempt", Integer, nullable=False, default=0),
    Column("tries", Integer, nullable=False, default=0),
    Column("failures", Integer, nullable=False, default=0),
    Column("preemptions", Integer, nullable=False, default=0),
    Column("worker_id", String(64)),
    Column("gpu_ids", JSON, nullable=False, default=list),
    # The reservation, copied from the spec so capacity sums need no JSON parsing.
    Column("cpu", Float, nullable=False),
    Column("memory", BigInteger, nullable=False),
    Column("gpu", Float, nullable=False),  # whole devices, or a share of one (0.01-0.99)
    Column("exit_code", Integer),
    Column("reason", Text),
    # The epoch of the task's last preemption order; an acknowledgement must carry it.
    Column("preempt_epoch", Integer),
    # The last checkpoint the task uploaded while PREEMPTING: its epoch and size (the bytes live in files).
    Column("checkpoint_epoch", Integer),
    Column("checkpoint_size", BigInteger),
    Column("port", Integer),  # the $PORT its worker gave a serving task (allocate_port)
    UniqueConstraint("job_id", "index"),
    Index("ix_tasks_state", "state"),
    Index("ix_tasks_worker_state", "worker_id", "state"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("worker_id", String(64)),
    Column("state", String(20), nullable=False),
    Column("exit_code", Integer),
    Column("reason", Text),
    Column("assigned_at", Float),
    Column("started_at", Float),
    Column("finished_at", Float),
    # A stopped gang sibling's attempt costs no retry budget (the drain's refund rule).
    Column("refunded", Boolean, nullable=False, default=False, server_default=false()),
    Column("oom_killed", Boolean, nullable=False, default=False, server_default=false()),
    Column("world", JSON),  # where it started and with which environment, as its worker reported (AttemptWorld)
    Index("ix_attempts_finished", "finished_at"),  # the start estimates learn durations from the latest
)

workers = Table(
    "workers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("address", String(200), nullable=False),
    Column("state", String(20), nullable=False),
    Column("cpu", Float, nullable=False),
    Column("memory", BigInteger, nullable=False),
    Column("gpu", Integer, nullable=False),
    Column("gpu_names", JSON, nullable=False, default=list),
    Column("labels", JSON, nullable=False, default=dict),
    Column("pool", String(100), nullable=False, server_default="default"),
    Column("custom", JSON),  # custom resource slots offered, by name
    Column("gpu_devices", JSON),  # per GPU: index, model, memory, uuid (NVML)
    Column("gpu_readings", JSON),  # per GPU: index, memory used and total, utilization (NVML, last heartbeat)
    Column("filesystem", String(64)),  # the id of the file system its tasks see (corral.filesystem)
    Column("shared_fs", JSON),  # directories it shares with submitters on other machines (--shared-fs)
    Column("pythons", JSON),  # versions of the Python interpreters it can build environments with
    Column("environments", JSON),  # its cached environments: key, python, bytes, last use (CachedEnvironment)
    Column("run_as_owners", Boolean, nullable=False, default=False, server_default=false()),  # root: as owners
    Column("account", String(64)),  # the local account it runs as (its tasks too, unless run as their owners)
    Column("last_heartbeat", Float, nullable=False),
    Column("registered_at", Float, nullable=False),
    Index("ix_workers_state", "state"),
)

history = Table(
    "history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("job_id", Integer),  # None for a worker's own events
    Column("task_id", Integer),
    Column("attempt", Integer),
    Column("handler", String(64), nullable=False),
    Column("result", String(20), nullable=False),
    Column("from_state", String(20)),
    Column("to_state", String(20)),
    Column("message", Text),
    Column("worker_id", String(64)),  # set on a worker's own events (registered, lost)
    Column("deployment_id", Integer),  # set on a deployment's and its replicas' events
    Column("replica_id", Integer),
    Column("event", String(64)),  # the event type its table row or verdict declares; None: read from its shape
    Column("repeats", Integer, nullable=False, server_default="1"),  # a wait seen again with the same reason
    Column("last_at", Float),  # when it was last seen again
    Index("ix_history_job", "job_id", "id"),
    Index("ix_history_deployment", "deployment_id", "id"),
    Index("ix_history_at", "at"),
)


def wait_record(table) -> ColumnElement[bool]:
    """A job's own wait record (a SKIPPED row of no task) in `history` or an alias of it: the rows a wait seen again
    is counted on. The result is written into the statement, not bound, so that both stores' planners see it imply
    the partial index below (a generic plan of PostgreSQL's could not use it for a parameter)."""
    return and_(table.c.result == literal_column("'SKIPPED'"), table.c.task_id.is_(None))


# The wait records of each job and handler, latest last: a wait seen again finds the record it counts on at once,
# where `ix_history_job` walked the job's whole history (an array's task rows among it). Only the wait records are
# in it, so the other history rows cost no entry.
Index("ix_history_waits", history.c.job_id, history.c.handler, history.c.id,
      sqlite_where=wait_record(history), postgresql_where=wait_record(history))

# Channels clients opened into running tasks through the controller's relay (corral.core.relay): a terminal, an
# exec or a forwarded TCP connection. A row is written when the client connects (opening), marked open when the
# worker dials back, and closed when either side ends; workers learn of opening rows from their heartbeat reply.
attachments = Table(
    "attachments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session", String(64), nullable=False, unique=True),  # the id the worker dials back with
    Column("job_id", Integer, nullable=False),
    Column("task_id", Integer, nullable=False),
    Column("task_index", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("worker_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),  # terminal, exec, port
    Column("detail", JSON, nullable=False),  # the order's own fields: command, tty, port, watch, rows, cols
    Column("actor", String(64), nullable=False),  # who: "admin", or "job N" for a job's token
    Column("address", String(100)),  # the client's address, as the controller saw it
    Column("state", String(16), nullable=False),  # opening, open, closed, failed
    Column("opened_at", Float, nullable=False),
    Column("connected_at", Float),
    Column("closed_at", Float),
    Column("close_code", Integer),
    Column("close_reason", Text),
    Index("ix_attachments_worker", "worker_id", "state"),
    Index("ix_attachments_job", "job_id", "id"),
)

# Retry policy defaults set by an admin: kind "cluster" (name "") or "project" (name = the project).
retry_defaults = Table(
    "retry_defaults",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("policy", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# Actions the controller took on its own or an admin took, kept for people to audit.
audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("job_id", Integer),
    Column("detail", JSON, nullable=False),
    # A call to the API (corral.controller.audit): the caller's role, the object acted on, from where, and the
    # outcome (the HTTP status). None on the controller's own actions.
    Column("role", String(20)),
    Column("object", String(200)),
    Column("address", String(100)),
    Column("outcome", Integer),
    Index("ix_audit_job", "job_id", "id"),
    Index("ix_audit_at", "at"),
    Index("ix_audit_actor", "actor", "id"),
)

# People: a user is a name with personal tokens, a cluster-wide admin flag, and a role per project (memberships).
users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("cluster_admin", Boolean, nullable=False, default=False),
    Column("unix_user", String(32)),  # the local account its tasks run as on workers that run as root
    Column("created_at", Float, nullable=False),
    Column("disabled_at", Float),
)

memberships = Table(
    "memberships",
    metadata,
    Column("user_id", Integer, primary_key=True),
    Column("project", String(100), primary_key=True),
    Column("role", String(20), nullable=False),  # corral.core.roles.Role: project-admin, member, viewer
    Column("updated_at", Float, nullable=False),
    Index("ix_memberships_project", "project"),
)

# Personal tokens: shown once, stored as their sha256, revocable, optionally expiring.
user_tokens = Table(
    "user_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user_id", Integer, nullable=False),
    Column("name", String(100), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),  # the token's first characters, to tell tokens apart
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("revoked_at", Float),
    Column("last_used_at", Float),
    Index("ix_user_tokens_user", "user_id"),
)

# Scheduling policy, set from the controller's config file or the admin API.
pools = Table(
    "pools",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("policy", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
)

quotas = Table(
    "quotas",
    metadata,
    Column("project", String(100), primary_key=True),
    Column("limits", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# Bearer tokens of a project: they call its deployments through the router. Only the hash is kept.
project_tokens = Table(
    "project_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project", String(100), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("owner", String(64), nullable=False, server_default="admin"),
    Index("ix_project_tokens_project", "project"),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(63), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("state", String(20), nullable=False),
    Column("state_since", Float, nullable=False),
    Column("tries", Integer, nullable=False, default=0),
    # Replicas wanted now: between min and max, or 0 when scaled to zero by the router.
    Column("replicas", Integer, nullable=False),
    Column("owner", String(64), nullable=False, server_default="admin"),
    # sha256 of the keys that may call it through the router (besides the admin token).
    Column("key_hashes", JSON, nullable=False, default=list),
    # Replicas in a row that ended before they served, and when the last did: the replacement backoff.
    Column("failed_starts", Integer, nullable=False, default=0, server_default="0"),
    Column("failed_start_at", Float),
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float),
    Index("ix_deployments_state", "state"),
    Index("ix_deployments_name", "name"),
)

replicas = Table(
    "replicas",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("deployment_id", Integer, ForeignKey("deployments.id"), nullable=False),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("state", String(20), nullable=False),
    Column("state_since", Float, nullable=False),
    Column("address", String(200)),  # host:port once its process runs
    Column("reason", Text),
    Column("created_at", Float, nullable=False),
    Column("healthy_at", Float),  # when it first passed its health check: it served
    Index("ix_replicas_deployment_state", "deployment_id", "state"),
)

# Settings every controller of the cluster shares: the admin and join tokens.
cluster_settings = Table(
    "cluster_settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# Each pending job's latest start estimate (corral.engine.estimates), replaced every few seconds; gone once it starts.
start_estimates = Table(
    "start_estimates",
    metadata,
    Column("job_id", Integer, primary_key=True),
    Column("made_at", Float, nullable=False),
    Column("start_at", Float),  # None: unknown (see `unknown`)
    Column("all_started_at", Float),  # when its last pending task starts
    Column("after_job", Integer),  # the job whose end frees its room, or which it waits for
    Column("basis", Text, nullable=False),  # how the running tasks' ends were known, in words
    Column("unknown", Text),  # why no start is known
    Column("never", Boolean, nullable=False, server_default=false()),  # nothing present could ever hold it
)

# Every estimate made that moved (the first, and each that moved past the noise), held to account: `started_at` is
# written when the job starts, and the error is start_at - started_at.
estimate_records = Table(
    "estimate_records",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("made_at", Float, nullable=False),
    Column("start_at", Float, nullable=False),
    Column("started_at", Float),
    Index("ix_estimate_records_job", "job_id"),
    Index("ix_estimate_records_started", "started_at"),
)

# The controllers serving this store: each upserts its row every second and deletes it when it stops.
controllers = Table(
    "controllers",
    metadata,
    Column("id", String(200), primary_key=True),  # host:pid:start
    Column("url", String(300), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("host", String(200), nullable=False),
    Column("version", String(50), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("seen_at", Float, nullable=False),
    Column("handlers", JSON, nullable=False),  # {handler name: when this controller last ran it}
    Column("last_pass_at", Float),
)

# Webhook deliveries of job notifications (corral.core.webhooks): an outbox filled from the event stream and
# emptied by the sender. A row is due at `next_try_at`; delivered or given up, that is None.
deliveries = Table(
    "deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("url", String(2048), nullable=False),
    Column("event", String(64), nullable=False),
    Column("body", JSON, nullable=False),  # the body less its delivery id
    Column("tries", Integer, nullable=False, default=0),
    Column("next_try_at", Float),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float),
    Column("gave_up_at", Float),
    Column("last_error", Text),
    Index("ix_deliveries_next_try_at", "next_try_at"),
    Index("ix_deliveries_job", "job_id", "id"),
)

# A project's default notify URL: used by its jobs that name none.
project_notify = Table(
    "project_notify",
    metadata,
    Column("project", String(100), primary_key=True),
    Column("url", String(2048), nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_by", String(64), nullable=False),
)
