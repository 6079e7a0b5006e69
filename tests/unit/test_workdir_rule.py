"""Where a task starts: the shared directory, a copy of it, or an empty one."""

import pytest

from corral import filesystem
from corral.core.spec import Workdir
from corral.core.workdir import WorkdirUnavailable, choose_start, shares, under

HERE = "a" * 32
ELSEWHERE = "b" * 32
PROJECT = Workdir(path="/home/a/proj", filesystem=HERE)


def exists(path: str) -> bool:
    return True


def missing(path: str) -> bool:
    return False


def test_the_same_file_system_shares():
    assert shares(PROJECT, HERE, [])


def test_another_file_system_does_not_share():
    assert not shares(PROJECT, ELSEWHERE, [])
    assert not shares(PROJECT, None, [])


@pytest.mark.parametrize("root", ["/home", "/home/", "/home/a/proj", "/home/./a", "/"])
def test_a_directory_under_a_shared_fs_root_is_shared(root):
    assert shares(PROJECT, ELSEWHERE, ["/nfs", root])


@pytest.mark.parametrize("root", ["/home/a/proj2", "/home/a/proj/sub", "/hom", "/srv"])
def test_a_directory_beside_or_above_a_shared_fs_root_is_not(root):
    assert not shares(PROJECT, ELSEWHERE, [root])


def test_under_compares_whole_components():
    assert under("/data/x", "/data") and not under("/database", "/data") and under("/data", "/data/")


def test_a_sharing_worker_runs_in_the_directory_even_with_a_bundle():
    assert choose_start(PROJECT, "f" * 64, HERE, [], exists) == "shared"


def test_a_worker_elsewhere_unpacks_the_bundle():
    assert choose_start(PROJECT, "f" * 64, ELSEWHERE, [], exists) == "bundle"


def test_a_shared_directory_missing_on_the_worker_falls_back_to_the_bundle():
    assert choose_start(PROJECT, "f" * 64, ELSEWHERE, ["/home"], missing) == "bundle"


def test_no_workdir_and_no_bundle_starts_empty():
    assert choose_start(None, None, HERE, [], exists) == "empty"
    assert choose_start(None, "f" * 64, HERE, [], exists) == "bundle"  # a function job's payload


def test_a_worker_that_can_do_neither_says_why():
    with pytest.raises(WorkdirUnavailable, match="does not share the file system of /home/a/proj, and the job's "
                                                 "files were not uploaded"):
        choose_start(PROJECT, None, ELSEWHERE, [], exists)
    with pytest.raises(WorkdirUnavailable, match="/home/a/proj is not a directory on this worker"):
        choose_start(PROJECT, None, ELSEWHERE, ["/home"], missing)


def test_the_file_system_id_is_stable_hex(monkeypatch):
    monkeypatch.delenv(filesystem.OVERRIDE, raising=False)
    first = filesystem.filesystem_id()
    assert first == filesystem.filesystem_id()
    Workdir(path="/x", filesystem=first)  # the spec's pattern accepts it


def test_the_file_system_id_can_be_overridden_for_tests_and_is_checked(monkeypatch):
    monkeypatch.setenv(filesystem.OVERRIDE, ELSEWHERE)
    assert filesystem.filesystem_id() == ELSEWHERE
    monkeypatch.setenv(filesystem.OVERRIDE, "not-hex")
    with pytest.raises(ValueError, match="CORRAL_FILESYSTEM_ID"):
        filesystem.filesystem_id()
