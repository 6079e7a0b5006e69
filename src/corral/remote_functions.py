"""`@corral.remote(...)`: a function that knows how it runs as a job, submitted with `fn.submit(...)`."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.client.http import Client
    from corral.client.jobs import FunctionJob

# Shorthands for the fields of `resources`, as the CLI spells them.
RESOURCE_OPTIONS = {"cpus": "cpu", "memory": "memory", "gpus": "gpu", "gpu_memory": "gpu_memory"}


class RemoteFunction:
    """Calls run locally; `submit` runs the function as a job, through `client` if given, else the task's
    own client inside a corral task, else one found as the CLI finds the controller."""

    def __init__(self, function: Callable, options: Mapping[str, Any]) -> None:
        self.function = function
        self._options = dict(options)
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def options(self, **options: Any) -> RemoteFunction:
        """The same function with some options changed: `train.options(gpus=2).submit(cfg)`."""
        return RemoteFunction(self.function, {**self._options, **options})

    def submit(self, *args: Any, client: Client | None = None, **kwargs: Any) -> FunctionJob:
        options = dict(self._options)
        resources = {RESOURCE_OPTIONS[k]: options.pop(k) for k in list(options) if k in RESOURCE_OPTIONS}
        if "resources" in options:
            resources = {**dict(options.pop("resources")), **resources}
        replicas = options.pop("replicas", None)
        workdir: str | os.PathLike | None = options.pop("workdir", None)
        return (client or _default_client()).submit(
            self.function, *args, resources=resources or None, replicas=replicas, workdir=workdir,
            options=options or None, **kwargs)


def remote(function: Callable | None = None, **options: Any) -> Any:
    """`@remote` or `@remote(gpus=1, replicas=4, workdir=".", time_limit="1h", ...)`: any JobSpec field,
    plus `cpus`, `gpus`, `gpu_memory`, `memory` for the resources of each task and `workdir` to ship with it."""
    if function is not None:
        return RemoteFunction(function, options)
    return lambda f: RemoteFunction(f, options)


_client: Client | None = None


def _default_client() -> Client:
    global _client
    if _client is None:
        from corral.client.http import Client
        from corral.context import current

        try:
            _client = current().client
        except RuntimeError:
            _client = Client()
    return _client
