"""`corral submit`: a JobSpec from a file and options, where its tasks start (and the upload of its files when
needed), and an optional wait."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from corral.cli.common import CliError, GpuAmount, client, json_option, parse_amounts, parse_pairs, print_json
from corral.cli.format import task_summary
from corral.client.errors import CorralError, format_detail, format_validation
from corral.client.exports import exported
from corral.core.retry_causes import RETRIABLE_CAUSES, Backoff, Jitter
from corral.core.spec_text import MAX_BATCH, parse_duration
from corral.core.states import JobState
from corral.filesystem import filesystem_id

if TYPE_CHECKING:  # `corral submit` sends the spec as written: the controller checks it, and no model is loaded
    from pydantic import BaseModel

    from corral.client.http import Client
    from corral.core.spec import JobSpec

    Spec = TypeVar("Spec", bound=BaseModel)

# Options that set a top-level JobSpec field of the same name when given.
TOP_LEVEL = ("name", "replicas", "gang", "priority", "max_retries_failure", "max_retries_preemption",
             "max_task_failures", "time_limit", "scheduling_timeout", "grace_period", "pool", "project", "spread",
             "begin", "python", "max_running", "notify")
# Repeatable options that replace the file's list when given.
LISTS = ("constraints", "after", "after_any", "pip")
# Options that set a field of `resources`.
RESOURCES = {"cpus": "cpu", "memory": "memory", "gpus": "gpu", "gpu_memory": "gpu_memory"}
# Options that set a field of `retry_policy`.
RETRY = {"retry_max": "max_retries", "retry_delay": "retry_delay", "retry_backoff": "backoff",
         "retry_multiplier": "backoff_multiplier", "retry_max_delay": "max_retry_delay", "retry_jitter": "jitter",
         "retry_jitter_ratio": "jitter_ratio", "retry_on": "eligible_causes"}


def load_spec_file(path: Path) -> tuple[dict[str, Any], Path | None]:
    """A YAML or JSON job file: the JobSpec fields, plus an optional `workdir` relative to the file."""
    data = _read_spec_file(path)
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold a mapping of job spec fields, not a {type(data).__name__}")
    return _spec_entry(data, path)


def load_spec_list(path: Path) -> list[tuple[dict[str, Any], Path | None]] | None:
    """As `load_spec_file`, each, for a file that holds a list of job specs (`corral submit -f`); None for a file
    of one."""
    data = _read_spec_file(path)
    if not isinstance(data, list):
        return None
    if not data:
        raise CliError(f"{path} holds an empty list: give at least one job spec")
    if len(data) > MAX_BATCH:
        raise CliError(f"{path} holds {len(data)} job specs; at most {MAX_BATCH} are submitted at once")
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise CliError(f"{path}: job {i} must be a mapping of job spec fields, not a {type(entry).__name__}")
    return [_spec_entry(entry, path) for entry in data]


def _read_spec_file(path: Path) -> Any:
    import yaml  # only a spec file needs it: `corral submit -- CMD` does not load it

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise CliError(f"{path} is not valid YAML or JSON: {error}") from None
    return {} if data is None else data


def _spec_entry(data: dict[str, Any], path: Path) -> tuple[dict[str, Any], Path | None]:
    workdir = data.pop("workdir", None)
    if isinstance(data.get("python"), float):
        data["python"] = _python_number(data["python"], path)
    return data, (path.parent / str(workdir)) if workdir is not None else None


def workdir_options(command: Callable) -> Callable:
    """--workdir and --no-workdir, shared by `corral submit` and `corral deploy`."""
    command = click.option("--no-workdir", is_flag=True,
                           help="Start tasks in an empty directory of their own, with no files of yours.")(command)
    return click.option("--workdir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                        help="Where tasks start (default: the current directory). Workers that share it run them "
                             "there; the others in a copy, uploaded only when one may take them.")(command)


def chosen_workdir(workdir: Path | None, no_workdir: bool, file_workdir: Path | None) -> Path | None:
    """The directory tasks start in: --workdir, else the spec file's `workdir:`, else the current directory;
    None with --no-workdir."""
    if no_workdir:
        if workdir is not None:
            raise click.UsageError("--workdir and --no-workdir contradict each other: give one")
        return None
    if workdir is None and file_workdir is not None:
        if not file_workdir.is_dir():
            what = "does not exist" if not file_workdir.exists() else "is not a directory"
            raise CliError(f"workdir {file_workdir} (from the spec file) {what}")
        return file_workdir
    return workdir or Path.cwd()


def ship_workdir(api: Client, directory: Path, pool: str,
                 before_upload: Callable[[], object] | None = None) -> dict[str, Any]:
    """The spec fields (as JSON) that make tasks start in `directory`: where it is, and the digest of its files
    when a worker of the pool that does not share it may take them (or none is alive to tell). `before_upload`
    runs first when the files must travel."""
    workdir = located(directory)
    fields: dict[str, Any] = {"workdir": workdir}
    if api.upload_needed(workdir, pool):
        if before_upload is not None:
            before_upload()
        fields["bundle"] = api.upload_bundle(directory)
    return fields


def located(directory: Path) -> dict[str, str]:
    """The spec's `workdir` for `directory`: where it is, and the id of the file system that holds it."""
    return {"path": os.path.abspath(directory), "filesystem": filesystem_id()}


