"""Durations: each task its own quantile of the most alike finished runs (those longer than its age), the tasks
still running counted as lasting at least their age (Kaplan-Meier), within its time limit; a guess with neither."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.scheduling.durations import (
    ENOUGH,
    GUESS,
    KEPT_RUNS,
    OVERDUE,
    Duration,
    DurationModel,
    Run,
    Still,
    command_name,
    share_of,
)

SHAPE = (1.0, 0, 1.0)


def runs(command: str, seconds: list[float], project: str = "vision", shape=SHAPE) -> list[Run]:
    return [Run(project, command, shape, s) for s in seconds]


def test_each_share_takes_its_quantile_of_the_similar_runs():
    model = DurationModel(runs("train", [400, 100, 300, 200]))
    assert [model.duration("vision", "train", SHAPE, share).seconds for share in (0.01, 0.3, 0.6, 0.99)] == \
        [100, 200, 300, 400]
    assert model.duration("vision", "train", SHAPE, 0.5).basis == "the runs of 4 similar jobs"


def test_a_running_task_takes_its_quantile_among_the_runs_longer_than_its_age():
    model = DurationModel(runs("train", [100 * n for n in range(1, 11)]))
    assert model.duration("vision", "train", SHAPE, 0.01, age=650).seconds == 700
    assert model.duration("vision", "train", SHAPE, 0.99, age=650).seconds == 1000
    outlived = model.duration("vision", "train", SHAPE, 0.5, age=950)
    assert outlived == Duration(GUESS, "a guess: it outlived the runs of every similar job")
    assert model.duration("vision", "train", SHAPE, 0.5, age=2 * GUESS).seconds == 2 * GUESS * OVERDUE


def test_one_that_outlived_its_own_kind_is_judged_by_a_wider_kind():
    model = DurationModel(runs("train", [100, 200, 300]) + runs("sweep", [5000, 6000, 7000]))
    older = model.duration("vision", "train", SHAPE, 0.01, age=350)
    assert older == Duration(5000, "the runs of 6 jobs of project vision")


def test_a_time_limit_caps_what_was_learned_and_stands_in_for_nothing_learned():
    model = DurationModel(runs("train", [100, 200, 300]))
    assert model.duration("vision", "train", SHAPE, 0.99, time_limit=250) == Duration(250, "its time limit")
    assert model.duration("vision", "train", SHAPE, 0.01, time_limit=250).seconds == 100
    assert model.duration("vision", "eval", SHAPE, 0.5, time_limit=7200).seconds == 200  # the project's runs
    assert DurationModel().duration("nlp", "x", SHAPE, 0.5, time_limit=7200) == Duration(7200, "its time limit")


def test_other_resources_fall_back_to_the_command_then_the_project():
    model = DurationModel(runs("train", [100, 200, 300]) + runs("eval", [50, 50, 50]))
    assert model.duration("vision", "train", (8.0, 0, 8.0), 0.5).basis == "the runs of 3 jobs named train"
    assert model.duration("vision", "bench", SHAPE, 0.5).basis == "the runs of 6 jobs of project vision"


def test_too_few_runs_do_not_count_and_no_history_is_a_guess():
    model = DurationModel(runs("train", [100] * (ENOUGH - 1), project="nlp"))
    guess = model.duration("nlp", "train", SHAPE, 0.5)
    assert guess.seconds == GUESS and guess.basis.startswith("a guess")
    assert model.duration("nlp", "train", SHAPE, 0.5, age=2 * GUESS).seconds == 2 * GUESS * OVERDUE


def test_the_latest_runs_count():
    model = DurationModel(runs("train", [10_000] * KEPT_RUNS + [100] * KEPT_RUNS))
    assert model.duration("vision", "train", SHAPE, 0.99).seconds == 100


def still(command: str, ages: list[float], project: str = "vision", shape=SHAPE) -> list[Still]:
    return [Still(project, command, shape, age) for age in ages]


def test_tasks_still_running_count_as_lasting_at_least_their_age():
    ended = runs("train", [100, 200, 300, 400])
    assert DurationModel(ended).duration("vision", "train", SHAPE, 0.5).seconds == 300
    # Four more started together and still going at 350: half of the eight last past 300, so the median is 400.
    model = DurationModel(ended, still("train", [350] * 4))
    assert model.duration("vision", "train", SHAPE, 0.5).seconds == 400
    assert model.duration("vision", "train", SHAPE, 0.1).seconds == 100  # the first ends are as they were
    assert model.duration("vision", "train", SHAPE, 0.5).basis == "the runs of 4 similar jobs"
    # Tasks of other kinds change nothing here.
    assert DurationModel(ended, still("eval", [350] * 4)).duration("vision", "train", SHAPE, 0.5).seconds == 300


def test_a_share_past_every_end_seen_is_taken_past_the_longest():
    ended = runs("train", [4000, 5000, 6000, 7000]) + runs("eval", [10] * 10)
    model = DurationModel(ended, still("train", [8000] * 4))
    longest = model.duration("vision", "train", SHAPE, 0.9)
    assert longest == Duration(7000, "a guess: longer than the runs of 4 similar jobs, whose longest are still running")
    assert model.duration("vision", "train", SHAPE, 0.9, age=6500).seconds == 6500 * OVERDUE
    assert model.duration("vision", "train", SHAPE, 0.9, time_limit=6000) == Duration(6000, "its time limit")


def test_the_engine_s_model_takes_the_running_tasks_of_each_pass():
    ended = DurationModel(runs("train", [100, 200, 300, 400]))
    now = ended.running(still("train", [350] * 4))
    assert now.duration("vision", "train", SHAPE, 0.5).seconds == 400
    assert ended.duration("vision", "train", SHAPE, 0.5).seconds == 300  # the model it came from is unchanged


durations = st.lists(st.floats(1, 1e5), min_size=1, max_size=60)


@given(durations, durations, st.floats(0.001, 0.999), st.floats(0, 1e5))
def test_tasks_still_running_never_shorten_what_is_expected(ended, ages, share, age):
    without = DurationModel(runs("train", ended)).duration("vision", "train", SHAPE, share, age)
    with_running = DurationModel(runs("train", ended), still("train", ages)).duration("vision", "train", SHAPE, share,
                                                                                        age)
    assert with_running.seconds >= without.seconds


@given(durations, st.floats(0.001, 0.999), st.floats(0, 1e5))
def test_with_none_running_a_share_is_its_place_among_the_runs_longer_than_the_age(ended, share, age):
    longer = sorted(s for s in ended if s > age)
    learned = DurationModel(runs("train", ended)).duration("vision", "train", SHAPE, share, age)
    if len(longer) >= ENOUGH:
        assert learned.seconds == longer[min(int(share * len(longer)), len(longer) - 1)]
    else:
        assert learned.basis.startswith("a guess")


@given(st.lists(st.integers(1, 10**9), min_size=200, max_size=400, unique=True))
def test_shares_spread_evenly_over_many_tasks(task_ids):
    shares = sorted(share_of(task_id) for task_id in task_ids)
    assert all(0 < share < 1 for share in shares)
    assert sum(share < 0.5 for share in shares) / len(shares) > 0.3  # no half of [0, 1) left empty


def test_consecutive_tasks_land_far_apart():
    assert abs(share_of(1) - share_of(2)) > 0.1 and share_of(7) == share_of(7)


def test_a_command_is_named_by_its_given_name_else_its_program_and_script():
    assert command_name("train-big", ["python", "train.py"]) == "train-big"
    assert command_name("python", ["/usr/bin/python", "-u", "src/train.py", "--lr", "3"]) == "python train.py"
    assert command_name("python", ["python", "-m"]) == "python"
    assert command_name("sleep", ["sleep", "60"]) == "sleep 60"
