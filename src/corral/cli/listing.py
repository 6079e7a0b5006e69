"""`corral jobs` and `corral workers`: one row per job or worker.

rich and the views are imported by the functions that draw, when they draw: `corral jobs --help` must not
load them, and `corral jobs` piped loads neither (the client's JSON rows, `print_table`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from corral.cli.common import Cell, client, console, json_option, print_json, print_table
from corral.cli.format import format_age, format_bytes, format_number, task_summary
from corral.core.states import JobState, WorkerState

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from corral.core.views import ControllerView, WorkerView

STATE_STYLES = {"SUCCEEDED": "green", "FAILED": "red", "LOST": "red", "UNSCHEDULABLE": "red",
                "CANCELLED": "yellow", "RUNNING": "cyan", "PENDING": "magenta"}


def state_text(state: str) -> Text:
    from rich.text import Text

    return Text(str(state), style=STATE_STYLES.get(str(state), ""))


@click.command()
@click.option("--state", "states", multiple=True, type=click.Choice([s.value for s in JobState], case_sensitive=False),
              help="Only jobs in this state (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many jobs.")
@click.option("--all", "every", is_flag=True, help="Every job, however many (overrides --limit).")
@click.option("--mine", is_flag=True, help="Only your own jobs (those of the user your token acts as).")
@click.option("--user", "owner", metavar="U", help="Only user U's jobs.")
@click.option("--project", metavar="P", help="Only project P's jobs.")
@json_option
def jobs(states: tuple[str, ...], limit: int, every: bool, mine: bool, owner: str | None, project: str | None,
         as_json: bool) -> None:
    """List jobs, newest first. When more match than are shown, says so on stderr."""
    if mine and owner:
        raise click.UsageError("--mine and --user both name whose jobs: give one")
    api, wanted = client(), [s.upper() for s in states]
    owner = api.whoami()["name"] if mine else owner
    query = {"states": wanted, "limit": None if every else limit, "owner": owner, "project": project}
    if as_json:
        found = list(api.list(**query))
        print_json(found)
    else:  # the table reads a few fields of the controller's JSON: no model is built
        found, now = list(api.list_rows(**query)), time.time()
        print_table(JOB_COLUMNS, (job_row(job, now) for job in found), wrapping=("STATE", "START"))
    if not every and len(found) == limit and (total := api.count(wanted, owner=owner, project=project)) > limit:
        click.echo(f"showing {limit} of {total} jobs; --limit N or --all for more", err=True)


JOB_COLUMNS = ("ID", "NAME", "OWNER", "STATE", "START", "TASKS", "AGE")


def job_row(job: dict[str, Any], now: float) -> list[Cell]:
    """A job's row of `corral jobs`, from its JSON (JobView's fields)."""
    state, pending = job["state"], job["state"] == JobState.PENDING
    state_cell = [(state, STATE_STYLES.get(state, ""))]
    if pending and job.get("pending_reason"):
        state_cell.append((f"\n{job['pending_reason']}", "dim"))
    start = job["estimate"]["text"] if pending and job.get("estimate") else ""
    return [str(job["id"]), [(job["name"], ""), *kind_mark(job), *retry_mark(job)], [(job["owner"], "")], state_cell,
            [(start, "")], task_summary(job["task_counts"]), format_age(now - job["created_at"])]


def kind_mark(job: dict[str, Any]) -> list[tuple[str, str]]:
    """" interactive" on an interactive job (corral shell): one with a terminal to attach to."""
    return [(" interactive", "cyan")] if job["spec"].get("interactive") else []


def retry_mark(job: dict[str, Any]) -> list[tuple[str, str]]:
    """" retry 2/3" on a job that is a retry, " retried" on a first job whose retry is scheduled or created."""
    if job.get("retry_count"):
        return [(f" retry {job['retry_count']}/{job.get('max_retries', 0)}", "yellow")]
    chain = job.get("retry_chain") or []
    if (chain and chain[-1] != job["id"]) or job.get("retry_due_at") is not None:
        return [(" retried", "yellow")]
    return []


@click.command()
@click.option("--devices", "-v", "per_device", is_flag=True,
              help="Also each GPU: its model and memory, the share booked on it, its tasks, and its use as NVML reads.")
@json_option
def workers(per_device: bool, as_json: bool) -> None:
    """List the workers: capacity and use per resource (GPUs as shares: 1.75/2)."""
    from rich.text import Text

    found = client().workers()
    if as_json:
        print_json(found)
        return
    console().print(workers_table(found, time.time()))
    if per_device:
        console().print(Text(), devices_table(found))


@click.command()
@json_option
def controllers(as_json: bool) -> None:
    """List the controllers serving the store: live or gone, last pass, handlers run lately."""
    found = client().controllers()
    if as_json:
        print_json(found)
        return
    console().print(controllers_table(found, time.time()))


RECENT_HANDLERS = 60.0  # seconds: the handlers a controller ran within this are listed


def controllers_table(found: list[ControllerView], now: float) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False)
    for column in ("URL", "STATE", "HOST", "PID", "STARTED", "LAST PASS", "HANDLERS RUN LATELY"):
        table.add_column(column, no_wrap=column != "HANDLERS RUN LATELY")
    for controller in found:
        ran = sorted(((now - at, name) for name, at in controller.handlers.items() if now - at <= RECENT_HANDLERS))
        table.add_row(
            Text(controller.url + (" (this)" if controller.this else "")),
            Text(controller.state, style="green" if controller.state == "live" else "red"), Text(controller.host),
            str(controller.pid), f"{format_age(now - controller.started_at)} ago",
            f"{format_age(now - controller.last_pass_at)} ago" if controller.last_pass_at else "-",
            Text(", ".join(f"{name} {age:.1f}s ago" for age, name in ran) or "-"))
    return table


def workers_table(found: list[WorkerView], now: float) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False)
    for column in ("ID", "NAME", "POOL", "ADDRESS", "STATE", "CPU", "MEM", "GPU", "HEARTBEAT", "TASKS", "ENVS",
                   "RUNS AS"):
        table.add_column(column, no_wrap=True)
    for worker in found:
        table.add_row(
            worker.id, Text(worker.name), Text(worker.pool), Text(worker.address),
            Text(worker.state, style="green" if worker.state == WorkerState.ALIVE else "red"),
            *usage(worker), f"{format_age(now - worker.last_heartbeat)} ago", str(worker.running_tasks),
            environments_text(worker), Text(runs_as(worker)))
    return table


def runs_as(worker: WorkerView) -> str:
    """"owners": its tasks run as their owners' local accounts (a root worker); else the account they all run as."""
    return "owners" if worker.run_as_owners else worker.account or "-"