def with_shipped(spec: Spec, fields: dict[str, Any]) -> Spec:
    """A validated spec with `ship_workdir`'s fields."""
    from corral.core.spec import Workdir

    try:
        workdir = Workdir.model_validate(fields["workdir"])
    except ValueError as error:
        raise CliError(str(error)) from None
    return spec.model_copy(update={**fields, "workdir": workdir})


def _python_number(version: float, path: Path) -> str:
    """YAML reads `python: 3.11` as a number, and `3.10` as 3.1: the first is taken, the second is refused."""
    text = repr(version)
    if len(text.partition(".")[2]) < 2:
        raise CliError(f"{path}: python {text} reads as a number; quote the version, e.g. python: '3.10'")
    return text


def build_spec_data(file_data: Mapping[str, Any] | None = None, *, command: tuple[str, ...] | list[str] = (),
                    env: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                    custom: Mapping[str, float] | None = None, export: tuple[str, ...] = (),
                    environ: Mapping[str, str] | None = None, **options: Any) -> dict[str, Any]:
    """Merge the file with the options, options winning; None means "not given". Not validated yet.

    `export` (the --export values) or else the file's `export:` names the variables of `environ` (the
    submitter's environment) the tasks get."""
    data = dict(file_data or {})
    selection = export or data.pop("export", None)
    if selection is not None:
        data["export"] = exported(selection, environ if environ is not None else {})
    if isinstance(data.get("command"), str):
        data["command"] = shlex.split(data["command"])
    if command:
        data["command"] = list(command)
    for field in TOP_LEVEL:
        if options.get(field) is not None:
            data[field] = options[field]
    resources = dict(data.get("resources") or {})
    for option, field in RESOURCES.items():
        if options.get(option) is not None:
            resources[field] = options[option]
    if custom:
        resources["custom"] = {**(resources.get("custom") or {}), **custom}
    if resources:
        data["resources"] = resources
    retry = dict(data.get("retry_policy") or {})
    for option, field in RETRY.items():
        if options.get(option) not in (None, ()):
            retry[field] = list(options[option]) if option == "retry_on" else options[option]
    if retry:
        data["retry_policy"] = retry
    for field, given in (("env", env), ("labels", labels)):
        merged = {**_strings(data.get(field)), **(given or {})}
        if merged:
            data[field] = merged
    for field in LISTS:
        if options.get(field):
            data[field] = list(options[field])
    unknown = set(options) - set(TOP_LEVEL) - set(RESOURCES) - set(RETRY) - set(LISTS)
    if unknown:
        raise TypeError(f"unknown spec options: {sorted(unknown)}")
    return data


def build_spec(file_data: Mapping[str, Any] | None = None, **kwargs: Any) -> JobSpec:
    """The validated spec; a pydantic ValidationError names the field at fault."""
    from corral.core.spec import JobSpec

    return JobSpec.model_validate(build_spec_data(file_data, **kwargs))


def job_ids(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """Click callback: "12,13" -> [12, 13]."""
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of job ids", ctx=ctx, param=param) from None


def begin_time(ctx: click.Context, param: click.Parameter, value: str | None) -> str | float | None:
    """Click callback: "+10m" becomes a unix time from now; anything else is left to the spec to judge."""
    if value is None or not value.strip().startswith("+"):
        return value
    try:
        return time.time() + float(parse_duration(value.strip()[1:]))  # type: ignore[arg-type]
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


export_option = click.option(
    "--export", multiple=True, metavar="NONE|ALL|NAME[,NAME]",
    help="Variables of this environment the tasks get: NONE (the default), ALL, or names (repeatable).")


def _strings(mapping: object) -> dict:
    """YAML reads `PORT: 8080` as a number; environment variables and labels are strings."""
    if not isinstance(mapping, dict):
        return mapping or {}  # type: ignore[return-value]  # let JobSpec report what it is
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v
            for k, v in mapping.items()}


def option_group(*decorators: Callable) -> Callable:
    """Click options applied as one decorator, in the order given."""

    def apply(command: Callable) -> Callable:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


