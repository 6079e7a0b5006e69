"""`corral logs` and `corral cancel`: acting on one job."""

from __future__ import annotations

import click

from corral.cli.common import client, json_option, print_json


@click.command()
@click.argument("job_id", type=int, metavar="JOB")
@click.option("--task", type=click.IntRange(min=0), default=0, show_default=True, help="Task index.")
@click.option("--attempt", type=click.IntRange(min=0), help="Attempt number (default: the task's current one).")
@click.option("--stderr", "use_stderr", is_flag=True, help="The task's stderr instead of its stdout.")
@click.option("--build", "use_build", is_flag=True,
              help="The output of the build of the task's Python environment (--pip, --python).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the task ends.")
def logs(job_id: int, task: int, attempt: int | None, use_stderr: bool, use_build: bool, follow: bool) -> None:
    """Print a task's output, byte for byte."""
    if use_stderr and use_build:
        raise click.UsageError("--stderr and --build: pick one stream")
    out = click.get_binary_stream("stdout")

    def announce(number: int) -> None:
        click.echo(f"--- attempt {number} of task {task} ---", err=True)

    stream = "build" if use_build else "stderr" if use_stderr else "stdout"
    try:
        for chunk in client().logs(job_id, task=task, stream=stream,
                                   attempt=attempt, follow=follow, on_attempt=announce):
            out.write(chunk)
            out.flush()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:  # `corral logs JOB | head`
        raise SystemExit(0) from None


@click.command()
@click.argument("job_id", type=int, metavar="JOB")
@json_option
def cancel(job_id: int, as_json: bool) -> None:
    """Cancel a job: its tasks are stopped (SIGTERM, then SIGKILL after its grace period)."""
    job = client().cancel(job_id)
    if as_json:
        print_json(job)
    else:
        click.echo(job.state)
