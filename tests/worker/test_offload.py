"""The worker's own threads for blocking calls (corral.worker.offload), lighter than asyncio.to_thread."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from corral.worker import offload as offload_module
from corral.worker.offload import offload
from corral.worker.runner import _private_directory


async def test_a_call_gives_its_result_from_another_thread():
    result, thread = await offload(lambda a, b: (a + b, threading.get_ident()), 2, 3)
    assert result == 5 and thread != threading.get_ident()


async def test_a_call_s_error_is_raised_to_its_awaiter():
    def fail() -> None:
        raise FileExistsError("there")

    with pytest.raises(FileExistsError, match="there"):
        await offload(fail)


async def test_calls_run_side_by_side_and_the_loop_runs_meanwhile():
    """As the default executor: a mkdir waiting on a busy disk holds neither the loop nor the other calls."""
    both, loop_ran = threading.Barrier(2, timeout=10), threading.Event()
    calls = [offload(both.wait), offload(both.wait)]
    await asyncio.sleep(0)
    loop_ran.set()
    await asyncio.gather(*calls)
    assert loop_ran.is_set()


async def test_a_cancelled_call_is_not_told_and_the_threads_go_on():
    release = threading.Event()
    waited = offload(release.wait, 10)
    waited.cancel()
    release.set()
    await asyncio.sleep(0.05)  # its end comes to the loop, and finds no one waiting
    assert await offload(int, "7") == 7


def test_each_loop_gets_its_own_calls_back():
    async def one(value: int) -> int:
        return await offload(lambda: value)

    assert [asyncio.run(one(value)) for value in range(3)] == [0, 1, 2]


async def _number(text: str) -> int:
    return await offload(int, text)


def test_a_forked_child_starts_threads_of_its_own():
    assert asyncio.run(_number("1")) == 1
    pid = os.fork()
    if pid == 0:  # the parent's threads are not here: the child's first call must not wait on them for ever
        code = 0 if asyncio.run(_number("3")) == 3 and offload_module._started_in == os.getpid() else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_attempt_directory_is_made_private_where_it_is_missing_or_there_already(tmp_path):
    fresh, nested, there = tmp_path / "tasks" / "1-0", tmp_path / "a" / "b" / "2-0", tmp_path / "tasks" / "3-0"
    fresh.parent.mkdir()
    there.mkdir(mode=0o755)
    for directory in (fresh, nested, there):
        _private_directory(str(directory))
        assert directory.is_dir() and directory.stat().st_mode & 0o777 == 0o700
    (tmp_path / "tasks" / "4-0").write_text("")
    with pytest.raises(FileExistsError):
        _private_directory(str(tmp_path / "tasks" / "4-0"))