# What a job is, where and how it runs: the options of `corral submit` and `corral shell`.
job_options = option_group(
    click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="A YAML/JSON job spec; options override it."),
    click.option("--name"),
    click.option("--cpus", type=float, help="Cores per task (fractional)."),
    click.option("--memory", help="Memory per task, e.g. 512M, 4G, 2Gi."),
    click.option("--gpus", type=GpuAmount(), help=f"GPUs per task: {GpuAmount.HELP}, e.g. 2 or 0.5."),
    click.option("--gpu-memory", help="Memory each of those GPUs must have at least, e.g. 40G; with a share, the "
                                      "memory of its device the share reserves."),
    click.option("--replicas", type=int, help="Number of tasks."),
    click.option("--gang/--no-gang", default=None, help="Place, start and restart all tasks together."),
    click.option("--priority", help="An integer (-1000..1000) or low, normal, high, critical."),
    click.option("--max-task-failures", type=int, help="Failed tasks tolerated before the job fails."),
    click.option("--time-limit", help="e.g. 90s, 15m, 2h."),
    click.option("--scheduling-timeout", help="Give up (UNSCHEDULABLE) if not placed within this, e.g. 10m."),
    click.option("--grace-period", help="Between SIGTERM and SIGKILL, e.g. 15s."),
    click.option("--pool", help="The resource group to run in (default: default)."),
    click.option("--project", help="Whose quota and fair share the job counts against (default: default)."),
    click.option("--constraint", "constraints", multiple=True, metavar="K=V",
                 help="On worker labels: K=V, K!=V or 'K in A,B' (repeatable)."),
    click.option("--resource", "custom", multiple=True, callback=parse_amounts, metavar="NAME=N",
                 help="A custom resource per task, e.g. tpu=4 (repeatable)."),
    click.option("--spread/--no-spread", default=None, help="At most one task of the job per worker."),
    click.option("--after", callback=job_ids, metavar="JOB[,JOB]", help="Start only once these jobs SUCCEEDED."),
    click.option("--after-any", callback=job_ids, metavar="JOB[,JOB]", help="Start once these jobs ended, however."),
    click.option("--begin", callback=begin_time, metavar="TIME",
                 help="Not before: ISO 8601 (2026-01-31T08:00), unix seconds, or +DURATION (+10m)."),
    click.option("--notify", metavar="URL", help="POST the job's start, end and estimate moves to this http(s) URL "
                                                 "(signed; see docs/notifications.md); 'none': not even the "
                                                 "project's default."),
    click.option("--env", "env", multiple=True, callback=parse_pairs, metavar="K=V", help="Environment variable."),
    click.option("--label", "labels", multiple=True, callback=parse_pairs, metavar="K=V"),
    export_option,
    workdir_options,
    click.option("--pip", multiple=True, metavar="SPEC",
                 help="A Python package the tasks need: a requirement (numpy==2.1.*), a requirements file "
                      "(-r reqs.txt) or a wheel or project inside the working directory (./wheels/x.whl); repeatable. "
                      "The worker builds and caches the environment."),
    click.option("--python", metavar="VERSION", help="The Python version of that environment, e.g. 3.11 (placed only "
                                                     "on workers that have it)."),
)
# How a job is retried: `corral submit` only (an interactive job is never retried).
retry_options = option_group(
    click.option("--max-retries-failure", type=int, help="Retries of a task after it fails."),
    click.option("--max-retries-preemption", type=int, help="Retries after worker loss or preemption."),
    click.option("--retry-max", type=int, help="Re-create the job up to this many times when it fails."),
    click.option("--retry-delay", help="Wait before the first retry, e.g. 30s."),
    click.option("--retry-backoff", type=click.Choice([b.value for b in Backoff]), help="How the delay grows."),
    click.option("--retry-multiplier", type=float, help="Exponential backoff factor."),
    click.option("--retry-max-delay", help="Longest wait between retries (at most 24h)."),
    click.option("--retry-jitter", type=click.Choice([j.value for j in Jitter])),
    click.option("--retry-jitter-ratio", type=float, help="Jitter adds up to this fraction of the delay."),
    click.option("--retry-on", multiple=True, type=click.Choice(sorted(c.value for c in RETRIABLE_CAUSES)),
                 help="A failure cause to retry (repeatable; default: all)."),
)


@click.command(context_settings={"allow_interspersed_args": False})
@job_options
@retry_options
@click.option("--max-running", type=click.IntRange(min=1),
              help="At most this many of the job's tasks run at once (not for a gang).")
@click.option("--idempotency-key", help="Submitting again with the same key returns the same job (with a list in "
                                        "--file, job N of it gets KEY/N).")
