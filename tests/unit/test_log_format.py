import json
import logging

from corral.log_format import JsonFormatter


def _line(message, *args, **extra) -> dict:
    record = logging.LogRecord("corral.test", logging.WARNING, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return json.loads(JsonFormatter().format(record))


def test_a_json_line_carries_the_ids_named_in_its_extras():
    line = _line("worker %s lost", "w1-abc", worker_id="w1-abc", job_id=7)
    assert line["message"] == "worker w1-abc lost"
    assert (line["level"], line["logger"], line["worker_id"], line["job_id"]) == ("warning", "corral.test", "w1-abc", 7)
    assert line["time"].endswith("Z")


def test_ids_written_as_key_value_words_in_the_message_are_lifted_out():
    line = _line("task=%s attempt=%s running pid=%s", 12, 0, 999)
    assert (line["task_id"], line["attempt"]) == (12, 0)
    assert "job_id" not in line and "pid" not in line


def test_an_extra_wins_over_a_word_in_the_message():
    assert _line("task=3 order build", task_id=4)["task_id"] == 4
