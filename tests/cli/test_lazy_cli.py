"""The command's help loads no client, httpx, pydantic or rich, and its listing agrees with the commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click
import pytest

from corral.cli.main import COMMANDS, main
from tests.cli.conftest import job_view

# What only running a command may import: the clients, the HTTP library, the models and the tables.
HEAVY = ("httpx", "pydantic", "rich", "yaml", "corral.client.http", "corral.client.aio", "corral.core.spec",
         "corral.core.views")
# What `corral jobs` piped does without: the models, rich, and httpx (a plain http:// controller is reached through
# http.client alone).
HEAVY_FOR_THE_LISTING = ("pydantic", "rich", "yaml", "httpx", "corral.core.spec", "corral.core.views")


def imported_by(*args: str, url: str = "http://127.0.0.1:9") -> set[str]:
    """The modules a fresh `corral ARGS` process (stdout piped) had imported when it exited."""
    script = ("import atexit, json, sys\n"
              "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
              "from corral.cli.main import main\n"
              "main(prog_name='corral')\n")
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": "t"})
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stderr.splitlines()[-1]))


@pytest.mark.parametrize("args", [("--help",), ("jobs", "--help"), ("workers", "--help"), ("logs", "--help"),
                                  ("cancel", "--help")])
def test_help_imports_nothing_heavy(args):
    modules = imported_by(*args)
    assert "click" in modules  # the probe saw the process's modules
    assert modules.isdisjoint(HEAVY), sorted(modules.intersection(HEAVY))


def test_a_piped_jobs_listing_loads_no_model_and_no_rich():
    """`corral jobs` piped reads a few fields of the controller's JSON and lays its table out itself."""
    page = json.dumps({"items": [job_view(7).model_dump(mode="json")], "next_cursor": None}).encode()

    class Controller(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Controller) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        modules = imported_by("jobs", url=f"http://127.0.0.1:{server.server_port}")
        server.shutdown()
    assert "corral.client.http" in modules
    assert modules.isdisjoint(HEAVY_FOR_THE_LISTING), sorted(modules.intersection(HEAVY_FOR_THE_LISTING))


def test_the_listing_says_what_each_command_says_of_itself():
    for name, (where, line) in COMMANDS.items():
        command = main.get_command(click.Context(main), name)
        assert f"{command.callback.__module__}:{command.callback.__name__}" == where
        for limit in range(20, 80):
            assert click.Command(name, help=line).get_short_help_str(limit) == command.get_short_help_str(limit), name


def test_the_listing_names_every_command_and_an_unknown_one_is_refused(cli):
    listed = cli("--help").output.split("Commands:\n", 1)[1]
    assert [row.split()[0] for row in listed.splitlines()] == sorted(COMMANDS)
    result = cli("nope")
    assert result.exit_code == 2 and "No such command 'nope'" in result.output


def test_importing_the_client_loads_no_model_and_a_model_is_built_on_first_use():
    """Importing the client, as every command does, imports neither pydantic nor the models (its plans import
    them when they read a reply); importing the models builds none of the read models (DeferredModel), and a
    reader is built by its first use."""
    script = ("import json, sys\n"
              "import corral.client.http\n"
              "loaded = [m for m in ('pydantic', 'corral.core.spec', 'corral.core.views') if m in sys.modules]\n"
              "import pydantic\n"
              "from corral.client import plans\n"
              "from corral.core import protocol, relay, views\n"
              "from corral.core.wire import DeferredModel\n"
              "built = [f'{name}.{n}' for name in ('corral.core.spec', 'corral.core.views', 'corral.core.protocol',\n"
              "         'corral.core.relay') for n, v in vars(sys.modules[name]).items() if isinstance(v, type)\n"
              "         and issubclass(v, DeferredModel) and v.__module__ == name and v.__pydantic_complete__]\n"
              "built += [n for n in ('ClientControl', 'WorkerControl') if getattr(relay, n).pydantic_complete]\n"
              "reader = plans.list_of(views.JobView)\n"
              "try:\n"
              "    reader.validate_python([{'id': 'x'}])\n"
              "except pydantic.ValidationError as error:\n"
              "    print(json.dumps([loaded, built, error.error_count() > 0, reader.pydantic_complete]))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [[], [], True, True]
