"""`corral controller` and `corral worker`: the long-running processes, started by hand or by `corral up`.

Their modules are imported inside the commands, so the client commands stay fast to start.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

import click

from corral.cli.common import CliError, parse_amounts, parse_pairs
from corral.client.discovery import DEFAULT_DATA_DIR
from corral.core.spec import MAX_CPU, MAX_GPU, MAX_MEMORY
from corral.core.spec_text import format_bytes, parse_bytes, parse_duration
from corral.log_format import configure_logging

if TYPE_CHECKING:
    from corral.core.config import CorralConfig

log_format_option = click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
                                 show_default=True, help="json: one object per line, with job/task/worker ids.")


def positive_option(parse: Callable[[str], object], kind: type[int] | type[float]) -> Callable[..., int | float]:
    """A click callback that reads a value with `parse` ("7d" -> seconds, "100M" -> bytes) as a positive `kind`;
    zero, negative or malformed is a usage error; an option not given stays None."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> int | float | None:
        if value is None:
            return None
        try:
            amount = kind(parse(value))
        except (TypeError, ValueError) as error:
            raise click.BadParameter(str(error), ctx=ctx, param=param) from None
        if amount <= 0:
            raise click.BadParameter(f"{value!r} must be more than zero", ctx=ctx, param=param)
        return amount

    return callback


duration_option = positive_option(parse_duration, float)
size_option = positive_option(parse_bytes, int)


def config_option(ctx: click.Context, param: click.Parameter, path: Path | None) -> CorralConfig | None:
    """A click callback: the config file read and validated once, before anything starts (a CorralConfig; None
    when not given); a file that cannot be read or does not validate is a usage error naming the field."""
    from corral.core.config import ConfigError, parse_config

    if path is None:
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise click.BadParameter(f"cannot read {path}: {getattr(error, 'strerror', None) or error}",
                                 ctx=ctx, param=param) from None
    try:
        return parse_config(text, str(path))
    except ConfigError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


ROUTER_CONFIG_VARIABLE = "CORRAL_ROUTER_CONFIG"  # read by controllers before the router's keys joined --config


