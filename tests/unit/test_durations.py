"""Expected durations: a time limit where set, else the median of the most alike finished runs."""

from __future__ import annotations

from corral.scheduling.durations import (
    ENOUGH,
    GUESS,
    OVERDUE,
    Duration,
    DurationModel,
    Run,
    command_name,
    expected_end,
)

SHAPE = (1.0, 0, 1.0)


def runs(command: str, seconds: list[float], project: str = "vision", shape=SHAPE) -> list[Run]:
    return [Run(project, command, shape, s) for s in seconds]


def test_a_time_limit_wins():
    model = DurationModel(runs("train", [10, 20, 30]))
    assert model.expected("vision", "train", SHAPE, time_limit=7200) == Duration(7200, "its time limit")


def test_the_median_of_similar_jobs_says_how_many():
    model = DurationModel(runs("train", [100, 300, 200, 900]))
    assert model.expected("vision", "train", SHAPE) == Duration(250, "the median of 4 similar jobs")


def test_other_resources_fall_back_to_the_command_then_the_project():
    model = DurationModel(runs("train", [100, 200, 300]) + runs("eval", [50, 50, 50]))
    assert model.expected("vision", "train", (8.0, 0, 8.0)) == Duration(200, "the median of 3 jobs named train")
    assert model.expected("vision", "bench", SHAPE).basis == "the median of 6 jobs of project vision"


def test_too_few_runs_do_not_count_and_no_history_is_a_guess():
    model = DurationModel(runs("train", [100] * (ENOUGH - 1), project="nlp"))
    assert model.expected("nlp", "train", SHAPE).seconds == GUESS
    assert model.expected("nlp", "train", SHAPE).basis.startswith("a guess")


def test_the_latest_runs_count():
    model = DurationModel(runs("train", [10_000] * 50 + [100] * 50))
    assert model.expected("vision", "train", SHAPE).seconds == 100


def test_an_overdue_task_is_expected_to_run_a_while_longer_unless_its_limit_ends_it():
    assert expected_end(Duration(100, "x"), since=0, now=50) == 100
    assert expected_end(Duration(100, "x"), since=0, now=400) == 400 * OVERDUE
    assert expected_end(Duration(100, "its time limit"), since=0, now=400, time_limit=100) == 400


def test_a_command_is_named_by_its_given_name_else_its_program_and_script():
    assert command_name("train-big", ["python", "train.py"]) == "train-big"
    assert command_name("python", ["/usr/bin/python", "-u", "src/train.py", "--lr", "3"]) == "python train.py"
    assert command_name("python", ["python", "-m"]) == "python"
    assert command_name("sleep", ["sleep", "60"]) == "sleep 60"