def environments_text(worker: WorkerView) -> str:
    """"3 (412M)": the Python environments the worker keeps built, and their disk use."""
    if not worker.environments:
        return "-"
    size = sum(environment.size for environment in worker.environments)
    return f"{len(worker.environments)} ({format_bytes(size, compact=True)})"


def usage(worker: WorkerView) -> tuple[str, str, str]:
    """("2.0/8", "1.0G/16G", "1.75/2"): what is reserved over what the worker has, GPUs with their shares."""
    used, capacity = worker.used, worker.capacity
    return (f"{used.get('cpu', 0):.1f}/{format_number(capacity.get('cpu', 0))}",
            f"{format_bytes(used.get('memory', 0))}/{format_bytes(capacity.get('memory', 0), compact=True)}",
            f"{format_number(round(used.get('gpu', 0), 2))}/{int(capacity.get('gpu', 0))}")


def devices_table(found: list[WorkerView]) -> Table:
    """One row per GPU: what it is, the share booked on it and by which tasks (job:task), and NVML's last reading."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="devices", title_justify="left", box=None, pad_edge=False)
    for column in ("WORKER", "GPU", "MODEL", "MEMORY", "BOOKED", "RESERVED", "TASKS", "USED", "BUSY"):
        table.add_column(column, no_wrap=column != "TASKS")
    for worker in found:
        for device in worker.devices:
            tasks = " ".join(f"{t.job_id}:{t.index}" + (f" ({format_number(t.share)})" if t.share < 1 else "")
                             for t in device.tasks)
            table.add_row(Text(worker.name), str(device.index), Text(device.model or "-"), _size(device.memory),
                          format_number(device.booked), _size(device.memory_reserved), tasks or "-",
                          "-" if device.memory_used is None else format_bytes(device.memory_used, compact=True),
                          "-" if device.utilization is None else f"{device.utilization}%")
    if not table.rows:
        table.add_row("-", "-", "-", "-", "-", "-", "no worker has a GPU", "-", "-")
    return table


def _size(size: int | None) -> str:
    """Bytes, "-" when unknown or none."""
    return format_bytes(size, compact=True) if size else "-"
