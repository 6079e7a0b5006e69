"""Tasks find this installation's `corral` (and, under `corral up`, its Python) on their PATH."""

import os
import sys

from corral.cli.up import child_env
from corral.worker.agent import installation_bin, worker_env

BIN = installation_bin()


def test_the_installation_is_the_bin_of_the_running_python():
    assert os.path.isfile(os.path.join(BIN, "corral")) and os.path.dirname(sys.executable) == BIN


def test_a_worker_appends_the_installation_to_its_tasks_path_once():
    assert worker_env("http://c:8265/", "/usr/bin:/bin")["PATH"] == f"/usr/bin:/bin:{BIN}"
    assert worker_env("http://c:8265/", f"{BIN}:/usr/bin")["PATH"] == f"{BIN}:/usr/bin"
    assert worker_env("http://c:8265/", None)["PATH"].endswith(f":{BIN}")
    assert worker_env("http://c:8265/", "/bin")["CORRAL_URL"] == "http://c:8265"


def test_corral_up_puts_the_installation_first_for_its_children(monkeypatch):
    monkeypatch.setenv("PATH", f"/usr/local/bin:{BIN}:/usr/bin")
    monkeypatch.setenv("CORRAL_TOKEN", "secret")
    env = child_env()
    assert env["PATH"] == f"{BIN}:/usr/local/bin:/usr/bin" and "CORRAL_TOKEN" not in env
