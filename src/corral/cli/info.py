"""`corral info JOB`: everything about one job, down to why each transition happened."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from corral.cli.common import CliError, client, console, json_option, print_json
from corral.cli.format import (
    age_since,
    format_bytes,
    format_command,
    format_duration,
    format_number,
    format_resources,
    format_time,
    task_summary,
)
from corral.cli.listing import state_text
from corral.client.errors import CorralError
from corral.client.http import Client
from corral.core.attempt_world import AttemptWorld
from corral.core.spec import JobSpec
from corral.core.states import JobState
from corral.core.views import HistoryEntry, JobView, PlacementAnalysis, StartEstimate, TaskView
from corral.core.what_if import WhatIfView

ATTACHMENTS_SHOWN = 20  # open ones first, then the most recent


@click.command()
@click.argument("job_id", type=int, metavar="JOB")
@click.option("--what-if", "what_if", is_flag=True,
              help="For a pending job: the smallest changes that would start it sooner, each with its estimate.")
@json_option
def info(job_id: int, what_if: bool, as_json: bool) -> None:
    """Show a job: its spec, tasks, attempts and the history of its transitions."""
    api = client()
    job, tasks, history = api.get(job_id), api.tasks(job_id), api.history(job_id)
    if what_if and job.state != JobState.PENDING:
        raise CliError(f"job {job_id} is {job.state}, not pending: --what-if is for a job waiting to start")
    analysis = api.placement(job_id) if job.state == JobState.PENDING else None
    remedies = api.what_if(job_id) if what_if else None
    attachments = job_attachments(api, job_id)
    if as_json:
        print_json({"job": job, "tasks": tasks, "history": history, **({"placement": analysis} if analysis else {}),
                    **({"what_if": remedies} if remedies else {}),
                    **({"attachments": attachments} if attachments else {})})
        return
    try:
        names = {w.id: w.name for w in api.workers()}
    except CorralError:
        names = {}  # worker names only make the tables easier to read
    console().print(render_info(job, tasks, history, names, time.time()))
    if attachments:
        console().print(Text(), attachments_table(attachments, time.time()))
    if analysis is not None:
        console().print(Text(), placement_table(analysis))
    if remedies is not None:
        console().print(Text(), what_if_text(remedies), sep="\n")


def job_attachments(api: Client, job_id: int) -> list[dict[str, Any]]:
    """Its open and recent attachments; none from a controller that has no relay (an older one)."""
    try:
        return api.attachments(job_id)
    except CorralError as error:
        if error.status == 404:
            return []
        raise


def attachments_table(attachments: list[dict[str, Any]], now: float) -> Table:
    """Who reached into the job's tasks: open channels first, then the most recent closed ones."""
    table = Table(title="attachments", title_justify="left", box=None, pad_edge=False)
    for column in ("ID", "TASK", "KIND", "WHAT", "WHO", "FROM", "STATE", "OPENED", "CLOSED"):
        table.add_column(column, no_wrap=column not in ("WHAT", "CLOSED"))
    ordered = sorted(attachments, key=lambda a: (a.get("state") not in ("open", "opening"), -a.get("opened_at", 0)))
    for item in ordered[:ATTACHMENTS_SHOWN]:
        closed = "-" if item.get("closed_at") is None else \
            f"{age_since(item['closed_at'], now)} ago ({item.get('close_code')}" + \
            (f": {item['close_reason']})" if item.get("close_reason") else ")")
        state = item.get("state", "?")
        table.add_row(str(item.get("id")), f"{item.get('task_index')}#{item.get('attempt')}", str(item.get("kind")),
                      Text(attachment_detail(item)), Text(str(item.get("actor"))), Text(item.get("address") or "-"),
                      Text(state, style="cyan" if state == "open" else "red" if state == "failed" else ""),
                      f"{age_since(item.get('opened_at'), now)} ago", Text(closed))
    return table


def attachment_detail(item: dict[str, Any]) -> str:
    """What the channel was for: `watch`, the exec'd command, the port."""
    detail = item.get("detail") or {}
    if item.get("kind") == "exec":
        return format_command(detail.get("command") or []) + (" (detached)" if detail.get("detach") else "")
    if item.get("kind") == "port":
        return f"port {detail.get('port')}"
    return "watching" if detail.get("watch") else "keyboard"


