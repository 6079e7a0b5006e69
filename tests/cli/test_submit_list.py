"""`corral submit -f FILE` with a list of job specs: one batch call, the options over each; --max-running."""

from __future__ import annotations

import json

import pytest

from corral.core.spec_text import MAX_BATCH


def test_a_list_file_is_one_batch_call_with_the_options_over_each(cli, fake, tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("- {command: [prep], name: a}\n- {command: 'train --fast', replicas: 3}\n")
    result = cli("submit", "-f", str(path), "--project", "vision", "--idempotency-key", "K")
    assert result.exit_code == 0, result.output
    assert result.output == "42\n43\n" and fake.batches == 1
    assert [(s.name, s.command, s.replicas, s.project, key) for s, key in fake.submitted] == [
        ("a", ["prep"], 1, "vision", "K/0"), ("train", ["train", "--fast"], 3, "vision", "K/1")]


def test_a_json_list_file_prints_the_views(cli, fake, tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{"command": ["a"]}, {"command": ["b"]}]))
    result = cli("submit", "--json", "-f", str(path))
    assert [job["id"] for job in json.loads(result.output)] == [42, 43]


def test_a_one_job_file_is_still_a_single_submission(cli, fake, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [a]\n")
    assert cli("submit", "-f", str(path)).output == "42\n" and fake.batches == 0


@pytest.mark.parametrize(("content", "says"), [
    ("[]", "holds an empty list"),
    (json.dumps([{"command": ["a"]}] * (MAX_BATCH + 1)), f"at most {MAX_BATCH} are submitted at once"),
    ("- {command: [a]}\n- just-a-string\n", "job 1 must be a mapping of job spec fields, not a str"),
    ("- {command: [a]}\n- {command: [b], replicas: 0}\n", "job 1 of the file: replicas"),
    ("- {command: [a]}\n- {command: [b], gang: true, replicas: 2, max_running: 1}\n", "job 1 of the file:"),
    ("- {command: [a]}\n- {name: no-command}\n", "no command"),
    ("7", "must hold a mapping of job spec fields, not a int"),
])
def test_a_bad_list_is_one_error_line_and_nothing_is_submitted(cli, fake, tmp_path, content, says):
    path = tmp_path / "jobs.yaml"
    path.write_text(content)
    result = cli("submit", "-f", str(path))
    assert result.exit_code in (1, 2) and says in result.output, result.output
    assert "Traceback" not in result.output and not fake.submitted


def test_max_running_is_a_flag(cli, fake):
    assert cli("submit", "--replicas", "8", "--max-running", "2", "--", "true").exit_code == 0
    assert fake.submitted[0][0].max_running == 2
    for bad in ("0", "-1", "many"):
        result = cli("submit", "--max-running", bad, "--", "true")
        assert result.exit_code == 2 and "--max-running" in result.output
    gang = cli("submit", "--gang", "--replicas", "2", "--max-running", "1", "--", "true")
    assert gang.exit_code == 1 and "a gang's tasks all run at once" in gang.output
    assert len(fake.submitted) == 1
