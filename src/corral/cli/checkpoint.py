"""`corral checkpoint save FILE`: from inside a task, leave a checkpoint for its next attempt."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from corral.cli.common import CliError


@click.group()
def checkpoint() -> None:
    """Checkpoints of a task, kept across its attempts.

    When an attempt is preempted (a gang drain, or room for a higher priority), the worker
    uploads the file at $CORRAL_CHECKPOINT_PATH if the task wrote it; the task's next
    attempt finds it at $CORRAL_CHECKPOINT_PATH again.
    """


@checkpoint.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def save(file: Path) -> None:
    """Copy FILE to $CORRAL_CHECKPOINT_PATH in one step, so a kill mid-copy never leaves half a checkpoint."""
    target = os.environ.get("CORRAL_CHECKPOINT_PATH")
    if not target:
        raise CliError("CORRAL_CHECKPOINT_PATH is not set: run this from inside a corral task")
    partial = Path(f"{target}.partial")
    shutil.copyfile(file, partial)
    os.replace(partial, target)
    click.echo(f"checkpoint of {Path(target).stat().st_size} bytes saved to {target}", err=True)
