"""Reading the event stream out of the history table, and pruning it to the retention window."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cache

from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, exists, func, null, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from corral.core.events import Stamp, event_type, ready
from corral.core.states import JOB_TERMINAL
from corral.core.views import EventView
from corral.scheduling.policy import DEFAULT_PROJECT
from corral.store.schema import deployments, history, jobs, tasks

PAGE = 500  # rows per read; a subscriber that is behind reads page after page


def only(query: Select, job: bool, deployment: bool, projects: bool) -> Select:
    """The query narrowed to one job's events (`job_id`), or to those of every deployment ever named `deployment`,
    or to the events of the jobs and deployments of `projects`: the values are bound at each execution
    (`narrowing`)."""
    if job:
        query = query.where(history.c.job_id == bindparam("job_id"))
    if deployment:
        named = select(deployments.c.id).where(deployments.c.name == bindparam("deployment"))
        query = query.where(history.c.deployment_id.in_(named))
    if projects:  # looked up row by row (by primary key), not over every job at each read
        chosen = bindparam("projects", expanding=True)
        of_job = aliased(jobs)
        of_deployment = aliased(deployments)
        query = query.where(or_(
            exists().where(of_job.c.id == history.c.job_id, _project(of_job.c.spec).in_(chosen)),
            exists().where(of_deployment.c.id == history.c.deployment_id,
                           _project(of_deployment.c.spec).in_(chosen))))
    return query


def narrowing(job_id: int | None, deployment: str | None, projects: Collection[str] | None) -> dict:
    """The values `only` binds: one job, the deployments of a name, the projects (None: every event)."""
    return {"job_id": job_id, "deployment": deployment, "projects": None if projects is None else sorted(projects)}


def _shape(values: dict) -> tuple[bool, bool, bool]:
    return values["job_id"] is not None, values["deployment"] is not None, values["projects"] is not None


def _project(spec):
    """A job's or deployment's project, as its spec names it (the default project where it names none)."""
    return func.coalesce(spec["project"].as_string(), DEFAULT_PROJECT)


def _events() -> Select:
    return (select(history, tasks.c.index.label("task_index"), deployments.c.name.label("deployment"))
            .select_from(history.outerjoin(tasks, history.c.task_id == tasks.c.id)
                         .outerjoin(deployments, history.c.deployment_id == deployments.c.id))
            .order_by(history.c.id))


async def _read(connection: AsyncConnection, query: Select, values: dict | None = None) -> list[EventView]:
    return [
        EventView(id=r.id, type=event_type(r.job_id, r.task_id, r.handler, r.result, r.to_state, r.deployment_id,
                                           r.replica_id, r.event),
                  at=r.at, job_id=r.job_id, task_id=r.task_id, task_index=r.task_index, attempt=r.attempt,
                  worker_id=r.worker_id, deployment_id=r.deployment_id, deployment=r.deployment,
                  replica_id=r.replica_id, handler=r.handler, result=r.result, from_state=r.from_state,
                  to_state=r.to_state, message=r.message)
        for r in (await connection.execute(query, values)).all()
    ]


async def read_events(connection: AsyncConnection, after: int, job_id: int | None = None,
                      limit: int = PAGE, upto: int | None = None, deployment: str | None = None,
                      projects: Collection[str] | None = None) -> list[EventView]:
    """Events with an id above `after` (and at most `upto`), oldest first."""
    values = narrowing(job_id, deployment, projects)
    return await _read(connection, _events_after(*_shape(values), upto is not None),
                       {**values, "after": after, "limit": limit, "upto": upto})


@cache
def _events_after(job: bool, deployment: bool, projects: bool, upto: bool) -> Select:
    """read_events' statement, built once per narrowing: building a statement of two joins and its cache key costs
    some ten times what running it does on a small read, and the stream reads at every commit."""
    query = _events().where(history.c.id > bindparam("after")).limit(bindparam("limit"))
    if upto:
        query = query.where(history.c.id <= bindparam("upto"))
    return only(query, job, deployment, projects)


async def job_events(connection: AsyncConnection, after: int, upto: int, limit: int = PAGE) -> list[EventView]:
    """The events of jobs themselves (not of their tasks, of workers or of deployments) with an id above `after`
    and at most `upto`, oldest first: the rows a job's notifications come from, a few per job where its tasks'
    moves are several per task."""
    return await _read(connection, _JOB_EVENTS, {"after": after, "upto": upto, "limit": limit})


_JOB_EVENTS = _events().where(history.c.id > bindparam("after"), history.c.id <= bindparam("upto"),
                              history.c.job_id.is_not(None), history.c.task_id.is_(None),
                              history.c.deployment_id.is_(None)).limit(bindparam("limit"))


async def job_event_ids(connection: AsyncConnection, after: int, upto: int, limit: int = PAGE) -> list[tuple[int, int]]:
    """The ids and job ids of the rows `job_events` reads (the same rows, the same page), without their columns,
    joins or views: what the notification pass needs to know that none of them can be a delivery."""
    return [tuple(row) for row in (await connection.execute(_JOB_EVENT_IDS, {"after": after, "upto": upto,
                                                                             "limit": limit})).all()]


_JOB_EVENT_IDS = (select(history.c.id, history.c.job_id)
                  .where(history.c.id > bindparam("after"), history.c.id <= bindparam("upto"),
                         history.c.job_id.is_not(None), history.c.task_id.is_(None),
                         history.c.deployment_id.is_(None))
                  .order_by(history.c.id).limit(bindparam("limit")))


async def latest_by_deployment(connection: AsyncConnection, names: list[str], count: int) -> dict[str, list[EventView]]:
    """The last `count` events of every deployment ever named each of `names`, oldest first: one query for all."""
    ranked = (select(history.c.id, func.row_number().over(partition_by=deployments.c.name,
                                                          order_by=history.c.id.desc()).label("rank"))
              .select_from(history.join(deployments, history.c.deployment_id == deployments.c.id))
              .where(deployments.c.name.in_(names))).subquery()
    latest: dict[str, list[EventView]] = {}
    for event in await _read(connection, _events().where(
            history.c.id.in_(select(ranked.c.id).where(ranked.c.rank <= count)))):
        latest.setdefault(event.deployment, []).append(event)
    return latest


_LATEST_ID = select(func.max(history.c.id))


async def latest_id(connection: AsyncConnection) -> int:
    return (await connection.execute(_LATEST_ID)).scalar() or 0


@dataclass(frozen=True)
class StreamStart:
    """What opening a stream reads: the id to start after so that the last `last` events (of a job, of a
    deployment, of projects) are read (None without `last`), the newest id, and the named job's state and project
    (None: no job named, or no such job)."""

    after_last: int | None
    newest: int
    job_state: str | None
    job_project: str | None


async def stream_start(connection: AsyncConnection, last: int | None, job_id: int | None = None,
                       deployment: str | None = None, projects: Collection[str] | None = None) -> StreamStart:
    """The stream's start, in one statement: one round trip to the store where there were four (the job's project,
    for whether the caller may read it, among them), and the job's state is of the same moment as the start (a move
    to an end the stream leaves out is in it)."""
    values = narrowing(job_id, deployment, projects)
    row = (await connection.execute(_opening(*_shape(values), last is not None), {**values, "count": last})).one()
    newest = row.newest or 0
    after_last = None if last is None else newest if row.first_of_last is None else row.first_of_last - 1
    return StreamStart(after_last, newest, row.job_state, row.job_project)


@cache
def _opening(job: bool, deployment: bool, projects: bool, last: bool) -> Select:
    last_ids = only(select(history.c.id).order_by(history.c.id.desc()).limit(bindparam("count")), job, deployment,
                    projects).subquery()
    first_of_last = select(func.min(last_ids.c.id)).scalar_subquery() if last else null()
    def of_job(column):
        return select(column).where(jobs.c.id == bindparam("job_id")).scalar_subquery() if job else null()

    return select(first_of_last.label("first_of_last"), _LATEST_ID.scalar_subquery().label("newest"),
                  of_job(jobs.c.state).label("job_state"), of_job(_project(jobs.c.spec)).label("job_project"))


async def prune_events(connection: AsyncConnection, older_than: float) -> int:
    """Delete events older than `older_than`, except those of jobs still active and the newest one.

    The newest row stays so that ids never restart (SQLite reuses max(id) + 1), and an active job
    keeps its whole story for `corral info`.
    """
    ended = select(jobs.c.id).where(jobs.c.state.in_([str(s) for s in JOB_TERMINAL]))
    newest = select(func.max(history.c.id)).scalar_subquery()
    result = await connection.execute(
        delete(history).where(
            history.c.at < older_than, history.c.id < newest,
            or_(history.c.job_id.is_(None), history.c.job_id.in_(ended)),
        )
    )
    return max(result.rowcount or 0, 0)


def _young(rows) -> ColumnElement[bool]:
    return and_(rows.c.id > bindparam("after"), rows.c.at > bindparam("since"))


# The horizon's read, built once (a stream runs it at every commit), one statement where there were three: the
# newest id and the highest id below the first young row, then each young row (none: one row of NULLs).
_EARLIER, _FIRST_YOUNG = history.alias("earlier"), history.alias("first_young")
_IDS = select(_LATEST_ID.scalar_subquery().label("newest"), select(func.max(_EARLIER.c.id)).where(
    _EARLIER.c.id < select(func.min(_FIRST_YOUNG.c.id)).where(_young(_FIRST_YOUNG)).scalar_subquery())
    .scalar_subquery().label("below")).subquery()
_YOUNG = (select(_IDS.c.newest, _IDS.c.below, history.c.id, history.c.at)
          .select_from(_IDS.outerjoin(history, _young(history))).order_by(history.c.id))


@dataclass(frozen=True)
class Horizon:
    """`safe`: the highest id that can be sent without skipping a transaction still committing (None: no limit);
    `newest`: the newest id, of the same moment."""

    safe: int | None
    newest: int

    @property
    def reach(self) -> int:
        """The highest id a reader that leaves rows out may move past: the safe one, or the newest where nothing is
        still committing (it would read the rows it leaves out again at every wake otherwise)."""
        return self.newest if self.safe is None else self.safe


async def read_horizon(connection: AsyncConnection, after: int, now: float, settle: float) -> Horizon:
    """Only rows younger than `settle` can follow a gap that is still filling, so only they are read. On SQLite none
    can: its one writer at a time numbers a row past the last committed one, so rows commit in the order of their ids
    and a gap is never filled later; the newest id alone is read (not every row of the last `settle` seconds, which
    the notification pass and every stream did each second)."""
    if connection.dialect.name == "sqlite":
        return Horizon(None, await latest_id(connection))
    rows = (await connection.execute(_YOUNG, {"after": after, "since": now - settle})).all()
    newest = rows[0].newest or 0
    young = [Stamp(r.id, r.at) for r in rows if r.id is not None]
    if not young:
        return Horizon(None, newest)
    base = max(rows[0].below or 0, after)
    count = ready(base, young, now, settle)
    return Horizon(None if count == len(young) else (young[count - 1].id if count else base), newest)
