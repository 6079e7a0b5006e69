"""`corral login|logout`: the token is checked with /whoami before it is stored, stored 0600, and found by discovery
after the environment and before a local `corral up`'s cluster.json."""

import json
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.cli.teams import read_token
from corral.client.credentials import Login, credentials_file, load, store
from corral.client.discovery import discover
from corral.client.errors import CorralError
from tests.cli.test_discovery import write_cluster

GOOD = "crl_alice-token"


class WhoamiHandler(BaseHTTPRequestHandler):
    """A controller that knows one token, alice's."""

    def do_GET(self):
        known = self.path == "/api/v1/whoami" and self.headers.get("Authorization") == f"Bearer {GOOD}"
        status, body = (200, {"name": "alice", "role": "member", "cluster_admin": False,
                              "projects": {"vision": "member"}, "token": {"kind": "user", "id": 1}}) if known \
            else (401, {"detail": "unknown token"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def controller():
    server = ThreadingHTTPServer(("127.0.0.1", 0), WhoamiHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


@pytest.fixture
def config(tmp_path):
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "CORRAL_DATA_DIR": str(tmp_path / "none")}


def corral(env, *args, token=""):
    runner = CliRunner(env={"CORRAL_URL": None, "CORRAL_TOKEN": None, **env})
    return runner.invoke(main, list(args), input=token, catch_exceptions=False)


def test_login_checks_then_stores_the_token_for_its_owner_alone(controller, config, tmp_path):
    result = corral(config, "login", controller + "/", token=GOOD + "\n")
    path = tmp_path / "config" / "corral" / "credentials.json"
    assert result.exit_code == 0, result.output
    assert result.output == f"signed in to {controller} as alice (member); token stored in {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": controller, "token": GOOD}
    found = discover(config)
    assert (found.url, found.token, found.source) == (controller, GOOD, str(path))
    assert corral(config, "whoami").output.startswith("alice (member)\n")  # the CLI uses it


def test_a_wrong_token_is_refused_before_anything_is_stored(controller, config):
    result = corral(config, "login", controller, token="wrong\n")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not stored: authentication failed: unknown token")
    assert not credentials_file(config).exists() and load(config) is None


def test_an_unreachable_controller_an_empty_token_and_a_bad_url_are_refused(config):
    unreachable = corral(config, "login", "http://127.0.0.1:1", token=GOOD)
    assert unreachable.exit_code == 1 and "not stored: cannot reach the controller" in unreachable.stderr
    empty = corral(config, "login", "http://127.0.0.1:1", token="\n")
    assert (empty.exit_code, empty.stderr) == (1, "error: no token given\n")
    bad = corral(config, "login", "ctl:8265", token=GOOD)
    assert bad.exit_code == 2 and "'ctl:8265' is not an http:// or https:// URL" in bad.output
    assert not credentials_file(config).exists()


def test_the_environment_wins_over_the_login_which_wins_over_cluster_json(config, tmp_path):
    store(Login("http://remote:8265", "mine"), config)
    write_cluster(tmp_path / "d", token="admin-from-file")
    env = {**config, "CORRAL_DATA_DIR": str(tmp_path / "d")}
    assert (discover(env).url, discover(env).token) == ("http://remote:8265", "mine")
    both = discover({**env, "CORRAL_URL": "http://other:1", "CORRAL_TOKEN": "t"})
    assert (both.url, both.token, both.source) == ("http://other:1", "t", "CORRAL_URL")
    token_only = discover({**env, "CORRAL_TOKEN": "t"})
    assert (token_only.url, token_only.token) == ("http://remote:8265", "t")


def test_without_xdg_config_home_the_login_is_in_home_dot_config(tmp_path):
    path = store(Login("http://remote:8265", "mine"), {"HOME": str(tmp_path)})
    assert path == tmp_path / ".config" / "corral" / "credentials.json"
    assert discover({"HOME": str(tmp_path), "CORRAL_DATA_DIR": str(tmp_path / "none")}).token == "mine"


def test_a_new_login_replaces_the_old_and_tightens_a_loose_directory(config, tmp_path):
    directory = tmp_path / "config" / "corral"
    directory.mkdir(parents=True, mode=0o755)
    (directory / "credentials.json").write_text("{}")
    (directory / "credentials.json").chmod(0o644)
    store(Login("http://a:1", "second"), config)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "credentials.json").stat().st_mode) == 0o600
    assert load(config) == Login("http://a:1", "second")
    assert [p.name for p in directory.iterdir()] == ["credentials.json"]  # no temporary file left


def test_a_corrupt_login_is_a_clear_error(config):
    credentials_file(config).parent.mkdir(parents=True)
    credentials_file(config).write_text("{not json")
    with pytest.raises(CorralError, match="cannot read .*credentials.json.*corral logout"):
        discover(config)


def test_logout_removes_the_login(config):
    store(Login("http://a:1", "t"), config)
    assert corral(config, "logout").output == f"removed {credentials_file(config)}\n"
    assert load(config) is None
    assert corral(config, "logout").output == f"not signed in: {credentials_file(config)} does not exist\n"
    with pytest.raises(CorralError, match="corral login URL"):
        discover(config)


def test_on_a_terminal_the_token_is_asked_for_without_echo(monkeypatch):
    class Terminal:
        def isatty(self):
            return True

    asked = []
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("click.prompt", lambda text, hide_input=False: asked.append((text, hide_input)) or " t \n")
    assert read_token() == "t" and asked == [("Token", True)]
