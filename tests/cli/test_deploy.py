"""`corral deploy` and friends: options become a DeploymentSpec and the API calls the client makes."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.core.deployment_spec import DeploymentSpec
from corral.filesystem import filesystem_id


class FakeApi:
    """Records (method, path, json) and answers like the controller would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict | None]] = []

    def _json(self, method, path, json=None, params=None):
        self.calls.append((method, path, json))
        if path.endswith("/keys"):
            return {"deployment": path.split("/")[-2], "key": (json or {}).get("key") or "crl-new"}
        parts = path.split("/")
        spec = DeploymentSpec.model_validate(json) if method == "POST" and path.endswith("deployments") else \
            DeploymentSpec(name=parts[4] if len(parts) > 4 else "x", command=["x"])
        view = dict(id=1, name=spec.name, state="PENDING", replicas=spec.initial_replicas,
                    replica_counts={"HEALTHY": 1}, spec=spec.model_dump(), keys=0, created_at=time.time(),
                    state_since=time.time())
        return [view] if method == "GET" and path.endswith("deployments") else view

    def upload_needed(self, workdir, pool="default"):
        return False

    def upload_bundle(self, directory):
        return "ab" * 32

    def close(self):
        pass


def run(*args, env=None):
    api = FakeApi()
    result = CliRunner().invoke(main, list(args), obj={"client": api}, env=env, catch_exceptions=False)
    return result, api


def test_deploy_options_become_the_spec():
    result, api = run("deploy", "chat", "--replicas", "0:3", "--model-name", "m1", "--model-name", "m2",
                      "--health", "/ready", "--idle-timeout", "10m", "--gpus", "1", "--gpu-memory", "40G",
                      "--concurrency", "8",
                      "--public", "--env", "A=1", "--", "python", "serve.py")
    assert result.exit_code == 0, result.output
    method, path, body = api.calls[0]
    spec = DeploymentSpec.model_validate(body)
    assert (method, path, result.output) == ("POST", "/api/v1/deployments", "chat\n")
    assert (spec.min_replicas, spec.max_replicas, spec.model_names) == (0, 3, ["m1", "m2"])
    assert (spec.health.path, spec.idle_timeout, spec.resources.gpu, spec.concurrency) == ("/ready", 600.0, 1, 8)
    assert spec.public and spec.env == {"A": "1"} and spec.command == ["python", "serve.py"]
    assert spec.resources.gpu_memory == 40 * 10**9


def test_replicas_start_in_the_directory_deployed_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, api = run("deploy", "chat", "--", "python", "serve.py")
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert result.exit_code == 0, result.output
    assert (spec.workdir.path, spec.workdir.filesystem, spec.bundle) == (str(tmp_path), filesystem_id(), None)
    assert spec.replica_job().workdir == spec.workdir
    result, api = run("deploy", "chat", "--no-workdir", "--", "python", "serve.py")
    assert DeploymentSpec.model_validate(api.calls[0][2]).workdir is None


