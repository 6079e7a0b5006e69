import json

import pytest

from corral.client.discovery import discover
from corral.client.errors import CorralError


def write_cluster(directory, url="http://127.0.0.1:9999", token="admin-from-file"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cluster.json").write_text(json.dumps({"url": url, "admin_token": token, "join_token": "j"}))


def test_the_environment_beats_the_data_directory(tmp_path):
    write_cluster(tmp_path)
    env = {"CORRAL_URL": "http://remote:8265/", "CORRAL_TOKEN": "t", "CORRAL_DATA_DIR": str(tmp_path)}
    found = discover(env)
    assert (found.url, found.token) == ("http://remote:8265", "t")


def test_the_data_directory_is_used_without_corral_url(tmp_path):
    write_cluster(tmp_path / "d")
    found = discover({"CORRAL_DATA_DIR": str(tmp_path / "d")})
    assert (found.url, found.token) == ("http://127.0.0.1:9999", "admin-from-file")


def test_the_default_data_directory_is_dot_corral(tmp_path, monkeypatch):
    write_cluster(tmp_path / ".corral", token="default")
    monkeypatch.chdir(tmp_path)
    assert discover({}).token == "default"


def test_no_cluster_is_a_clear_error(tmp_path):
    with pytest.raises(CorralError) as raised:
        discover({"CORRAL_DATA_DIR": str(tmp_path / "none")})
    assert "corral up" in str(raised.value) and "CORRAL_URL" in str(raised.value)
    assert str(tmp_path / "none") in str(raised.value)


def test_a_url_without_token_is_a_clear_error(tmp_path):
    with pytest.raises(CorralError, match="CORRAL_TOKEN"):
        discover({"CORRAL_URL": "http://x:1", "CORRAL_DATA_DIR": str(tmp_path)})


def test_a_corrupt_cluster_file_is_a_clear_error(tmp_path):
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(CorralError, match="cannot read"):
        discover({"CORRAL_DATA_DIR": str(tmp_path)})


def test_an_explicit_token_beats_the_data_directorys_admin_token(tmp_path):
    write_cluster(tmp_path)
    found = discover({"CORRAL_TOKEN": "mine", "CORRAL_DATA_DIR": str(tmp_path)})
    assert (found.url, found.token) == ("http://127.0.0.1:9999", "mine")
