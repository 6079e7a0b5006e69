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


def test_over_the_limit_names_the_biggest_files_and_the_ways_out(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(os.urandom(64 * 1024))
    (tmp_path / "small.bin").write_bytes(os.urandom(2000))
    with pytest.raises(CorralError) as caught:
        make_bundle(tmp_path, max_size=16 * 1024)
    message = str(caught.value)
    assert "\n" not in message
    assert "data/big.bin (65.5K), small.bin (2.0K)" in message
    assert "--no-workdir" in message and ".corralignore" in message


def test_ignored_files_do_not_count_against_the_limit(tmp_path):
    (tmp_path / "big.bin").write_bytes(os.urandom(64 * 1024))
    (tmp_path / ".corralignore").write_text("*.bin\n")
    assert set(names(make_bundle(tmp_path, max_size=16 * 1024))) == {".corralignore"}


def test_a_missing_directory_and_a_file_are_refused(tmp_path):
    with pytest.raises(CorralError, match="--workdir .*missing: does not exist"):
        make_bundle(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CorralError, match="--workdir .*file: is not a directory"):
        make_bundle(tmp_path / "file")


def test_gitignore_files_apply_beneath_their_own_directory(tmp_path):
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / "keep.py").write_text("")
    (tmp_path / "run.log").write_text("")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out.o").write_text("")
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "sub" / ".gitignore").write_text("secret.txt\n!important.log\n")
    (tmp_path / "sub" / "important.log").write_text("")
    (tmp_path / "sub" / "other.log").write_text("")
    (tmp_path / "sub" / "secret.txt").write_text("")
    (tmp_path / "sub" / "deep" / "secret.txt").write_text("")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "secret.txt").write_text("")
    assert set(names(make_bundle(tmp_path))) == {
        ".gitignore", "keep.py", "sub", "sub/.gitignore", "sub/important.log", "sub/deep", "other",
        "other/secret.txt"}


def test_corralignore_uses_the_same_rules_beside_gitignore(tmp_path):
    (tmp_path / ".gitignore").write_text("*.tmp\n")
    (tmp_path / ".corralignore").write_text("data/\n/checkpoints\n")
    for name in ("a.py", "b.tmp", "data/x.csv", "checkpoints/c.pt", "src/checkpoints/kept.pt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert set(names(make_bundle(tmp_path))) == {
        ".gitignore", ".corralignore", "a.py", "src", "src/checkpoints", "src/checkpoints/kept.pt"}


def test_the_tree_signature_follows_what_would_be_bundled(tmp_path):
    from corral.client.bundle import TreeMemo, tree_signature

    (tmp_path / "a.py").write_text("1")
    (tmp_path / ".gitignore").write_text("out/\n")
    before = tree_signature(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "big.bin").write_bytes(b"0" * 100)
    assert tree_signature(tmp_path) == before  # ignored files do not count
    os.chmod(tmp_path / "a.py", 0o755)
    assert tree_signature(tmp_path) != before
    memo_file = tmp_path.parent / "memo.json"
    memo = TreeMemo(tmp_path, memo_file)
    assert memo.digest() is None
    memo.remember("ab" * 32)
    assert TreeMemo(tmp_path, memo_file).digest() == "ab" * 32
    memo_file.write_text("not json")
    assert TreeMemo(tmp_path, memo_file).digest() is None  # a broken memo is only a cache missed
