"""Writes from concurrent calls, committed together (a group commit): the writes that arrive while one
transaction is being written go in the next, one transaction and one commit for them all, rather than one each,
queued one by one behind the single writer. A group is taken once the writer is: the calls that came while it
waited for the writer (held by another transaction, a placing run) go in it, not in a group of their own after it.
The GroupedWrites of one store share that writer: the submissions and the workers' reports waiting then are written
in the one transaction, each kind by its own `write_group`, rather than in one transaction each kind.
Each call is answered only once its own write is committed; a write that fails fails alone: when a group's
transaction fails, each of its writes is tried again in its own.

A call's write is a function of the transaction's connection, by default; with `write_group` it is any item,
and the group's items are written by one call of it (the worker reports: one set of statements for them all).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

Item = TypeVar("Item")
Write = Callable[["AsyncConnection"], Awaitable[Any]]
WriteGroup = Callable[["AsyncConnection", list[Item]], Awaitable[list[Any]]]
Call = tuple[Any, asyncio.Future]


async def _each(connection: AsyncConnection, writes: list[Write]) -> list[Any]:
    """The writes run one after the other in the transaction: what each returns."""
    return [await write(connection) for write in writes]


class GroupedWrites(Generic[Item]):
    def __init__(self, store: Store, write_group: WriteGroup[Item] = _each) -> None:
        """`write_group` writes a group's items through the connection and returns each one's result, in order."""
        self.store = store
        self.write_group = write_group
        self._waiting: list[Call] = []
        self._writer = _writer_of(store)
        self._writer.kinds = [*(ref for ref in self._writer.kinds if ref() is not None), weakref.ref(self)]

    async def write(self, item: Item) -> Any:
        """The item's result, once it is committed (with other calls' items, or alone). A write function must write
        only through the connection it is given; any item may be written twice (its first write rolled back)."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        self._writer.start()
        return await done

    def _take(self) -> list[Call]:
        group, self._waiting = self._waiting, []
        return group

    async def _commit(self, group: list[Call]) -> None:
        """Writes the group in one transaction and answers each of its calls, a failure included."""
        try:
            async with self.store.write() as connection:
                results = await self.write_group(connection, [item for item, _ in group])
        except Exception as error:
            _answer_failure(group, error)
            return
        _answer(group, results)


class _Writer:
    """The one task that writes the groups of a store's GroupedWrites (`kinds`), all waiting ones in a transaction."""

    def __init__(self) -> None:
        self.kinds: list[weakref.ref[GroupedWrites]] = []  # in the order made: the order they write in (not the store)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._write())

    def _waiting(self) -> list[GroupedWrites]:
        return [kind for ref in self.kinds if (kind := ref()) is not None and kind._waiting]

    async def _write(self) -> None:
        while waiting := self._waiting():
            failed = await self._commit_waiting(waiting[0].store)
            if sum(len(group) for _, group in failed) > 1:
                for kind, group in failed:
                    for one in group:  # which of them failed is found by writing each alone
                        await kind._commit([one])

    async def _commit_waiting(self, store: Store) -> list[tuple[GroupedWrites, list[Call]]]:
        """Writes every call waiting once the writer is taken, of every kind, in one transaction, and answers them;
        the groups, not answered, where it failed and held several calls (a lone call is answered its failure)."""
        groups: list[tuple[GroupedWrites, list[Call]]] | None = None
        try:
            async with store.write() as connection:
                groups = [(kind, kind._take()) for kind in self._waiting()]
                results = [await kind.write_group(connection, [item for item, _ in group]) for kind, group in groups]
        except Exception as error:
            if groups is None:  # the writer failed before the groups were taken: those waiting then are the groups
                groups = [(kind, kind._take()) for kind in self._waiting()]
            if sum(len(group) for _, group in groups) == 1:
                _answer_failure(groups[0][1], error)
            return groups
        for (_, group), answers in zip(groups, results, strict=True):
            _answer(group, answers)
        return []


_WRITERS: weakref.WeakKeyDictionary[Store, _Writer] = weakref.WeakKeyDictionary()


def _writer_of(store: Store) -> _Writer:
    if (writer := _WRITERS.get(store)) is None:
        writer = _WRITERS[store] = _Writer()
    return writer


def _answer(group: list[Call], results: list[Any]) -> None:
    for (_, done), result in zip(group, results, strict=True):
        if not done.done():  # its request may have gone meanwhile
            done.set_result(result)


def _answer_failure(group: list[Call], error: Exception) -> None:
    for _, done in group:
        if not done.done():
            done.set_exception(error)
