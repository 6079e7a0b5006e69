"""Writes from concurrent calls, committed together (a group commit): the writes that arrive while one
transaction is being written go in the next, one transaction and one commit for them all, rather than one each,
queued one by one behind the single writer. Each call is answered only once its own write is committed; a write
that fails fails alone: when a group's transaction fails, each of its writes is tried again in its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")
Write = Callable[["AsyncConnection"], Awaitable[Any]]


class GroupedWrites:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: list[tuple[Write, asyncio.Future]] = []
        self._writer: asyncio.Task | None = None

    async def write(self, write: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """What `write` returns, once it is committed (with those of other calls, or alone): it must write only
        through the connection it is given, and may be run twice (its first run rolled back)."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((write, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return await done

    async def _write(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting, []
            if len(group) == 1:
                await self._commit(group)
            elif not await self._commit(group, answer_failure=False):
                for one in group:  # which of them failed is found by writing each alone
                    await self._commit([one])

    async def _commit(self, group: list[tuple[Write, asyncio.Future]], *, answer_failure: bool = True) -> bool:
        """Writes the group in one transaction and answers each of its calls; whether it was committed (a failure
        is answered to the calls only where `answer_failure`)."""
        try:
            async with self.store.write() as connection:
                results = [await write(connection) for write, _ in group]
        except Exception as error:
            if answer_failure:
                for _, done in group:
                    if not done.done():
                        done.set_exception(error)
            return False
        for (_, done), result in zip(group, results, strict=True):
            if not done.done():  # its request may have gone meanwhile
                done.set_result(result)
        return True
