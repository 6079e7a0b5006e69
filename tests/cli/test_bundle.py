import hashlib
import io
import os
import tarfile
import time

import pytest

from corral.client.bundle import make_bundle
from corral.client.errors import CorralError


def tree(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o775)
    for skipped in (".git", ".venv", "pkg/__pycache__"):
        (root / skipped).mkdir()
        (root / skipped / "junk").write_text("junk")
    return root


def names(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {m.name: m for m in archive.getmembers()}


def test_the_same_tree_gives_the_same_bytes_whatever_the_mtimes(tmp_path):
    first = make_bundle(tree(tmp_path / "a"))
    copy = tree(tmp_path / "b")
    os.utime(copy / "run.sh", (time.time() - 5000, time.time() - 5000))
    assert hashlib.sha256(make_bundle(copy)).digest() == hashlib.sha256(first).digest()


def test_a_changed_file_changes_the_digest(tmp_path):
    root = tree(tmp_path / "a")
    before = make_bundle(root)
    (root / "pkg" / "mod.py").write_text("x = 2\n")
    assert make_bundle(root) != before


def test_vcs_venv_and_bytecode_are_skipped_and_exec_bits_kept(tmp_path):
    members = names(make_bundle(tree(tmp_path)))
    assert set(members) == {"pkg", "pkg/mod.py", "run.sh"}
    assert members["run.sh"].mode == 0o755 and members["pkg/mod.py"].mode == 0o644
    assert {m.mtime for m in members.values()} == {0}


def test_over_the_limit_is_refused_clearly(tmp_path):
    (tmp_path / "big").write_bytes(os.urandom(64 * 1024))
    with pytest.raises(CorralError, match="MiB"):
        make_bundle(tmp_path, max_size=16 * 1024)


def test_not_a_directory(tmp_path):
    with pytest.raises(CorralError, match="not a directory"):
        make_bundle(tmp_path / "missing")
