"""The worker's environment cache, with the real uv installing wheels made here (never an index)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from corral.core.pip import classify
from corral.worker.environments import (
    EnvironmentBuildError,
    EnvironmentCache,
    Interpreter,
    choose_interpreter,
    environment_key,
    own_interpreter,
)
from tests.wheels import make_wheel

PYTHON = own_interpreter().version


@pytest.fixture
def wheels(tmp_path, monkeypatch):
    """A find-links directory with thepkg 1.0 and other 2.0, as the worker's own uv configuration."""
    directory = tmp_path / "wheels"
    make_wheel(directory, "thepkg", "1.0")
    make_wheel(directory, "other", "2.0")
    monkeypatch.setenv("UV_FIND_LINKS", str(directory))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    return directory


@pytest.fixture
def workdir(tmp_path):
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


def key(items: list[str], workdir, python: str = PYTHON) -> str:
    return environment_key(python, [classify(item) for item in items], workdir)


def test_the_key_is_the_same_for_the_same_inputs_and_changes_with_any_of_them(workdir):
    make_wheel(workdir / "wheels", "local", "1.0")
    (workdir / "requirements.txt").write_text("thepkg\n")
    (workdir / "mypkg").mkdir()
    (workdir / "mypkg" / "setup.py").write_text("# one\n")
    items = ["thepkg==1.0", "-r requirements.txt", "./wheels/local-1.0-py3-none-any.whl", "./mypkg"]
    first = key(items, workdir)
    assert key(items, workdir) == first
    assert key(list(reversed(items)), workdir) != first
    assert key(items, workdir, python="3.11.0") != first
    (workdir / "requirements.txt").write_text("thepkg\nother\n")
    second = key(items, workdir)
    assert second != first
    make_wheel(workdir / "wheels", "local", "1.0", source="VERSION = 'changed'\n")
    third = key(items, workdir)
    assert third != second
    (workdir / "mypkg" / "setup.py").write_text("# two\n")
    assert key(items, workdir) != third
    (workdir / "mypkg" / "__pycache__").mkdir()
    (workdir / "mypkg" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert key(items, workdir) == key(items, workdir)


def test_a_path_item_that_is_missing_or_leads_outside_through_a_link_is_refused(workdir, tmp_path):
    with pytest.raises(EnvironmentBuildError, match="no such path"):
        key(["./wheels/missing.whl"], workdir)
    (tmp_path / "secret.txt").write_text("thepkg\n")
    (workdir / "reqs.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(EnvironmentBuildError, match="leads outside the working directory"):
        key(["reqs.txt"], workdir)


def test_the_worker_s_own_interpreter_is_chosen_when_it_matches_else_the_newest_that_does():
    own, older, newer = Interpreter("3.11.7", "/own"), Interpreter("3.12.1", "/a"), Interpreter("3.12.4", "/b")
    assert choose_interpreter(None, [own, older, newer]) is own
    assert choose_interpreter("3.11", [own, older, newer]) is own
    assert choose_interpreter("3.12", [own, older, newer]) is newer
    assert choose_interpreter("3.12.1", [own, older, newer]) is older
    assert choose_interpreter("3.13", [own, older, newer]) is None


async def test_concurrent_requests_for_one_set_build_it_once_and_share_it(tmp_path, wheels, workdir):
    cache = EnvironmentCache(tmp_path / "environments")
    cache.scan()
    first, second = await asyncio.gather(cache.acquire(None, ["thepkg"], workdir, tmp_path / "build-1"),
                                         cache.acquire(None, ["thepkg"], workdir, tmp_path / "build-2"))
    assert cache.builds == 1
    assert sorted([first.cached, second.cached]) == [False, True]
    assert first.environment is second.environment and first.environment.in_use == 2
    assert [path.exists() for path in (tmp_path / "build-1", tmp_path / "build-2")].count(True) == 1
    other = await cache.acquire(None, ["other"], workdir, tmp_path / "build-3")
    assert not other.cached and cache.builds == 2 and other.environment.key != first.environment.key
    assert not [entry for entry in cache.root.iterdir() if entry.name.startswith(".build-")]


async def test_a_task_in_the_environment_imports_its_packages_and_the_worker_s_corral(tmp_path, wheels, workdir):
    cache = EnvironmentCache(tmp_path / "environments")
    acquired = await cache.acquire(None, ["thepkg==1.0"], workdir, tmp_path / "build")
    env = acquired.environment.task_env("/usr/bin:/bin")
    assert env["PATH"].startswith(f"{acquired.environment.bin}:")
    assert env["VIRTUAL_ENV"] == str(acquired.environment.path)
    code = "import sys, thepkg, corral, cloudpickle; print(thepkg.VERSION, sys.prefix)"
    done = subprocess.run(["python", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.0", str(acquired.environment.path)]


async def test_a_requirement_that_does_not_resolve_fails_with_uv_s_words_and_leaves_nothing(tmp_path, wheels,
                                                                                             workdir):
    cache = EnvironmentCache(tmp_path / "environments")
    with pytest.raises(EnvironmentBuildError, match="nosuchpkg"):
        await cache.acquire(None, ["nosuchpkg"], workdir, tmp_path / "build")
    assert "nosuchpkg" in (tmp_path / "build").read_text()
    assert not cache.environments
    assert [entry.name for entry in cache.root.iterdir() if not entry.name.endswith(".lock")] == []


async def test_a_build_past_its_timeout_fails_saying_so(tmp_path, wheels, workdir):
    cache = EnvironmentCache(tmp_path / "environments", build_timeout=0.001)
    with pytest.raises(EnvironmentBuildError, match="timed out after 0.001s"):
        await cache.acquire(None, ["thepkg"], workdir, tmp_path / "build")
    assert not [entry for entry in cache.root.iterdir() if entry.is_dir()]


async def test_a_restarted_worker_finds_its_environments_and_leftovers_go(tmp_path, wheels, workdir):
    root = tmp_path / "environments"
    built = await EnvironmentCache(root).acquire(None, ["thepkg"], workdir, tmp_path / "build")
    (root / f".build-{'0' * 64}-deadbeef").mkdir()  # a build a killed worker left half done
    again = EnvironmentCache(root)
    again.scan()
    assert list(again.environments) == [built.environment.key]
    assert not (root / f".build-{'0' * 64}-deadbeef").exists()
    acquired = await again.acquire(None, ["thepkg"], workdir, tmp_path / "build-again")
    assert acquired.cached and again.builds == 0
    [listed] = again.listing()
    assert (listed.key, listed.python, listed.in_use) == (built.environment.key, PYTHON, 1)
    assert listed.size > 0


async def test_over_its_size_the_cache_evicts_the_least_recently_used_environment_no_task_uses(tmp_path, wheels,
                                                                                               workdir):
    cache = EnvironmentCache(tmp_path / "environments", max_size=1)  # every environment is over it
    first = await cache.acquire(None, ["thepkg"], workdir, tmp_path / "build-1")
    second = await cache.acquire(None, ["other"], workdir, tmp_path / "build-2")
    assert set(cache.environments) == {first.environment.key, second.environment.key}  # both in use
    await cache.release(first.environment.key)
    assert set(cache.environments) == {second.environment.key}
    assert not first.environment.path.exists() and second.environment.path.exists()
    generation = cache.generation
    await cache.release(second.environment.key)
    assert not cache.environments and cache.generation > generation


def test_the_worker_finds_its_own_python_first():
    from corral.worker.environments import discover_pythons

    found = discover_pythons()
    assert found[0] == own_interpreter() and found[0].path == sys.executable
    assert len({i.version for i in found}) == len(found)


def test_a_worker_without_the_uv_package_still_finds_its_own_python(monkeypatch):
    """Found on a GPU machine whose Python lacked uv: discovery raised ImportError and took the worker down."""
    from corral.worker.environments import discover_pythons, uv_binary

    monkeypatch.setitem(sys.modules, "uv", None)  # import uv now raises ImportError
    with pytest.raises(FileNotFoundError, match="uv package is not installed"):
        uv_binary()
    assert discover_pythons() == [own_interpreter()]