def render_info(job: JobView, tasks: list[TaskView], history: list[HistoryEntry], worker_names: dict[str, str],
                now: float) -> Group:
    return Group(job_summary(job, now), Text(), tasks_table(tasks, worker_names, job.spec.resources.gpu), Text(),
                 attempts_table(tasks, worker_names, job.spec.bundle), Text(), history_table(history))


def estimate_text(estimate: StartEstimate) -> Text:
    """"~12m after job 41 (at 14:02; job 41's end: its time limit)"."""
    said = Text(estimate.text, style="bold")
    if estimate.start_at is not None:
        at = datetime.fromtimestamp(estimate.start_at).strftime("%H:%M" if estimate.text != "now" else "%H:%M:%S")
        said.append(f" (at {at}; {estimate.basis})", style="dim")
    if estimate.all_started_at is not None and estimate.all_started_at - (estimate.start_at or 0) > 60:
        said.append(f"; all its tasks by {datetime.fromtimestamp(estimate.all_started_at):%H:%M}", style="dim")
    return said


def job_summary(job: JobView, now: float) -> Table:
    spec = job.spec
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, Text | str]] = [
        ("job", f"{job.id} ({job.name})"),
        ("state", state_text(job.state) + Text(f" for {age_since(job.state_since, now)}")),
    ]
    if job.launched_by is not None:
        rows.append(("launched by", f"job {job.launched_by}"))
    if job.pending_reason:
        rows.append(("pending", Text(job.pending_reason, style="magenta")))
    if job.state == JobState.PENDING and job.estimate is not None:
        rows.append(("starts", estimate_text(job.estimate)))
    rows += retry_rows(job)
    if spec.interactive:
        rows.append(("interactive", f"idle timeout {format_duration(spec.idle_timeout)}; "
                                    f"`corral attach {job.id}` opens its terminal"))
    rows += [
        ("tasks", task_summary(job.task_counts)),
        ("command", Text(format_command(spec.command))),
        ("resources", format_resources(spec.resources) + " per task"),
        ("replicas", f"{spec.replicas}" + (" as a gang" if spec.gang else " independent")
         + (f", at most {spec.max_running} at once" if spec.max_running is not None else "")),
        ("priority", str(spec.priority)),
        ("placement", f"pool {spec.pool}, project {spec.project}"
                      + "".join(f", {c}" for c in spec.constraints) + (", spread" if spec.spread else "")),
        ("retries", f"{spec.max_retries_failure} on failure, {spec.max_retries_preemption} on preemption; "
                    f"{spec.max_task_failures} task failures tolerated"),
        ("time limit", format_duration(spec.time_limit)),
    ]
    if job.preemption_epoch:
        drain = f"; last gang drain started by task {job.drain_trigger}" if job.drain_trigger is not None else ""
        rows.append(("preemption", f"epoch {job.preemption_epoch}{drain}; grace {format_duration(spec.grace_period)}"))
    if spec.scheduling_timeout is not None:
        rows.append(("sched. timeout", format_duration(spec.scheduling_timeout)))
    rows.append(("workdir", workdir_text(spec)))
    if spec.pip:
        rows.append(("pip", Text(" ".join(spec.pip))))
    if spec.python:
        rows.append(("python", spec.python))
    if spec.env:
        rows.append(("env", Text(" ".join(f"{k}={v}" for k, v in sorted(spec.env.items())))))
    if spec.export:  # names only: exported values may be secrets
        rows.append(("exported", Text(" ".join(sorted(spec.export)))))
    if spec.labels:
        rows.append(("labels", Text(" ".join(f"{k}={v}" for k, v in sorted(spec.labels.items())))))
    if job.idempotency_key:
        rows.append(("idempotency key", Text(job.idempotency_key)))
    rows.append(("created", f"{format_time(job.created_at)} ({age_since(job.created_at, now)} ago)"))
    if job.finished_at is not None:
        rows.append(("finished", f"{format_time(job.finished_at)} "
                                 f"(ran {format_duration(job.finished_at - job.created_at)})"))
    for key, value in rows:
        table.add_row(key, value)
    return table