def controllers_option(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    """Click callback: "URL1,URL2" -> the controllers' URLs, each http(s)://host[:port]; else a usage error."""
    from corral.core.failover import parse_urls

    try:
        return parse_urls(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


CONTROLLERS_HELP = ("The controller's URL, or several controllers' of one database, comma-separated "
                    "(http(s)://host[:port]): when the one in use stops answering, the next is used.")


def refuse_token_value(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Click callback of a token flag (the worker's retired `--token T`, the controller's `--admin-token T`): a
    value on the command line is in every process listing."""
    if value is not None:
        instead = "--token-file PATH, or the token in the environment" if param.name == "token" else \
            "the token in the environment"
        raise click.BadParameter(f"a token on the command line is visible to every user (ps, /proc): give {instead} "
                                 "(see --help)", ctx=ctx, param=param)


def networks_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple:
    """Click callback: IP networks (10.0.0.0/8, 127.0.0.1), else a usage error naming the bad one."""
    from corral.core.webhooks import parse_network

    try:
        return tuple(parse_network(text) for text in value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


def advertise_url_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback: one http(s)://host[:port], else a usage error."""
    if value is None:
        return None
    urls = controllers_option(ctx, param, value)
    if len(urls) > 1:
        raise click.BadParameter("one URL: this controller's", ctx=ctx, param=param)
    return urls[0]



@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="CORRAL_DATA_DIR",
              default=DEFAULT_DATA_DIR, show_default=True, help="Where the store, logs, bundles and tokens live.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8265, show_default=True)
@click.option("--db", "db_url", help="SQLAlchemy URL of the store (default: SQLite in the data directory).")
@click.option("--loss-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds without a heartbeat before a worker is declared lost.")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True)
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=config_option,
              help="A YAML config file with `pools:`, `quotas:` (applied to the store on start), "
              "`retry_policy:` (the cluster's default retry policy), `metrics:` and `router:`.")
@click.option("--event-retention", default="7d", show_default=True, callback=duration_option,
              help="How long events of ended jobs and of workers are kept (e.g. 12h, 30d).")
@click.option("--lost-worker-retention", default="24h", show_default=True, callback=duration_option,
              help="How long a LOST worker stays listed after its last heartbeat (e.g. 1h, 7d).")
@click.option("--log-limit", default="100M", show_default=True, callback=size_option,
              help="Bytes of each task's stdout, and of its stderr, kept per attempt; past it, a marker line.")
@click.option("--log-retention", default="30d", show_default=True, callback=duration_option,
              help="How long the logs of ended jobs are kept (e.g. 12h, 7d).")
@click.option("--audit-retention", default="365d", show_default=True, callback=duration_option,
              help="How long rows of the audit log (people's API calls) are kept (e.g. 90d).")
@click.option("--metrics-token-required", is_flag=True,
              help="/metrics answers only with the admin token (config file: `metrics: {require_token: true}`).")
@click.option("--notify-backoff", default="10s", show_default=True, callback=duration_option,
              help="Wait before a job webhook's first retry; each next wait is 3 times longer (8 tries in all).")
@click.option("--notify-estimate-factor", type=click.FloatRange(min=1, min_open=True, max=1000), default=2.0,
              show_default=True, help="A job's webhook hears of its start estimate when the wait it promises grows "
                                      "or shrinks by more than this factor.")
@click.option("--notify-allow", "notify_allow", multiple=True, callback=networks_option, metavar="NETWORK",
              help="Let job webhooks reach this network (CIDR or address; repeatable) though it is not public: "
                   "loopback, private and link-local addresses are refused otherwise.")
@click.option("--admin-token", hidden=True, expose_value=False, callback=refuse_token_value)
@click.option("--join-token", hidden=True, expose_value=False, callback=refuse_token_value)
@click.option("--advertise-url", callback=advertise_url_option,
              help="Where workers reach this controller (http(s)://host[:port]). Default: --host and --port, unless "
              "--host is a wildcard. Give it when several controllers serve one PostgreSQL store.")
@log_format_option
def controller(data_dir: Path, host: str, port: int, db_url: str | None, loss_timeout: float,
               heartbeat_interval: float, event_retention: float, lost_worker_retention: float, log_limit: int,
               log_retention: float, audit_retention: float, metrics_token_required: bool, log_format: str,
               config: CorralConfig | None, advertise_url: str | None, notify_backoff: float,
               notify_estimate_factor: float, notify_allow: tuple) -> None:
    """Run the controller (API, scheduler, dashboard) in the foreground.

    The cluster's admin and join tokens are kept in the store, shared by every controller of it. The first start
    stores $CORRAL_ADMIN_TOKEN and $CORRAL_JOIN_TOKEN when set, else those of tokens.json in the data directory,
    else new ones; a later start given others refuses to start.

    It locks its data directory: with SQLite, a second controller on the same one refuses to start; with
    PostgreSQL, several controllers of one store may share it. On SQLite it also locks the database file: a second
    controller on the same SQLite store refuses to start, whatever its data directory.
    """
    import asyncio

    from corral.controller.lock import DataDirInUse, hold
    from corral.controller.server import controller_logging, serve
    from corral.controller.settings import ControllerSettings, TokenMismatch, settle_tokens
    from corral.controller.sqlite_lock import SQLiteStoreInUse, hold_sqlite_store
    from corral.core.config import CorralConfig
    from corral.store.database import sqlite_file

    if os.environ.get(ROUTER_CONFIG_VARIABLE):
        raise click.UsageError(f"{ROUTER_CONFIG_VARIABLE} is no longer read: put its keys under `router:` in the "
                               "--config file")
    config = config or CorralConfig()
    settings = ControllerSettings(
        data_dir=data_dir, host=host, port=port, db_url=db_url, loss_timeout=loss_timeout,
        heartbeat_interval=heartbeat_interval, event_retention=event_retention,
        lost_worker_retention=lost_worker_retention, log_limit=log_limit, log_retention=log_retention,
        audit_retention=audit_retention, log_format=log_format, config=config,
        metrics_token_required=metrics_token_required or config.metrics.require_token,
        admin_token=os.environ.get("CORRAL_ADMIN_TOKEN") or None,
        join_token=os.environ.get("CORRAL_JOIN_TOKEN") or None, advertise_url=advertise_url,
        notify_backoff=notify_backoff, notify_estimate_factor=notify_estimate_factor, notify_allow=notify_allow)
    said_on_a_fatal_signal()
    try:
        with hold(made_data_dir(data_dir), settings.url, shared=settings.shares_data_dir):
            controller_logging(log_format)
            open_store_or_fail(settings.database_url)
            asyncio.run(settle_tokens(settings))
            with hold_sqlite_store(sqlite_file(settings.database_url), settings.url):
                serve(settings)
    except (DataDirInUse, SQLiteStoreInUse, TokenMismatch) as error:
        raise CliError(str(error)) from None


def said_on_a_fatal_signal() -> None:
    """A daemon killed by a fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL: a native library's fault, a file
    mapping cut from under it) writes its threads' stacks to stderr, its log, before it dies, rather than ending
    without a line there. Where stderr is no file (none at all, or a test runner's capture) there is nowhere to
    write them, and the daemon runs on without."""
    with contextlib.suppress(RuntimeError, OSError, ValueError):
        faulthandler.enable()


def made_data_dir(data_dir: Path) -> Path:
    """The data directory, made readable by its owner only (it holds secrets), or one line saying why not."""
    from corral.controller.settings import private_dir

    try:
        private_dir(data_dir)
    except OSError as error:
        raise CliError(f"cannot create the data directory {data_dir}: {error.strerror or error}") from None
    return data_dir


def open_store_or_fail(url: str) -> None:
    """Before anything starts: the store can be opened and migrated, or one line says why not."""
    from corral.store.database import StoreUnavailable, check_store

    try:
        check_store(url)
    except StoreUnavailable as error:
        raise CliError(str(error)) from None


def default_address(controller_url: str) -> str:
    """The local address on the route to the controller: what gang peers on other machines can reach."""
    parts = urlsplit(controller_url)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((parts.hostname or "127.0.0.1", parts.port or 80))  # UDP: sends nothing
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


def memory_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: "16G" -> bytes, a bad size is a usage error."""
    try:
        size = None if value is None else int(parse_bytes(value))
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None
    if size is not None and size > MAX_MEMORY:
        raise click.BadParameter(f"{value} is more than a machine has (at most {format_bytes(MAX_MEMORY)})",
                                 ctx=ctx, param=param)
    return size


def cpus_option(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback: cores to offer, more than 0 and no more than a machine has (NaN and inf are neither)."""
    if value is not None and not 0 < value <= MAX_CPU:
        raise click.BadParameter(f"{value:g} is not a number of cores between 0 and {MAX_CPU:g}", ctx=ctx, param=param)
    return value


GPUS = click.IntRange(min=0, max=MAX_GPU)


WORKER_TOKEN_VARIABLES = ("CORRAL_JOIN_TOKEN", "CORRAL_TOKEN")


def read_token(token_file: TextIO | None, env: Mapping[str, str], variables: tuple[str, ...]) -> str:
    """The token from `token_file` (its first line), else from the first of `variables` set in `env`."""
    if token_file is not None:
        token = token_file.readline().strip()
        if not token:
            raise click.BadParameter(f"{token_file.name} holds no token", param_hint="--token-file")
        return token
    token = next((env[name] for name in variables if env.get(name)), None)
    if token is None:
        raise click.UsageError(f"no token: give --token-file PATH or set {' or '.join(variables)}")
    return token


@click.command()
@click.option("--controller", "controllers", envvar="CORRAL_URL", required=True, callback=controllers_option,
              metavar="URL[,URL...]", help=CONTROLLERS_HELP)
@click.option("--token-file", type=click.File("r"),
              help="A file holding the join token (or the admin token); - reads it from stdin. "
              "Default: $CORRAL_JOIN_TOKEN, else $CORRAL_TOKEN.")
@click.option("--token", hidden=True, expose_value=False, callback=refuse_token_value)
@click.option("--name", default=socket.gethostname, help="Default: the host name.")
@click.option("--address", help="Where gang peers reach this machine. Default: the address on the controller's route.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=".corral-worker",
              show_default=True, help="Where attempts run and logs are kept.")
@click.option("--cpus", type=float, callback=cpus_option, help="Cores to offer (default: detected).")
@click.option("--memory", callback=memory_option, help="Memory to offer, e.g. 16G (default: detected).")
@click.option("--gpus", type=GPUS, help="GPUs to offer (default: detected through NVML).")
@click.option("--gpu-memory", callback=memory_option,
              help="Memory of each virtual GPU that --gpus adds beyond the detected ones, e.g. 24G (default: unknown).")
@click.option("--label", "labels", multiple=True, callback=parse_pairs, metavar="K=V",
              help="A label jobs can constrain on, e.g. gpu=h100 (repeatable).")
@click.option("--pool", default="default", show_default=True, help="The resource group this worker serves.")
@click.option("--resource", "resources", multiple=True, callback=parse_amounts, metavar="NAME=N",
              help="A custom resource slot offered, e.g. tpu=4 (repeatable).")
@click.option("--shared-fs", "shared_fs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory this machine shares with submitters on other machines (NFS and the like), at the "
                   "same path: jobs submitted from under it run in place (repeatable).")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True)
