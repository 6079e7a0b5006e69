"""The `corral` command: a Click group whose commands live in one module per idea."""

from __future__ import annotations

import click
from pydantic import ValidationError

from corral.cli.actions import cancel, logs
from corral.cli.audit import audit
from corral.cli.checkpoint import checkpoint
from corral.cli.common import CliError
from corral.cli.daemons import controller, worker
from corral.cli.deploy import COMMANDS as serving_commands
from corral.cli.events import events
from corral.cli.info import info
from corral.cli.interactive import COMMANDS as interactive_commands
from corral.cli.listing import jobs, workers
from corral.cli.projects import project
from corral.cli.submit import submit
from corral.cli.teams import COMMANDS as team_commands
from corral.cli.up import down, up
from corral.cli.usage import usage
from corral.client.errors import CorralError, format_validation

# Specs the CLI itself validates from the user's options and files: their errors are the user's to fix.
USER_SPECS = {"JobSpec": "invalid job spec", "DeploymentSpec": "invalid deployment spec"}


class CorralGroup(click.Group):
    """Turns the client's errors into `error: ...` and exit code 1, whatever command raised them."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CorralError as error:
            raise CliError(str(error)) from None
        except ValidationError as error:
            what = USER_SPECS.get(error.title, f"unexpected {error.title} from the controller")
            raise CliError(f"{what}: {format_validation(error)}") from None


@click.group(cls=CorralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """corral: run batch jobs, gangs and services on a pool of CPU and GPU machines.

    Client commands find the controller through CORRAL_URL and CORRAL_TOKEN, else the token `corral login`
    stored, else the cluster.json that `corral up` writes in its data directory (CORRAL_DATA_DIR, default
    ./.corral).
    """


for command in (up, down, submit, jobs, info, logs, cancel, workers, events, controller, worker, checkpoint, project,
                audit, usage, *interactive_commands, *serving_commands, *team_commands):
    main.add_command(command)
