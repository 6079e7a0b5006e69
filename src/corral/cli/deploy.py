"""`corral deploy`, `deployments`, `deployment info|key|scale`, `undeploy` and `router` (a standalone router)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, TextIO

import click
from rich.table import Table
from rich.text import Text

from corral.cli.common import CliError, GpuAmount, client, console, json_option, parse_pairs, print_json
from corral.cli.daemons import (
    CONTROLLERS_HELP,
    config_option,
    controllers_option,
    read_token,
    refuse_token_value,
    said_on_a_fatal_signal,
)
from corral.cli.format import format_age, format_command, format_resources, format_time
from corral.cli.submit import chosen_workdir, export_option, load_spec_file, ship_workdir, with_shipped, workdir_options
from corral.client import serving
from corral.client.exports import exported
from corral.core.config import CorralConfig
from corral.core.deployment_spec import DeploymentSpec
from corral.core.serving import ReplicaState

STATE_STYLES = {"READY": "green", "HEALTHY": "green", "SCALING": "cyan", "DEGRADED": "yellow", "UNHEALTHY": "red",
                "FAILED_TO_START": "red", "DESTROYING": "yellow", "PENDING": "magenta", "PROVISIONING": "magenta"}


def parse_replicas(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int | None] | None:
    """MIN or MIN:MAX -> (min, max)."""
    if value is None:
        return None
    low, _, high = value.partition(":")
    try:
        return int(low), int(high) if high else None
    except ValueError:
        raise click.BadParameter(f"{value!r} is not MIN or MIN:MAX, e.g. 1 or 0:4", ctx=ctx, param=param) from None


def build_deployment(file_data: dict[str, Any], name: str | None, command: tuple[str, ...], replicas, models,
                     health: dict[str, Any], resources: dict[str, Any], **fields: Any) -> DeploymentSpec:
    data = dict(file_data)
    if name:
        data["name"] = name
    if command:
        data["command"] = list(command)
    if replicas is not None:
        data["min_replicas"], data["max_replicas"] = replicas
    if models:
        data["model_names"] = list(models)
    for key, section in (("health", health), ("resources", resources)):
        given = {k: v for k, v in section.items() if v is not None}
        if given:
            data[key] = {**(data.get(key) or {}), **given}
    for key, value in fields.items():
        if value is not None and value is not False and value != {}:  # a given 0 is kept (0 == False)
            data[key] = {**(data.get(key) or {}), **value} if isinstance(value, dict) else value
    return DeploymentSpec.model_validate(data)


@click.command()
@click.argument("name", required=False)
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A YAML/JSON deployment spec; options override it.")
@click.option("--replicas", callback=parse_replicas, help="MIN or MIN:MAX replicas (MIN 0: scale to zero when idle).")
@click.option("--model-name", "models", multiple=True, help="A `model` value routed here (repeatable; default NAME).")
@click.option("--health", "health_path", help="Health check path, answered 2xx when ready (default /health).")
@click.option("--health-interval", help="Between health checks, e.g. 2s.")
@click.option("--health-threshold", type=int, help="Failed checks in a row before a replica is UNHEALTHY.")
@click.option("--startup-timeout", help="How long a new replica may fail its checks while loading, e.g. 5m.")
@click.option("--idle-timeout", help="Scale to zero after this long without requests, e.g. 10m.")
@click.option("--cpus", type=float)
@click.option("--memory")
@click.option("--gpus", type=GpuAmount(), help=f"GPUs per replica: {GpuAmount.HELP}, e.g. 1 or 0.5.")
@click.option("--gpu-memory", help="Memory each of its GPUs must have at least, e.g. 40G; with a share, the memory "
                                   "of its device the share reserves.")
@click.option("--project", help="Whose quota its replicas use and whose tokens may call it (default: default).")
@click.option("--priority", type=int, help="Queued requests of higher-priority deployments go first.")
@click.option("--concurrency", type=int, help="Requests in flight before the router answers 429.")
@click.option("--min-residency", help="A loaded deployment is not evicted sooner than this, e.g. 30s.")
@click.option("--target-concurrency", type=float,
              help="Requests per replica (in flight or queued) the autoscaler aims for, MIN to MAX (default 2).")
@click.option("--scale-down-delay", help="Load must stay lower this long before replicas are removed (default 60s).")
@click.option("--public", is_flag=True, help="Serve it through the router without a key.")
@click.option("--preload", is_flag=True, help="Start a replica now even with MIN 0.")
@click.option("--api-key-env", metavar="VAR", help="Also accept the key held in this environment variable.")
@click.option("--env", "env", multiple=True, callback=parse_pairs, metavar="K=V")
@click.option("--label", "labels", multiple=True, callback=parse_pairs, metavar="K=V")
@export_option
@workdir_options
@click.option("--pip", multiple=True, metavar="SPEC",
              help="A Python package the replicas need (a requirement, -r FILE, or a wheel or project path inside the "
                   "working directory); repeatable.")
@click.option("--python", metavar="VERSION", help="The Python version of that environment, e.g. 3.11.")
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def deploy(ctx: click.Context, name: str | None, spec_file: Path | None, replicas, models, health_path,
           health_interval, health_threshold, startup_timeout, cpus, memory, gpus, gpu_memory,
           api_key_env: str | None, workdir: Path | None, no_workdir: bool, pip: tuple[str, ...], as_json: bool,
           command: tuple[str, ...], export: tuple[str, ...], **fields: Any) -> None:
    """Deploy a service: corral deploy NAME [OPTIONS] -- CMD [ARGS...], where CMD serves HTTP on $PORT.

    Options may come before or after NAME; everything after `--` is the command.
    """
    file_data, file_workdir = load_spec_file(spec_file) if spec_file else ({}, None)
    selection = export or file_data.pop("export", None)
    if selection is not None:
        file_data["export"] = exported(selection, os.environ)
    key = None
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise CliError(f"--api-key-env {api_key_env}: that variable is not set")
    spec = build_deployment(
        file_data, name, command, replicas, models,
        health={"path": health_path, "interval": health_interval, "threshold": health_threshold,
                "startup_timeout": startup_timeout},
        resources={"cpu": cpus, "memory": memory, "gpu": gpus, "gpu_memory": gpu_memory}, pip=list(pip) or None,
        **fields)
    directory = chosen_workdir(workdir, no_workdir, file_workdir)
    api = client(ctx)
    if directory is not None:
        spec = with_shipped(spec, ship_workdir(api, directory, spec.replica_job().pool))
    view = serving.deploy(api, spec)
    if key:
        serving.new_key(api, spec.name, key)
    if as_json:
        print_json(view)
    else:
        click.echo(view.name)


@click.command()
@click.option("--all", "include_ended", is_flag=True, help="Include destroyed deployments.")
@json_option
def deployments(include_ended: bool, as_json: bool) -> None:
    """List deployments: state, replicas wanted and by state, models, project."""
    found = serving.deployments(client(), include_ended)
    if as_json:
        print_json(found)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "STATE", "WANTED", "REPLICAS", "MODELS", "PROJECT", "AGE"):
        table.add_column(column, no_wrap=True)
    now = time.time()
    for view in found:
        table.add_row(Text(view.name), _state(view.state), str(view.replicas), replica_summary(view.replica_counts),
                      Text(", ".join(view.spec.model_names)), Text(view.spec.project),
                      format_age(now - view.created_at))
    console().print(table)


@click.group()
def deployment() -> None:
    """Inspect a deployment, issue it a key, or scale it."""


@deployment.command("info")
@click.argument("name")
@json_option
def deployment_info(name: str, as_json: bool) -> None:
    """Spec, replicas (state, address, job) and history of a deployment."""
    detail = serving.deployment(client(), name)
    if as_json:
        print_json(detail)
        return
    spec = detail.spec
    out = console()
    out.print(f"[bold]{detail.name}[/bold]  ", _state(detail.state), f"  wanted {detail.replicas} "
              f"(min {spec.min_replicas}, max {spec.max_replicas})")
    out.print(f"command    {format_command(spec.command)}", highlight=False, markup=False)
    out.print(f"project    {spec.project}", markup=False)
    out.print(f"models     {', '.join(spec.model_names)}", markup=False)
    out.print(f"resources  {format_resources(spec.resources)}   health GET {spec.health.path} every "
              f"{spec.health.interval:g}s   idle timeout {spec.idle_timeout and f'{spec.idle_timeout:g}s' or '-'}"
              f"   {'public' if spec.public else f'{detail.keys} key(s)'}", markup=False)
    desired = detail.desired_replicas if detail.desired_replicas is not None else "-"
    out.print(f"autoscale  target {spec.target_concurrency:g} per replica, scale down after "
              f"{spec.scale_down_delay:g}s   desired {desired}   {detail.autoscale_reason or ''}", markup=False)
    if detail.failed_starts:
        out.print(f"starts     {detail.failed_starts} replica(s) in a row ended before serving; no new one before "
                  f"{format_time(detail.next_start_at)}", markup=False)
    table = Table(box=None, pad_edge=False, title="replicas", title_justify="left")
    for column in ("ID", "STATE", "ADDRESS", "JOB", "SINCE", "REASON"):
        table.add_column(column)
    for replica in detail.replica_list:
        table.add_row(str(replica.id), _state(replica.state), replica.address or "-", str(replica.job_id),
                      format_time(replica.state_since), Text(replica.reason or ""))
    out.print(table)
    history = Table(box=None, pad_edge=False, title="history", title_justify="left")
    for column in ("AT", "WHAT", "HANDLER", "RESULT", "CHANGE", "MESSAGE"):
        history.add_column(column)
    for entry in detail.history[-30:]:
        what = f"replica {entry.replica_id}" if entry.replica_id else "deployment"
        change = f"{entry.from_state or ''} -> {entry.to_state}" if entry.to_state else ""
        history.add_row(format_time(entry.at), what, entry.handler, entry.result, change, Text(entry.message or ""))
    out.print(history)


@deployment.command("key")
@click.argument("name")
def deployment_key(name: str) -> None:
    """Issue a new key for calling NAME through the router; prints it once."""
    click.echo(serving.new_key(client(), name))


@deployment.command("scale")
@click.argument("name")
@click.argument("replicas", type=click.IntRange(min=0))
def deployment_scale(name: str, replicas: int) -> None:
    """Set the replicas NAME wants now (0: scale to zero)."""
    view = serving.scale(client(), name, replicas)
    click.echo(f"{view.name}: {view.replicas} replica(s) wanted")


@click.command()
@click.argument("name")
def undeploy(name: str) -> None:
    """Stop every replica of a deployment and remove it."""
    view = serving.undeploy(client(), name)
    click.echo(f"{view.name} {view.state}")


@click.command()
@click.option("--controller", "controllers", envvar="CORRAL_URL", required=True, callback=controllers_option,
              metavar="URL[,URL...]", help=CONTROLLERS_HELP)
@click.option("--token-file", type=click.File("r"),
              help="A file holding the admin token; - reads it from stdin. Default: $CORRAL_TOKEN.")
@click.option("--token", hidden=True, expose_value=False, callback=refuse_token_value)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8266, show_default=True)
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=config_option,
              help="The controller's config file, whose `router:` key it reads: max_wait, swap_timeout, and an "
              "eviction policy (groups or matrix).")
def router(controllers: list[str], token_file: TextIO | None, host: str, port: int,
           config: CorralConfig | None) -> None:
    """Run a standalone router (scale-out): proxies /v1 and /serve like the controller does. While it moves to the
    next controller of --controller it keeps serving with the replicas it last learned."""
    from corral.core.config import RouterConfig
    from corral.serving.standalone import run_router

    token = read_token(token_file, os.environ, ("CORRAL_TOKEN",))
    said_on_a_fatal_signal()
    run_router(",".join(controllers), token, host, port, config.router if config else RouterConfig())


def replica_summary(counts: dict[str, int]) -> str:
    """"2 healthy, 1 provisioning", in lifecycle order; ended replicas are left out."""
    shown = [(state, counts.get(state, 0)) for state in ReplicaState if state is not ReplicaState.TERMINATED]
    return ", ".join(f"{n} {state.lower()}" for state, n in shown if n) or "-"


def _state(state: str) -> Text:
    return Text(str(state), style=STATE_STYLES.get(str(state), ""))