@click.option("--log-limit", default="100M", show_default=True, callback=size_option,
              help="Bytes of each task's stdout, and of its stderr, kept per attempt; past it, a marker line.")
@click.option("--attempt-retention", default="1d", show_default=True, callback=duration_option,
              help="How long ended attempts' directories (work files, logs) stay in the work directory.")
@click.option("--containment", type=click.Choice(["auto", "cgroup", "processes"]), default="auto",
              show_default=True, help="How a task's processes are kept together: a cgroup per attempt (auto: where "
                                      "cgroup v2 is writable) or a subreaper with recorded process ids.")
@click.option("--env-build-timeout", default="10m", show_default=True, callback=duration_option,
              help="How long building a job's Python environment (--pip, --python) may take before its task fails.")
@click.option("--env-cache-size", callback=size_option,
              help="Disk the cached Python environments may use, e.g. 20G; past it the least recently used ones no "
                   "task uses are removed (default: no cap).")
@log_format_option
def worker(controllers: list[str], token_file: TextIO | None, name: str, address: str | None, work_dir: Path,
           cpus: float | None, memory: int | None, gpus: int | None, gpu_memory: int | None, labels: dict[str, str],
           pool: str, resources: dict[str, float], shared_fs: tuple[Path, ...], heartbeat_interval: float,
           log_limit: int, attempt_retention: float, containment: str, env_build_timeout: float,
           env_cache_size: int | None, log_format: str) -> None:
    """Run a worker in the foreground: register with the controller and run the tasks it is given (moving to the
    next controller of --controller when the one in use stops answering)."""
    from corral.worker.agent import WorkerOptions, run_worker

    if gpu_memory is not None and gpus is None:
        raise click.UsageError("--gpu-memory sets the memory of virtual GPUs: give --gpus too")
    token = read_token(token_file, os.environ, WORKER_TOKEN_VARIABLES)
    configure_logging(log_format)
    said_on_a_fatal_signal()

    run_worker(WorkerOptions(
        controller_url=controllers[0], other_controllers=controllers[1:], token=token, name=name,
        address=address or default_address(controllers[0]), work_dir=work_dir, cpus=cpus, memory=memory,
        gpus=gpus, gpu_memory=gpu_memory or 0, labels=labels, heartbeat_interval=heartbeat_interval, pool=pool,
        resources=resources, shared_fs=[str(path.absolute()) for path in shared_fs], log_limit=log_limit,
        attempt_retention=attempt_retention, containment=containment, env_build_timeout=env_build_timeout,
        env_cache_size=env_cache_size))
