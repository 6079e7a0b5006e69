"""End to end: where tasks start. The README's examples typed as written, in a directory holding their scripts;
a worker that does not share the file system gets a copy without the ignored files; --no-workdir; bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.filesystem import OVERRIDE
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
ELSEWHERE = "e" * 32  # the file system id of a worker on "another machine"
ROOT = Path(__file__).resolve().parents[2]

TRAIN = """\
import os
# each task of the gang leaves a note where it ran: the directory the job was submitted from
with open(f"ran-{os.environ['CORRAL_TASK_INDEX']}.txt", "w") as note:
    note.write(os.getcwd())
"""


def corral(cluster: Cluster, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=cwd)


@pytest.fixture
def python_on_path(monkeypatch):
    """`python` in the README's commands is this interpreter, for the workers and their tasks."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def gpu_cluster(tmp_path, python_on_path):
    """Two workers on this machine (so sharing its file system), each with a virtual 24G GPU."""
    running = Cluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    running.start_controller()
    for name in ("w1", "w2"):
        running.start_worker(name, 2, "--gpus", "1", "--gpu-memory", "24G")
    yield running
    running.stop()


@pytest.fixture
def far_cluster(tmp_path, python_on_path):
    """One worker that behaves as if on another machine: it shares no file system with the submitter."""
    running = Cluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    running.start_controller()
    running.start_worker("far", env={OVERRIDE: ELSEWHERE})
    yield running
    running.stop()


def project(tmp_path: Path, **files: str) -> Path:
    root = tmp_path / "proj"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def readme_examples(tmp_path: Path) -> Path:
    """A copy of the repository's examples, in a directory of the test's own (the tasks write their notes there)."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "examples", root / "examples", ignore=shutil.ignore_patterns("out", "__pycache__"))
    return root


def test_the_readme_gang_example_runs_in_the_submission_directory(gpu_cluster, tmp_path):
    root = readme_examples(tmp_path)
    done = corral(gpu_cluster, root, "submit", "--gang", "--replicas", "2", "--wait", "--", "python",
                  "examples/train.py")
    assert done.returncode == 0, done.stderr
    assert [(root / "examples" / "out" / f"rank-{i}.txt").read_text() for i in (0, 1)] == [str(root)] * 2
    job = gpu_cluster.job(int(done.stdout))
    assert job["spec"]["workdir"]["path"] == str(root) and job["spec"]["bundle"] is None  # nothing uploaded
    worlds = [a["world"] for task in gpu_cluster.tasks(job["id"]) for a in task["attempts"]]
    assert worlds == [{"start": "shared", "directory": str(root), "env_key": None, "env_seconds": None,
                       "env_cached": None}] * 2
    shown = " ".join(corral(gpu_cluster, root, "info", str(job["id"])).stdout.split())
    assert f"{root} (files not uploaded" in shown and f"{root} (shared)" in shown


def test_the_readme_serving_example_becomes_ready_through_the_router(gpu_cluster, tmp_path):
    root = readme_examples(tmp_path)
    done = corral(gpu_cluster, root, "deploy", "chat", "--replicas", "0:2", "--model-name", "llama-3-8b", "--gpus",
                  "1", "--gpu-memory", "24G", "--idle-timeout", "10m", "--health", "/health", "--", "python",
                  "examples/serve.py")
    assert done.returncode == 0, done.stderr
    answer = gpu_cluster.http.get("/serve/chat/hello", timeout=120)  # scale from zero: a cold start
    assert (answer.status_code, answer.text) == (200, f"served from {root}")
    chat = gpu_cluster.http.post("/v1/chat/completions", json={
        "model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
    assert chat.json()["choices"][0]["message"]["content"] == "you said: hi"
    assert gpu_cluster.get("/api/v1/deployments/chat")["spec"]["workdir"]["path"] == str(root)


def test_no_workdir_starts_in_the_attempts_empty_directory(gpu_cluster, tmp_path):
    root = project(tmp_path, **{"train.py": TRAIN})
    done = corral(gpu_cluster, root, "submit", "--no-workdir", "--wait", "--", "sh", "-c", "pwd; ls")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    where, *listing = gpu_cluster.logs(job_id).splitlines()
    assert Path(where).parent.name == "tasks" and Path(where).parent.parent.parent == gpu_cluster.root
    assert "train.py" not in listing
    assert gpu_cluster.tasks(job_id)[0]["attempts"][0]["world"]["start"] == "empty"


def test_bad_workdirs_are_one_clear_line_and_submit_nothing(gpu_cluster, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    for args, said in ((["--workdir", "file.txt"], "is a file"), (["--workdir", "missing"], "does not exist"),
                       (["--workdir", ".", "--no-workdir"], "--workdir and --no-workdir contradict each other")):
        done = corral(gpu_cluster, tmp_path, "submit", *args, "--", "true")
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert gpu_cluster.get("/api/v1/jobs")["items"] == []


def test_a_worker_elsewhere_runs_a_copy_without_the_ignored_files(far_cluster, tmp_path):
    root = project(tmp_path, **{"data.txt": "kept", ".gitignore": "secret.txt\nbuild/\n", "secret.txt": "no",
                                "build/out.o": "no", "sub/.corralignore": "*.ckpt\n", "sub/model.ckpt": "no",
                                "sub/code.py": "kept"})
    done = corral(far_cluster, root, "submit", "--wait", "--", "sh", "-c", "find . -type f | sort; touch made-there")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    assert far_cluster.logs(job_id).split() == ["./.gitignore", "./data.txt", "./sub/.corralignore",
                                                "./sub/code.py"]
    assert not (root / "made-there").exists()
    world = far_cluster.tasks(job_id)[0]["attempts"][0]["world"]
    assert world["start"] == "bundle" and world["directory"].startswith(str(far_cluster.root / "far"))
    again = corral(far_cluster, root, "submit", "--", "true")  # the same tree: the controller has it already
    assert far_cluster.job(int(again.stdout))["spec"]["bundle"] == far_cluster.job(job_id)["spec"]["bundle"]


def test_a_job_whose_files_were_not_uploaded_waits_for_a_worker_that_shares_them(far_cluster, tmp_path):
    job_id = far_cluster.submit(command=["true"], workdir={"path": str(tmp_path), "filesystem": "a" * 32})
    reason = f"no worker in pool default shares the file system of {tmp_path} (its files were not uploaded)"
    wait_for(lambda: far_cluster.job(job_id)["pending_reason"] == reason, 30, "the pending reason")
    shown = " ".join(corral(far_cluster, tmp_path, "info", str(job_id)).stdout.split())
    assert f"far no does not share the file system of {tmp_path}" in shown


def test_a_workdir_over_the_cap_names_its_biggest_file(far_cluster, tmp_path):
    root = project(tmp_path, **{"train.py": TRAIN})
    with (root / "weights.bin").open("wb") as out:
        for _ in range(101):
            out.write(os.urandom(2**20))
    done = corral(far_cluster, root, "submit", "--", "python", "train.py")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "weights.bin (105.9M)" in done.stderr and "--no-workdir" in done.stderr
    assert far_cluster.get("/api/v1/jobs")["items"] == []
