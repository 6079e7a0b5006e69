"""The implicit constraint of a job that starts in its submission directory without uploaded files."""

from __future__ import annotations

from corral.core.constraints import PythonConstraint, SharedDirectory, parse_constraint
from corral.scheduling.analysis import judge_workers
from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.reasons import NoWorkerMatches, NoWorkerShares
from corral.scheduling.snapshot import JobPlacement

HERE, ELSEWHERE = "a" * 32, "b" * 32
PROJECT = SharedDirectory("/home/a/proj", HERE)


def room(id_: str, filesystem: str | None = ELSEWHERE, shared_fs: tuple[str, ...] = (), **labels: str) -> WorkerRoom:
    return WorkerRoom(id_, id_, 8, 2**34, 0, 8, 2**34, [], labels=labels, filesystem=filesystem, shared_fs=shared_fs)


def unit(job: int = 1, workdir: SharedDirectory | None = PROJECT, constraints: str = "") -> Unit:
    labels = tuple(parse_constraint(c) for c in constraints.split() if c)
    return Unit((job, 0), (job,), Request(1, 0, 0), constraints=labels + ((workdir,) if workdir else ()))


def placed_on(placement, job: int = 1) -> list[str]:
    return [a.worker_id for a in placement.assignments.get((job, 0), [])]


def test_from_spec_the_constraint_holds_only_without_a_bundle():
    workdir = {"path": "/home/a/proj", "filesystem": HERE}
    assert JobPlacement.from_spec({"workdir": workdir}, priority=0, gang=False).constraints == (PROJECT,)
    assert JobPlacement.from_spec({"workdir": workdir, "bundle": "f" * 64}, priority=0, gang=False).constraints == ()
    assert JobPlacement.from_spec({"constraints": ["gpu=h100"], "python": "3.11", "workdir": workdir}, priority=0,
                                  gang=False).constraints == (parse_constraint("gpu=h100"), PythonConstraint("3.11"),
                                                              PROJECT)


def test_a_job_goes_only_to_a_worker_that_shares_its_directory():
    rooms = [room("elsewhere"), room("same", filesystem=HERE)]
    assert placed_on(place([unit()], rooms)) == ["same"]
    assert placed_on(place([unit(workdir=None)], rooms)) == ["elsewhere"]


def test_a_shared_fs_directory_above_it_counts():
    assert placed_on(place([unit()], [room("other"), room("nfs", shared_fs=("/home",))])) == ["nfs"]


def test_no_sharing_worker_says_so_naming_the_directory_and_the_pool():
    placement = place([unit()], [room("w1"), room("w2", shared_fs=("/srv",))])
    reason = placement.waiting[(1, 0)]
    assert reason == NoWorkerShares("default", "/home/a/proj")
    assert reason.sentence() == ("no worker in pool default shares the file system of /home/a/proj "
                                 "(its files were not uploaded)")


def test_labels_that_match_no_worker_are_named_first():
    placement = place([unit(constraints="gpu=h100")], [room("w1", filesystem=HERE)])
    assert isinstance(placement.waiting[(1, 0)], NoWorkerMatches)


def test_jobs_from_different_directories_are_judged_apart():
    other = SharedDirectory("/data/b", ELSEWHERE)
    placement = place([unit(1), unit(2, workdir=other)], [room("w", filesystem=ELSEWHERE)])
    assert (1, 0) in placement.waiting and placed_on(placement, 2) == ["w"]


def test_the_analysis_says_per_worker_whether_it_shares():
    job = JobPlacement(constraints=(PROJECT,))
    verdicts = {v.name: (v.fits, v.why) for v in judge_workers(job, Request(1, 0, 0), [
        room("same", filesystem=HERE), room("other")])}
    assert verdicts == {"same": (True, "fits now"), "other": (
        False, "does not share the file system of /home/a/proj (the job's files were not uploaded)")}
