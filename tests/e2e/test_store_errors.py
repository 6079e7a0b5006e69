"""A `--db` the controller cannot use is one line naming what is wrong and how to fix it, through the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.cluster import free_port
from tests.postgres import POSTGRES_URL

BAD_STORES = [
    (POSTGRES_URL.rsplit("/", 1)[0] + "/nosuchdb", 'database "nosuchdb" does not exist; create it'),
    (f"postgresql://postgres@127.0.0.1:{free_port()}/test", "is the database server running"),
    ("postgresql://postgres@nosuchhost.invalid:5432/test", "is the database server running"),
    ("no url at all", "is not a database URL: write it as postgresql://"),
]


@pytest.mark.parametrize("command", [["controller"], ["up", "--workers", "0"]])
@pytest.mark.parametrize(("url", "said"), BAD_STORES)
def test_a_store_that_cannot_be_opened_is_one_error_line(tmp_path, command, url, said):
    run = subprocess.run([sys.executable, "-m", "corral", *command, "--data-dir", str(tmp_path / "data"),
                          "--port", str(free_port()), "--db", url],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 1
    assert run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("error: ") and said in run.stderr