def workdir_text(spec: JobSpec) -> Text:
    """Where the tasks start, and whether the directory's files were uploaded."""
    if spec.workdir is None:
        return Text(f"none: an empty directory, with bundle {spec.bundle[:12]}" if spec.bundle
                    else "none: an empty directory")
    files = (f"files uploaded as bundle {spec.bundle[:12]}" if spec.bundle
             else "files not uploaded: only workers that share it run it")
    return Text(f"{spec.workdir.path} ({files})")


def start_text(world: AttemptWorld | None, bundle: str | None) -> Text:
    """Where one attempt started, as its worker reported: `/home/a/proj (shared)`, `copy of bundle 3fa2c9e1 in
    /…/tasks/7-0/work`, `empty /…/tasks/7-0`."""
    if world is None:
        return Text("-")
    if world.start == "shared":
        return Text(f"{world.directory} (shared)")
    if world.start == "bundle":
        return Text(f"copy of bundle {(bundle or '')[:8]} in {world.directory}")
    return Text(f"empty {world.directory}")


def retry_rows(job: JobView) -> list[tuple[str, Text | str]]:
    """"attempt N of M" with the cause, the links to the parent and the child, and the whole chain."""
    if job.retry_state is None and job.parent_job_id is None:
        return []
    rows: list[tuple[str, Text | str]] = [("retry", Text(job.retry_state or ""))]
    if job.retry_cause:
        rows.append(("retry cause", str(job.retry_cause)))
    if job.parent_job_id is not None:
        rows.append(("parent", f"job {job.parent_job_id}"))
    later = job.retry_chain[job.retry_chain.index(job.id) + 1:] if job.id in job.retry_chain else []
    if later:
        rows.append(("child", f"job {later[0]}"))
    if len(job.retry_chain) > 1:
        rows.append(("retry chain", " -> ".join(map(str, job.retry_chain))))
    return rows


def placement_table(analysis: PlacementAnalysis) -> Group:
    """Each worker and why a task of this pending job can or cannot go there now."""
    title = f"placement (pool {analysis.pool}, project {analysis.project}, priority {analysis.priority})"
    if analysis.gate:
        title += f"; {analysis.gate}"
    quota = ", ".join(f"{r} {used:g}/{limit:g}" for r, (used, limit) in analysis.quota.items())
    if quota:
        title += f"; quota {quota}"
    table = Table(box=None, pad_edge=False)
    for column in ("WORKER", "FITS", "WHY"):
        table.add_column(column, no_wrap=column != "WHY")
    for worker in analysis.workers:
        table.add_row(Text(worker.name), Text("yes", style="green") if worker.fits else Text("no", style="red"),
                      Text(worker.why))
    if not analysis.workers:
        table.add_row("-", "-", "no worker is alive")
    return Group(Text(title, style="italic"), table)


def what_if_text(view: WhatIfView) -> Text:
    """When the job starts as it is, then one line per change that would start it sooner, smallest first:
    "  --gpus 4 instead of 8      starts now on w3"."""
    text = Text("what would it take", style="italic")
    text.append(": as it is, " if view.baseline.start_at is None else ": as it is, it starts ")
    text.append(estimate_text(view.baseline))
    width = max((len(r.change) for r in view.remedies), default=0) + 2
    for remedy in view.remedies:
        when = "now" if remedy.text == "now" or remedy.start_at is None \
            else f"in {remedy.text} (at {datetime.fromtimestamp(remedy.start_at):%H:%M})"
        where = f" on {', '.join(remedy.workers)}" if remedy.workers else ""
        preempting = f", preempting {_jobs(remedy.preempts)}" if remedy.preempts else ""
        text.append(f"\n  {remedy.change:<{width}}starts {when}{where}{preempting}")
    if not view.remedies:
        text.append("\n  no change of its request, pool, constraints or priority would start it meaningfully sooner")
    return text


def _jobs(ids: list[int]) -> str:
    return f"job {ids[0]}" if len(ids) == 1 else f"jobs {', '.join(map(str, ids))}"