def test_deploy_from_a_file_with_options_winning(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("name: emb\ncommand: [python, e.py]\nmin_replicas: 1\nhealth: {path: /h, threshold: 5}\n")
    result, api = run("deploy", "-f", str(path), "--health", "/healthz")
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert result.exit_code == 0, result.output
    assert (spec.name, spec.health.path, spec.health.threshold) == ("emb", "/healthz", 5)


def test_api_key_env_registers_that_key():
    result, api = run("deploy", "priv", "--api-key-env", "MY_KEY", "--", "serve", env={"MY_KEY": "k" * 20})
    assert result.exit_code == 0, result.output
    assert api.calls[1] == ("POST", "/api/v1/deployments/priv/keys", {"key": "k" * 20})


def test_an_unset_api_key_variable_is_an_error_and_nothing_is_deployed():
    result, api = run("deploy", "priv", "--api-key-env", "NOT_SET_ANYWHERE", "--", "serve", env={})
    assert result.exit_code == 1 and "NOT_SET_ANYWHERE" in result.output and api.calls == []


def test_a_bad_replicas_value_is_a_usage_error():
    result, api = run("deploy", "x", "--replicas", "two", "--", "serve")
    assert result.exit_code == 2 and "MIN:MAX" in result.output and api.calls == []


def test_a_max_below_min_is_an_invalid_deployment_spec_refused_before_any_call():
    result, api = run("deploy", "x", "--replicas", "3:1", "--", "serve")
    assert result.exit_code == 1 and api.calls == []
    assert "error: invalid deployment spec: max_replicas (1) is below min_replicas (3)" in result.output


def test_a_bad_name_is_refused_before_any_call():
    result, api = run("deploy", "Not OK", "--", "serve")
    assert result.exit_code == 1 and "deployment name" in result.output and api.calls == []


def test_key_scale_undeploy_and_list_call_the_api():
    assert run("deployment", "key", "chat")[0].output == "crl-new\n"
    assert run("deployment", "scale", "chat", "2")[1].calls == [("POST", "/api/v1/deployments/chat/scale",
                                                                  {"replicas": 2})]
    assert run("undeploy", "chat")[1].calls == [("DELETE", "/api/v1/deployments/chat", None)]
    result, _ = run("deployments")
    assert "PROJECT" in result.output and "default" in result.output and "x" in result.output


def test_replica_summary_reads_in_lifecycle_order_without_ended_ones():
    from corral.cli.deploy import replica_summary

    assert replica_summary({"TERMINATED": 4, "HEALTHY": 2, "PROVISIONING": 1}) == "1 provisioning, 2 healthy"
    assert replica_summary({}) == "-"


def test_autoscaling_options_become_the_spec():
    result, api = run("deploy", "chat", "--replicas", "1:4", "--target-concurrency", "1.5",
                      "--scale-down-delay", "2m", "--startup-timeout", "30s", "--", "python", "serve.py")
    assert result.exit_code == 0, result.output
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert (spec.target_concurrency, spec.scale_down_delay, spec.health.startup_timeout) == (1.5, 120.0, 30.0)


def test_a_zero_target_concurrency_is_refused_before_any_call():
    result, api = run("deploy", "chat", "--target-concurrency", "0", "--", "python", "serve.py")
    assert result.exit_code != 0 and api.calls == []


def test_deployment_info_shows_the_autoscaling_target_and_decision():
    result, _ = run("deployment", "info", "x")
    assert result.exit_code == 0, result.output
    assert "autoscale  target 2 per replica, scale down after 60s   desired -" in result.output


def test_the_project_option_becomes_the_spec_and_a_bad_one_is_refused_before_any_call():
    result, api = run("deploy", "chat", "--project", "team-a", "--", "python", "serve.py")
    assert result.exit_code == 0, result.output
    assert DeploymentSpec.model_validate(api.calls[0][2]).project == "team-a"
    assert DeploymentSpec.model_validate(api.calls[0][2]).replica_job().project == "team-a"
    result, api = run("deploy", "chat", "--project", "no spaces", "--", "python", "serve.py")
    assert result.exit_code != 0 and "project" in result.output and api.calls == []


def test_deploy_exports_the_named_variables_to_its_replicas():
    result, api = run("deploy", "chat", "--export", "HF_HOME", "--", "serve", env={"HF_HOME": "/data/hf"})
    assert result.exit_code == 0, result.output
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert spec.export == {"HF_HOME": "/data/hf"} and spec.replica_job().export == {"HF_HOME": "/data/hf"}
    result, api = run("deploy", "chat", "--export", "HF_HOME=/x", "--", "serve")
    assert result.exit_code == 1 and "give names only" in result.output and api.calls == []


def test_deploy_takes_pip_and_python_and_its_replicas_ask_for_them(tmp_path):
    result, api = run("deploy", "chat", "--pip", "vllm==0.6.*", "--pip", "-r requirements.txt", "--python", "3.11",
                      "--", "python", "serve.py")
    assert result.exit_code == 0, result.output
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert (spec.pip, spec.python) == (["vllm==0.6.*", "-r requirements.txt"], "3.11")
    replica = spec.replica_job()
    assert (replica.pip, replica.python) == (["vllm==0.6.*", "-r requirements.txt"], "3.11")
    path = tmp_path / "d.yaml"
    path.write_text("name: emb\ncommand: [python, e.py]\npip: [sentence-transformers]\npython: 3.12\n")
    result, api = run("deploy", "-f", str(path))
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert (spec.pip, spec.python) == (["sentence-transformers"], "3.12")
    result, api = run("deploy", "bad", "--pip", "../outside.whl", "--", "serve")
    assert result.exit_code != 0 and "../outside.whl" in result.output and not api.calls


def test_a_deployment_may_ask_for_a_share_of_one_gpu():
    result, api = run("deploy", "small", "--gpus", "0.5", "--gpu-memory", "20G", "--", "python", "serve.py")
    assert result.exit_code == 0, result.output
    spec = DeploymentSpec.model_validate(api.calls[0][2])
    assert (spec.resources.gpu, spec.resources.gpu_memory) == (0.5, 20 * 10**9)
    assert spec.replica_job().resources.gpu == 0.5


@pytest.mark.parametrize(("value", "says"), [("0.333", "in hundredths"), ("1.5", "from 0.01 to 0.99"),
                                             ("half", "not a number of GPUs")])
def test_deploy_refuses_gpus_neither_whole_nor_a_share(value, says):
    result, api = run("deploy", "small", "--gpus", value, "--", "python", "serve.py")
    assert result.exit_code == 2 and says in result.output and not api.calls


def test_deploy_refuses_negative_gpus_naming_the_field():
    result, api = run("deploy", "small", "--gpus", "-1", "--", "python", "serve.py")
    assert result.exit_code == 1 and "resources.gpu" in result.output and not api.calls
