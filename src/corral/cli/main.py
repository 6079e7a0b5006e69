"""The `corral` command: a Click group whose commands live in one module per idea, imported when used.

`corral --help` lists the commands from COMMANDS without importing any of them, and a command's module is
imported only when it runs or shows its help, so neither loads the client, httpx, pydantic or rich.
"""

from __future__ import annotations

import importlib
import sys

import click

from corral.cli.common import CliError
from corral.client.errors import CorralError, format_validation

# httpx's package imports its own command line tool when it can (rich's progress bars and syntax highlighting,
# pygments: a fifth of a client command's start): this process never runs it, so it is marked absent.
sys.modules.setdefault("httpx._main", None)

# Specs the CLI itself validates from the user's options and files: their errors are the user's to fix.
USER_SPECS = {"JobSpec": "invalid job spec", "DeploymentSpec": "invalid deployment spec",
              "ProjectNotify": "invalid notify URL"}

# Each command: where it lives ("module:attribute") and its line in `corral --help`, kept here so the listing
# needs no import (tests/cli/test_lazy_cli.py checks each line against the command's own help).
COMMANDS = {
    "attach": ("corral.cli.interactive:attach", "Attach to an interactive job's terminal again (--watch: only watch)."),
    "audit": ("corral.cli.audit:audit",
              "The audit log, newest first: every mutating API call, refused ones too (cluster admins)."),
    "cancel": ("corral.cli.actions:cancel",
               "Cancel a job: its tasks are stopped (SIGTERM, then SIGKILL after its grace period)."),
    "checkpoint": ("corral.cli.checkpoint:checkpoint", "Checkpoints of a task, kept across its attempts."),
    "controller": ("corral.cli.daemons:controller",
                   "Run the controller (API, scheduler, dashboard) in the foreground."),
    "controllers": ("corral.cli.listing:controllers",
                    "List the controllers serving the store: live or gone, last pass, handlers run lately."),
    "deploy": ("corral.cli.deploy:deploy",
               "Deploy a service: corral deploy NAME [OPTIONS] -- CMD [ARGS...], where CMD serves HTTP on $PORT."),
    "deployment": ("corral.cli.deploy:deployment", "Inspect a deployment, issue it a key, or scale it."),
    "deployments": ("corral.cli.deploy:deployments",
                    "List deployments: state, replicas wanted and by state, models, project."),
    "down": ("corral.cli.up:down",
             "Stop the cluster of a data directory: `corral up`, its workers and its controller, and wait for..."),
    "events": ("corral.cli.events:events",
               "Print state changes of jobs, tasks, workers, deployments and replicas, oldest first."),
    "exec": ("corral.cli.interactive:exec_command",
             "Run a command inside a running task (its directory, environment and devices): corral exec JOB --..."),
    "info": ("corral.cli.info:info", "Show a job: its spec, tasks, attempts and the history of its transitions."),
    "jobs": ("corral.cli.listing:jobs", "List jobs, newest first."),
    "login": ("corral.cli.teams:login",
              "Store a token for the controller at URL, after checking it; client commands then use it."),
    "logout": ("corral.cli.teams:logout", "Remove the token `corral login` stored."),
    "logs": ("corral.cli.actions:logs", "Print a task's output, byte for byte."),
    "member": ("corral.cli.teams:member",
               "Add, change and remove a project's members (cluster admins, and the project's admins)."),
    "notify": ("corral.cli.notify:notify", "Job notifications by webhook: the key they are signed with (cluster "
               "admins)."),
    "port-forward": ("corral.cli.interactive:port_forward",
                     "Forward a local port to a port a task listens on (each connection through the controller), "
                     "until..."),
    "project": ("corral.cli.projects:project",
                "Issue, list and revoke a project's tokens, and set its default notify URL (admin)."),
    "router": ("corral.cli.deploy:router",
               "Run a standalone router (scale-out): proxies /v1 and /serve like the controller does."),
    "shell": ("corral.cli.interactive:shell",
              "Run an interactive job and attach its terminal: corral shell [OPTIONS] [-- COMMAND]"),
    "stats": ("corral.cli.stats:stats", "How the cluster's figures held up: `corral stats estimates`."),
    "store": ("corral.cli.store:store", "The controller's store: copy a SQLite store into PostgreSQL."),
    "submit": ("corral.cli.submit:submit", "Submit a job: corral submit [OPTIONS] -- CMD [ARGS...]"),
    "token": ("corral.cli.teams:token", "Create, list and revoke personal tokens."),
    "undeploy": ("corral.cli.deploy:undeploy", "Stop every replica of a deployment and remove it."),
    "up": ("corral.cli.up:up", "Start a local cluster: a controller and N workers, until Ctrl-C."),
    "usage": ("corral.cli.usage:usage",
              "Usage per project, user or pool: cpu, memory and GPU hours the jobs' attempts held (a GPU share..."),
    "user": ("corral.cli.teams:user", "Create, list and change users (cluster admins)."),
    "whoami": ("corral.cli.teams:whoami",
               "Who your token acts as: name, role, projects, and the token's kind and expiry."),
    "worker": ("corral.cli.daemons:worker",
               "Run a worker in the foreground: register with the controller and run the tasks it is given."),
    "workers": ("corral.cli.listing:workers",
                "List the workers: capacity and use per resource (GPUs as shares: 1.75/2)."),
}


class CorralGroup(click.Group):
    """Imports a command's module only when it is asked for, and turns the client's errors into `error: ...`
    and exit code 1, whatever command raised them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attribute = COMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists commands, from the help kept in COMMANDS (cut by click's rule, on a stand-in command)."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        with formatter.section("Commands"):
            formatter.write_dl([(name, click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit))
                                for name in self.list_commands(ctx)])

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CorralError as error:
            raise CliError(str(error)) from None
        except Exception as error:
            if not is_validation_error(error):
                raise
            what = USER_SPECS.get(error.title, f"unexpected {error.title} from the controller")
            raise CliError(f"{what}: {format_validation(error)}") from None


def is_validation_error(error: Exception) -> bool:
    """A pydantic ValidationError; pydantic not imported yet means the command never used it, so it is not."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(error, pydantic.ValidationError)


@click.group(cls=CorralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """corral: run batch jobs, gangs and services on a pool of CPU and GPU machines.

    Client commands find the controller through CORRAL_URL and CORRAL_TOKEN, else the token `corral login`
    stored, else the cluster.json that `corral up` writes in its data directory (CORRAL_DATA_DIR, default
    ./.corral). CORRAL_URL may name several controllers of one database, comma-separated: a request that
    finds one away goes to the next.
    """