def tasks_table(tasks: list[TaskView], names: dict[str, str], gpu: float) -> Table:
    """Its tasks; with GPUs, each task's devices, and the share of its device a task with a share holds: 0 (0.5)."""
    table = Table(title="tasks", title_justify="left", box=None, pad_edge=False)
    checkpoints = any(task.checkpoint_size is not None for task in tasks)
    columns = ["TASK", "STATE", "ATTEMPT", "WORKER", "GPUS", "EXIT", "FAILURES", "PREEMPTIONS"]
    for column in [*columns, *(["CHECKPOINT"] if checkpoints else []), "REASON"]:
        table.add_column(column, no_wrap=column != "REASON")
    for task in tasks:
        saved = ["-" if task.checkpoint_size is None else format_bytes(task.checkpoint_size)] if checkpoints else []
        table.add_row(str(task.index), state_text(task.state), str(task.attempt), _worker(task.worker_id, names),
                      gpus_text(task.gpu_ids, gpu), _opt(task.exit_code), str(task.failures),
                      str(task.preemptions), *saved, Text(task.reason or ""))
    return table


def gpus_text(gpu_ids: list[int], gpu: float) -> str:
    devices = ",".join(map(str, gpu_ids)) or "-"
    return f"{devices} ({format_number(gpu)})" if gpu_ids and 0 < gpu < 1 else devices


def attempts_table(tasks: list[TaskView], names: dict[str, str], bundle: str | None = None) -> Table:
    table = Table(title="attempts", title_justify="left", box=None, pad_edge=False)
    environments = any(a.world is not None and a.world.env_key for task in tasks for a in task.attempts)
    columns = ("TASK", "ATTEMPT", "WORKER", "STATE", "EXIT", "ASSIGNED", "STARTED", "FINISHED", "RAN", "START")
    for column in (*columns, *(["ENVIRONMENT"] if environments else []), "REASON"):
        table.add_column(column, no_wrap=column not in ("START", "REASON"))
    for task in tasks:
        for a in task.attempts:
            ran = max(0.0, a.finished_at - a.started_at) if a.started_at and a.finished_at else None
            state = state_text(a.state) + (Text(" refunded", style="dim") if a.refunded else Text())
            table.add_row(str(task.index), str(a.attempt), _worker(a.worker_id, names), state,
                          _opt(a.exit_code), format_time(a.assigned_at), format_time(a.started_at),
                          format_time(a.finished_at), format_duration(ran), start_text(a.world, bundle),
                          *([environment_text(a.world)] if environments else []), Text(a.reason or ""))
    return table


def environment_text(world: AttemptWorld | None) -> str:
    """"3f2a9c1b0d4e built in 4.2s", or "... cached (0.01s)": the attempt's Python environment and what it cost."""
    if world is None or not world.env_key:
        return "-"
    seconds = format_duration(world.env_seconds or 0.0)
    return f"{world.env_key[:12]} " + (f"cached ({seconds})" if world.env_cached else f"built in {seconds}")


def history_table(history: list[HistoryEntry]) -> Table:
    table = Table(title="history", title_justify="left", box=None, pad_edge=False)
    for column in ("TIME", "HANDLER", "RESULT", "TASK", "TRANSITION", "MESSAGE"):
        table.add_column(column, no_wrap=column != "MESSAGE")
    for entry in history:
        task = "-" if entry.task_index is None else str(entry.task_index)
        if entry.attempt is not None and entry.task_index is not None:
            task += f"#{entry.attempt}"
        change = " -> ".join(s for s in (entry.from_state, entry.to_state) if s)
        if entry.from_state is None and entry.to_state:
            change = f"-> {change}"
        message = entry.message or ""
        if entry.repeats > 1 and entry.last_at is not None:
            message += f" (seen {entry.repeats} times, last at {format_time(entry.last_at)})"
        table.add_row(format_time(entry.at), entry.handler, entry.result, task, change, Text(message))
    return table


def _worker(worker_id: str | None, names: dict[str, str]) -> Text:
    return Text("-" if worker_id is None else names.get(worker_id, worker_id))


def _opt(value: object) -> str:
    return "-" if value is None else str(value)
