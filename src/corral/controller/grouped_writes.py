"""Writes from concurrent calls, committed together (a group commit): the writes that arrive while one
transaction is being written go in the next, one transaction and one commit for them all, rather than one each,
queued one by one behind the single writer. A group is taken once the writer is: the calls that came while it
waited for the writer (held by another transaction, a placing run) go in it, not in a group of their own after it.
Each call is answered only once its own write is committed; a write that fails fails alone: when a group's
transaction fails, each of its writes is tried again in its own.

A call's write is a function of the transaction's connection, by default; with `write_group` it is any item,
and the group's items are written by one call of it (the worker reports: one set of statements for them all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

Item = TypeVar("Item")
Write = Callable[["AsyncConnection"], Awaitable[Any]]
WriteGroup = Callable[["AsyncConnection", list[Item]], Awaitable[list[Any]]]


async def _each(connection: AsyncConnection, writes: list[Write]) -> list[Any]:
    """The writes run one after the other in the transaction: what each returns."""
    return [await write(connection) for write in writes]


class GroupedWrites(Generic[Item]):
    def __init__(self, store: Store, write_group: WriteGroup[Item] = _each) -> None:
        """`write_group` writes a group's items through the connection and returns each one's result, in order."""
        self.store = store
        self.write_group = write_group
        self._waiting: list[tuple[Item, asyncio.Future]] = []
        self._writer: asyncio.Task | None = None

    async def write(self, item: Item) -> Any:
        """The item's result, once it is committed (with other calls' items, or alone). A write function must write
        only through the connection it is given; any item may be written twice (its first write rolled back)."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return await done

    async def _write(self) -> None:
        while self._waiting:
            failed = await self._commit_waiting()
            if len(failed) > 1:
                for one in failed:  # which of them failed is found by writing each alone
                    await self._commit([one])

    async def _commit_waiting(self) -> list[tuple[Item, asyncio.Future]]:
        """Writes every call waiting once the writer is taken (those that came while it waited for the writer, held
        by another transaction, among them) in one transaction, and answers them; the group, not answered, where it
        failed and was of several (a group of one is answered its failure)."""
        group: list[tuple[Item, asyncio.Future]] | None = None
        try:
            async with self.store.write() as connection:
                group, self._waiting = self._waiting, []
                results = await self.write_group(connection, [item for item, _ in group])
        except Exception as error:
            if group is None:  # the writer failed before the group was taken: those waiting then are the group
                group, self._waiting = self._waiting, []
            if len(group) == 1:
                _answer_failure(group, error)
            return group
        _answer(group, results)
        return []

    async def _commit(self, group: list[tuple[Item, asyncio.Future]]) -> None:
        """Writes the group in one transaction and answers each of its calls, a failure included."""
        try:
            async with self.store.write() as connection:
                results = await self.write_group(connection, [item for item, _ in group])
        except Exception as error:
            _answer_failure(group, error)
            return
        _answer(group, results)


def _answer(group: list[tuple[Any, asyncio.Future]], results: list[Any]) -> None:
    for (_, done), result in zip(group, results, strict=True):
        if not done.done():  # its request may have gone meanwhile
            done.set_result(result)


def _answer_failure(group: list[tuple[Any, asyncio.Future]], error: Exception) -> None:
    for _, done in group:
        if not done.done():
            done.set_exception(error)