@click.option("--wait", is_flag=True, help="Wait for the job to end; exit 0 only if it SUCCEEDED.")
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, spec_file: Path | None, env: dict, labels: dict, custom: dict, workdir: Path | None,
           no_workdir: bool, idempotency_key: str | None, wait: bool, as_json: bool, command: tuple[str, ...],
           **options: Any) -> None:
    """Submit a job: corral submit [OPTIONS] -- CMD [ARGS...]

    A --file that holds a list of job specs submits them all in one call (the options apply to each):
    all are accepted, or none."""
    listed = load_spec_list(spec_file) if spec_file else None
    entries = listed or [load_spec_file(spec_file) if spec_file else ({}, None)]
    if not command and not all(data.get("command") for data, _ in entries):
        raise click.UsageError("no command: give it after --, e.g. `corral submit -- python train.py`, "
                               "or as `command:` in --file")
    specs = [build_spec_data(data, command=command, env=env, labels=labels, custom=custom, environ=os.environ,
                             **options) for data, _ in entries]
    api = client(ctx)
    shipped: dict[Path, dict] = {}  # a directory is uploaded once, however many jobs start in it
    single: Path | None = None  # the one job's directory, whose files travel only if the controller says so
    for i, (_, file_workdir) in enumerate(entries):
        directory = chosen_workdir(workdir, no_workdir, file_workdir)
        if directory is not None and not listed:
            single, specs[i] = directory, {**specs[i], "workdir": located(directory)}
        elif directory is not None:
            if directory not in shipped:
                pool = specs[i].get("pool")
                shipped[directory] = ship_workdir(api, directory, pool if isinstance(pool, str) else "default",
                                                  before_upload=lambda: _check_specs(specs))
            specs[i] = {**specs[i], **shipped[directory]}
    keys = None
    if idempotency_key:
        keys = [f"{idempotency_key}/{i}" for i in range(len(specs))] if listed else [idempotency_key]
    try:
        jobs = _submit_one(api, specs[0], keys, single) if not listed else api.submit_rows(specs, keys, batch=True)
    except CorralError as error:
        if error.status != 422:
            raise
        raise CliError(_refusal(error)) from None
    if not as_json:
        click.echo("\n".join(str(job["id"]) for job in jobs))
    elif not wait:
        print_json(jobs[0] if len(jobs) == 1 else jobs)
    if wait:
        _wait(ctx, [job["id"] for job in jobs], as_json)


def _submit_one(api: Client, spec: dict[str, Any], keys: list[str] | None, directory: Path | None) -> list[dict]:
    """One job, stored. Its directory goes on the condition that every worker that may take the job shares it (one
    round trip where they do, as on one machine); where the controller answers that its files must travel, they are
    uploaded and the job sent again with them."""
    if directory is None:
        return api.submit_rows([spec], keys)
    try:
        return api.submit_rows([spec], keys, shared_workdir=True)
    except CorralError as error:
        if error.status != 409 or not isinstance(error.detail, dict) or not error.detail.get("upload_needed"):
            raise
    return api.submit_rows([{**spec, "bundle": api.upload_bundle(directory)}], keys)


def _check_specs(specs: list[dict[str, Any]]) -> None:
    """The controller's check, made here: a spec it would refuse is refused before its files are uploaded."""
    from pydantic import ValidationError

    from corral.core.spec import JobSpec

    for index, data in enumerate(specs):
        try:
            JobSpec.model_validate(data)
        except ValidationError as error:
            if len(specs) == 1:
                raise
            raise CliError(f"job {index} of the file: {format_validation(error)}") from None


def _refusal(error: CorralError) -> str:
    """The controller's 422 as the user's error: the spec's fields at fault, and in a list which job."""
    detail = error.detail
    if not isinstance(detail, list) or not all(isinstance(item, dict) and (item.get("loc") or [None])[0] == "body"
                                               for item in detail):
        return error.message
    where = detail[0]["loc"]
    if len(where) > 2 and where[1] == "jobs" and isinstance(where[2], int):  # the batch call's jobs.N
        index = where[2]
        own = [{**item, "loc": item["loc"][3:]} for item in detail if item["loc"][1:3] == ["jobs", index]]
        return f"job {index} of the file: {format_detail(own)}"
    return f"invalid job spec: {error.message}"


def _wait(ctx: click.Context, job_ids: list[int], as_json: bool) -> None:
    """Until every job ended; exit 0 only if all SUCCEEDED."""
    ended = []
    for job_id in job_ids:
        try:
            ended.append(client(ctx).wait_row(job_id))
        except KeyboardInterrupt:
            click.echo(f"\nstopped waiting; job {job_id} goes on (`corral cancel {job_id}` stops it)", err=True)
            ctx.exit(130)
    if as_json:
        print_json(ended[0] if len(ended) == 1 else ended)
    for job in ended:
        click.echo(f"job {job['id']} {job['state']} ({task_summary(job['task_counts'])})", err=True)
    ctx.exit(0 if all(job["state"] == JobState.SUCCEEDED for job in ended) else 1)
