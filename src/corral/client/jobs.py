"""Handles on submitted function jobs: their results, their end, their cancel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from corral.client import functions
from corral.core.views import JobView

if TYPE_CHECKING:
    from corral.client.aio import AsyncClient
    from corral.client.http import Client


def _one_or_all(view: JobView, values: list) -> Any:
    return values[0] if view.replicas == 1 else values


class FunctionJob:
    """A function running as a job. `view` is the JobView as of submission (or the last `refresh`)."""

    def __init__(self, client: Client, view: JobView) -> None:
        self.client = client
        self.view = view
        self.id = view.id

    def __repr__(self) -> str:
        return f"FunctionJob(id={self.id}, name={self.view.name!r})"

    def result(self, timeout: float | None = None) -> Any:
        """The return value (a list of them, in task order, for replicas); raises what the function raised,
        with its remote traceback; TimeoutError after `timeout` seconds."""
        return _one_or_all(self.view, self.client._run(functions.results(self.id, self.view.replicas, timeout)))

    def wait(self, timeout: float | None = None) -> JobView:
        self.view = self.client.wait(self.id, timeout)
        return self.view

    def refresh(self) -> JobView:
        self.view = self.client.get(self.id)
        return self.view

    def cancel(self) -> JobView:
        self.view = self.client.cancel(self.id)
        return self.view

    def logs(self, task: int = 0, stream: str = "stdout", follow: bool = False) -> Iterator[bytes]:
        return self.client.logs(self.id, task, stream, follow=follow)


class AsyncFunctionJob:
    """FunctionJob for AsyncClient: the same methods, awaited."""

    def __init__(self, client: AsyncClient, view: JobView) -> None:
        self.client = client
        self.view = view
        self.id = view.id

    def __repr__(self) -> str:
        return f"AsyncFunctionJob(id={self.id}, name={self.view.name!r})"

    async def result(self, timeout: float | None = None) -> Any:
        return _one_or_all(self.view, await self.client._run(functions.results(self.id, self.view.replicas,
                                                                                 timeout)))

    async def wait(self, timeout: float | None = None) -> JobView:
        self.view = await self.client.wait(self.id, timeout)
        return self.view

    async def refresh(self) -> JobView:
        self.view = await self.client.get(self.id)
        return self.view

    async def cancel(self) -> JobView:
        self.view = await self.client.cancel(self.id)
        return self.view

    def logs(self, task: int = 0, stream: str = "stdout", follow: bool = False):
        return self.client.logs(self.id, task, stream, follow=follow)
