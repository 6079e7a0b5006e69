"""A job's pip items and python version: what each item is, what is refused, and the scheduling rule it makes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.constraints import PythonConstraint
from corral.core.failure import ENVIRONMENT_BUILD_FAILED, JobEnd, TaskEnd, classify_failure
from corral.core.outcomes import Budget, after_attempt
from corral.core.pip import MAX_PIP_ITEM, MAX_PIP_ITEMS, ItemKind, check_python, classify, python_matches
from corral.core.retry_policy import NEVER_RETRIED, FailureCause, RetryPolicy
from corral.core.spec import JobSpec
from corral.core.states import JobState, TaskState
from corral.scheduling.analysis import judge_workers
from corral.scheduling.placement import Unit, place
from corral.scheduling.reasons import NoWorkerHasPython, NoWorkerMatches
from corral.scheduling.rooms import Request, WorkerRoom
from corral.scheduling.snapshot import JobPlacement


@pytest.mark.parametrize(("item", "kind", "text"), [
    ("numpy==2.1.*", ItemKind.REQUIREMENT, "numpy==2.1.*"),
    ("torch>=2; python_version >= '3.10'", ItemKind.REQUIREMENT, "torch>=2; python_version >= '3.10'"),
    ("thepkg @ https://example.invalid/thepkg-1.0-py3-none-any.whl", ItemKind.REQUIREMENT,
     "thepkg @ https://example.invalid/thepkg-1.0-py3-none-any.whl"),
    ("-r requirements.txt", ItemKind.REQUIREMENTS_FILE, "requirements.txt"),
    ("--requirement=deps/base.in", ItemKind.REQUIREMENTS_FILE, "deps/base.in"),
    ("requirements-dev.txt", ItemKind.REQUIREMENTS_FILE, "requirements-dev.txt"),
    ("./wheels/thepkg-1.0-py3-none-any.whl", ItemKind.PATH, "./wheels/thepkg-1.0-py3-none-any.whl"),
    ("./mypkg", ItemKind.PATH, "./mypkg"),
    ("libs/mypkg", ItemKind.PATH, "libs/mypkg"),
    (".", ItemKind.PATH, "."),
    ("thepkg-1.0-py3-none-any.whl", ItemKind.PATH, "thepkg-1.0-py3-none-any.whl"),
    ("mypkg-2.0.tar.gz", ItemKind.PATH, "mypkg-2.0.tar.gz"),
    ("  requests  ", ItemKind.REQUIREMENT, "requests"),
])
def test_an_item_is_a_requirement_a_requirements_file_or_a_path(item, kind, text):
    classified = classify(item)
    assert (classified.kind, classified.text) == (kind, text)


@pytest.mark.parametrize(("item", "says"), [
    ("/opt/wheels/x.whl", "must be relative"),
    ("-r /etc/requirements.txt", "must be relative"),
    ("~/wheels/x.whl", "must be relative"),
    ("../outside/x.whl", "leaves the working directory"),
    ("./a/../../x.whl", "leaves the working directory"),
    ("-r ../reqs.txt", "leaves the working directory"),
    ("..", "leaves the working directory"),
    ("--index-url https://example.invalid/simple", "options other than -r"),
    ("-e ./mypkg", "options other than -r"),
    ("thepkg @ file:///etc/thepkg", "file URL"),
    ("numpy>=>2", "not a requirement"),
    ("not a requirement!", "not a requirement"),
    ("", "empty"),
    ("numpy\n--index-url=x", "line break"),
])
def test_an_item_outside_the_working_directory_or_with_options_is_refused_naming_it(item, says):
    with pytest.raises(ValueError, match=says):
        classify(item)
    with pytest.raises(ValidationError, match=says):
        JobSpec(command=["true"], pip=[item])


def test_pip_items_are_capped_in_number_and_length():
    with pytest.raises(ValidationError, match=f"at most {MAX_PIP_ITEMS}"):
        JobSpec(command=["true"], pip=[f"pkg{i}" for i in range(MAX_PIP_ITEMS + 1)])
    with pytest.raises(ValidationError, match=f"at most {MAX_PIP_ITEM}"):
        JobSpec(command=["true"], pip=["x" * (MAX_PIP_ITEM + 1)])


def test_a_spec_read_back_from_the_store_is_not_judged_again():
    stored = {"command": ["true"], "pip": ["../from-before-the-rule.whl"], "python": "2.7"}
    assert JobSpec.model_validate(stored, context={"stored": True}).python == "2.7"


@pytest.mark.parametrize("version", ["3.8", "3.11", "3.11.9", "3.13", "3.19.0"])
def test_a_python_some_worker_could_have_is_taken(version):
    assert check_python(version) == version
    assert JobSpec(command=["true"], python=version).python == version


@pytest.mark.parametrize(("version", "says"), [
    ("2.7", "no worker can run"), ("4.0", "no worker can run"), ("3.7", "no worker can run"),
    ("3.20", "no worker can run"), ("3", "not a version"), ("python3.11", "not a version"), ("3.11.x", "not a version"),
])
def test_a_python_no_worker_could_ever_run_is_refused_naming_it(version, says):
    with pytest.raises(ValueError, match=says):
        check_python(version)
    with pytest.raises(ValidationError, match=version.replace(".", r"\.")):
        JobSpec(command=["true"], python=version)


def test_a_minor_version_matches_its_patch_releases_only():
    assert python_matches("3.11", "3.11.7")
    assert python_matches("3.11.7", "3.11.7")
    assert not python_matches("3.11.2", "3.11.7")
    assert not python_matches("3.1", "3.11.7")
    assert not python_matches("3.12", "3.11.7")


def _room(id_: str, pythons: tuple[str, ...], labels: dict[str, str] | None = None) -> WorkerRoom:
    return WorkerRoom(id_, id_, 4, 2**30, 0, 4, 2**30, [], labels=labels or {}, pythons=pythons)


def _unit(job_id: int, **spec) -> Unit:
    job = JobPlacement.from_spec({"command": ["true"], **spec}, priority=0, gang=False)
    return Unit((job_id, job_id), (job_id,), Request(1, 0, 0), pool=job.pool, constraints=job.constraints)


def test_a_job_with_python_goes_only_to_a_worker_that_has_it():
    rooms = [_room("old", ("3.11.7",)), _room("new", ("3.11.7", "3.13.0"))]
    placement = place([_unit(1, python="3.13"), _unit(2, python="3.11"), _unit(3)], rooms)
    assert [a.worker_id for a in placement.assignments[(1, 1)]] == ["new"]
    assert (2, 2) in placement.assignments and (3, 3) in placement.assignments


def test_a_job_whose_python_no_worker_has_waits_naming_it():
    placement = place([_unit(1, python="3.13")], [_room("w1", ("3.11.7",))])
    reason = placement.waiting[(1, 1)]
    assert reason == NoWorkerHasPython("default", "3.13")
    assert reason.sentence().startswith("no worker in pool default has python 3.13")


def test_python_and_labels_that_no_one_worker_has_both_of_wait_on_both():
    rooms = [_room("a", ("3.13.0",)), _room("b", ("3.11.7",), {"gpu": "h100"})]
    reason = place([_unit(1, python="3.13", constraints=["gpu=h100"])], rooms).waiting[(1, 1)]
    assert isinstance(reason, NoWorkerMatches)
    assert reason.sentence() == "no worker matches constraints gpu=h100, python 3.13"


def test_the_placement_analysis_says_which_pythons_a_worker_has():
    job = JobPlacement.from_spec({"command": ["true"], "python": "3.13"}, priority=0, gang=False)
    assert job.constraints == (PythonConstraint("3.13"),)
    [verdict] = judge_workers(job, Request(1, 0, 0), [_room("w1", ("3.11.7", "3.11.2"))])
    assert not verdict.fits and verdict.why == "has no python 3.13 (has 3.11.7, 3.11.2)"


def test_an_environment_that_failed_to_build_is_a_cause_no_policy_retries():
    reason = f"{ENVIRONMENT_BUILD_FAILED}: error: No solution found when resolving dependencies"
    end = JobEnd(JobState.FAILED, cancelled=False,
                 tasks=(TaskEnd(TaskState.FAILED, TaskState.BUILDING, None, False, reason),))
    assert classify_failure(end) is FailureCause.ENVIRONMENT_BUILD_FAILED
    assert FailureCause.ENVIRONMENT_BUILD_FAILED in NEVER_RETRIED
    with pytest.raises(ValidationError, match="environment_build_failed is never retried"):
        RetryPolicy(eligible_causes=["environment_build_failed"])
    other = JobEnd(JobState.FAILED, cancelled=False,
                   tasks=(TaskEnd(TaskState.FAILED, TaskState.BUILDING, None, False, "build failed: bundle"),))
    assert classify_failure(other) is FailureCause.BUILD_FAILURE


def test_an_environment_that_failed_to_build_uses_up_the_failure_budget_at_once():
    budget = Budget(max_retries_failure=3, max_retries_preemption=0, failures=0, preemptions=0)
    assert after_attempt(TaskState.FAILED, budget).retry
    final = after_attempt(TaskState.FAILED, budget, final=True)
    assert not final.retry and final.failures == 4
