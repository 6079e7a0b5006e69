"""`corral events`: the cluster's state changes, one line each, followed live with -f."""

from __future__ import annotations

import json

import click
from rich.text import Text

from corral.cli.common import client, console
from corral.cli.format import format_time
from corral.cli.listing import state_text
from corral.core.views import EventView


@click.command()
@click.option("--job", "job_id", type=click.IntRange(min=1), help="Only this job's events (its whole story).")
@click.option("--deployment", metavar="NAME", help="Only the events of this deployment and its replicas.")
@click.option("--last", type=click.IntRange(1, 10_000), help="Start with the last N events (default: all kept, "
              "or the last 20 with -f and no --job or --deployment).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def events(job_id: int | None, deployment: str | None, last: int | None, follow: bool, as_json: bool) -> None:
    """Print state changes of jobs, tasks, workers, deployments and replicas, oldest first."""
    if last is None and follow and job_id is None and deployment is None:
        last = 20
    out = console()
    try:
        stream = client().events(job_id, deployment=deployment, last=last, follow=follow, reconnects=None)
        for event in (EventView.model_validate(e.data) for e in stream):
            if as_json:
                click.echo(json.dumps(event.model_dump(mode="json")))
            else:
                out.print(event_line(event), soft_wrap=True)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:
        raise SystemExit(0) from None


def event_line(event: EventView) -> Text:
    """`12:00:01 #41 task.state_changed job 7 task 0#1 RUNNING -> SUCCEEDED (Worker) exit 0`"""
    line = Text(f"{format_time(event.at)} #{event.id} ")
    line.append(event.type, style="bold")
    if event.deployment_id is not None:
        line.append(f" deployment {event.deployment or event.deployment_id}")
    if event.replica_id is not None:
        line.append(f" replica {event.replica_id}")
    if event.job_id is not None:
        line.append(f" job {event.job_id}")
    if event.task_index is not None:
        line.append(f" task {event.task_index}" + (f"#{event.attempt}" if event.attempt is not None else ""))
    if event.worker_id and (event.job_id is None or event.task_index is not None):
        line.append(f" worker {event.worker_id}")
    if event.to_state:
        line.append(" ")
        if event.from_state:
            line.append_text(state_text(event.from_state))
            line.append(" -> ")
        line.append_text(state_text(event.to_state))
    line.append(f" ({event.handler}" + ("" if event.result == "SUCCESS" else f", {event.result}") + ")", style="dim")
    if event.message:
        line.append(f" {event.message}")
    return line
