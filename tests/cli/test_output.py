"""What the listing and info commands print, from views a fake client returns."""

import io
import json
import random
import re
import time

from corral.cli import common
from corral.cli.listing import JOB_COLUMNS, job_row
from corral.core.attempt_world import AttemptWorld
from corral.core.spec import JobSpec, Workdir
from corral.core.views import (
    AttemptView,
    DeviceTask,
    DeviceView,
    EstimateAccuracy,
    EstimateStats,
    HistoryEntry,
    PlacementAnalysis,
    StartEstimate,
    TaskView,
    WorkerFit,
    WorkerView,
)
from corral.core.what_if import RemedyView, WhatIfView
from tests.cli.conftest import job_view


def test_jobs_table_shows_task_counts_age_and_the_pending_reason(cli, fake):
    fake.jobs = [job_view(2, state="RUNNING", task_counts={"RUNNING": 3, "PENDING": 1}),
                 job_view(1, pending_reason="needs 8 GPUs; largest free: 4 on w3")]
    result = cli("jobs")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["ID", "NAME", "OWNER", "STATE", "START", "TASKS", "AGE"]
    assert "3 RUNNING, 1 PENDING" in lines[1] and lines[1].rstrip().endswith("10s")
    assert "needs 8 GPUs; largest free: 4 on w3" in result.output


def test_jobs_table_says_when_a_pending_job_starts(cli, fake):
    fake.jobs = [job_view(3, estimate=StartEstimate(text="~12m after job 41", start_at=time.time() + 720,
                                                    after_job=41, basis="job 41's end: its time limit")),
                 job_view(2, estimate=StartEstimate(text="unknown: no worker can ever fit it: ...", start_at=None,
                                                    never=True)),
                 job_view(1, state="RUNNING", estimate=StartEstimate(text="stale", start_at=None))]
    out = cli("jobs", "--json").stdout
    assert [j["estimate"] and j["estimate"]["text"] for j in json.loads(out)][:2] == [
        "~12m after job 41", "unknown: no worker can ever fit it: ..."]
    table = cli("jobs").output
    assert "~12m after job 41" in table and "unknown: no worker can ever fit it" in table and "stale" not in table
    info = cli("info", "3").output
    assert "~12m after job 41" in info and "job 41's end: its time limit" in info


def test_a_piped_jobs_table_is_the_one_rich_draws(cli, fake, monkeypatch):
    """Piped, `corral jobs` lays its table out without rich: the text is rich's to the character (multi-line
    states, marks, empty cells), and a name rich would measure otherwise (wide characters) is drawn by rich."""
    fake.jobs = [job_view(5, spec=JobSpec(command=["sh"], interactive=True), state="RUNNING",
                          task_counts={"RUNNING": 1}),
                 job_view(4, state="FAILED", retry_count=1, max_retries=3, task_counts={"FAILED": 2}),
                 job_view(3, state="FAILED", retry_chain=[3, 4]),
                 job_view(2, pending_reason="needs 8 GPUs; largest free: 4 on w3  ",
                          estimate=StartEstimate(text="~12m after job 41", start_at=time.time() + 720)),
                 job_view(1, spec=JobSpec(command=["x"], name="  spaced [b]name[/b] :smile: "))]
    piped = cli("jobs").stdout
    assert common.plain_table(JOB_COLUMNS, [job_row(job.model_dump(mode="json"), 0) for job in fake.jobs])
    monkeypatch.setattr(common, "plain_table", lambda columns, rows: None)
    assert cli("jobs").stdout == piped
    assert " interactive" in piped and " retry 1/3" in piped and " retried" in piped
    monkeypatch.undo()
    fake.jobs = [job_view(6, spec=JobSpec(command=["x"], name="entraînement 训练"))]
    assert common.plain_table(JOB_COLUMNS, [job_row(fake.jobs[0].model_dump(mode="json"), time.time())]) is None
    assert "entraînement 训练" in cli("jobs").stdout


def test_a_jobs_table_on_a_terminal_keeps_its_colours(cli, fake, monkeypatch):
    """Styled by rich as before: the state's colour spans its cell, a pending job's reason is dim in it."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    fake.jobs = [job_view(2, pending_reason="no room on any worker"),
                 job_view(1, spec=JobSpec(command=["sh"], interactive=True))]
    out = cli("jobs").stdout
    assert "\x1b[2;35mno room on any worker" in out and "\x1b[35mPENDING  " in out
    assert "\x1b[36m interactive\x1b[0m" in out


def test_a_plain_table_is_laid_out_as_rich_lays_it_out():
    """Random cells of spaces, words and line breaks, styled pieces or plain strings: the same text as rich's."""
    from rich.console import Console
    from rich.table import Table

    pick = random.Random(31)
    for _ in range(300):
        columns = [pick.choice(["ID", "STATE", "A LONG HEADER", "N"]) + str(i) for i in range(pick.randint(1, 4))]
        wrapping = [column for column in columns if pick.random() < 0.5]
        rows = [[pick.choice(["", "a", "xyz", "  "]) if pick.random() < 0.3 else
                 [("".join(pick.choice(["a", " ", "\n", "xyz", "-"]) for _ in range(pick.randint(0, 6))), "dim"),
                  (pick.choice(["", " x", "\nq "]), "red")] for _ in columns] for _ in range(pick.randint(0, 3))]
        table = Table(box=None, pad_edge=False)
        for column in columns:
            table.add_column(column, no_wrap=column not in wrapping)
        for row in rows:
            table.add_row(*(cell if isinstance(cell, str) else common.styled(cell) for cell in row))
        drawn = io.StringIO()
        Console(file=drawn, highlight=False, soft_wrap=False, width=common.PIPED_WIDTH).print(table)
        assert common.plain_table(columns, rows) + "\n" == drawn.getvalue(), (columns, rows)


def test_jobs_json_and_limit(cli, fake):
    fake.jobs = [job_view(3), job_view(2), job_view(1)]
    assert [j["id"] for j in json.loads(cli("jobs", "--json", "--limit", "2").stdout)] == [3, 2]


def test_jobs_says_when_more_match_than_it_shows(cli, fake):
    fake.jobs = [job_view(i) for i in range(506, 0, -1)]
    shown = cli("jobs")
    assert shown.stderr == "showing 50 of 506 jobs; --limit N or --all for more\n"
    assert len(shown.stdout.splitlines()) == 51  # the header and 50 rows
    listed = cli("jobs", "--all", "--json")
    assert (len(json.loads(listed.stdout)), listed.stderr) == (506, "")
    fake.jobs = fake.jobs[:50]
    assert cli("jobs").stderr == ""  # exactly the limit: nothing more to say


def test_an_unknown_state_is_a_usage_error(cli):
    assert cli("jobs", "--state", "NAPPING").exit_code == 2


def test_workers_show_use_over_capacity(cli, fake):
    now = time.time()
    fake.worker_views = [WorkerView(
        id="w-1", name="gpu-box", address="10.0.0.2", state="ALIVE", labels={}, gpu_names=["H100"],
        capacity={"cpu": 8, "memory": 16 * 10**9, "gpu": 1}, used={"cpu": 2, "memory": 10**9, "gpu": 0},
        last_heartbeat=now - 1, registered_at=now - 100, running_tasks=2)]
    out = cli("workers").output
    for text in ("gpu-box", "10.0.0.2", "2.0/8", "1.0G/16G", "0/1", "1s ago"):
        assert text in out


def test_workers_say_whether_tasks_run_as_their_owners_or_as_the_workers_account(cli, fake):
    now = time.time()
    view = dict(address="10.0.0.2", state="ALIVE", labels={}, gpu_names=[], capacity={"cpu": 8, "memory": 10**9},
                used={}, last_heartbeat=now, registered_at=now, running_tasks=0)
    fake.worker_views = [WorkerView(id="w-1", name="rootbox", run_as_owners=True, account="root", **view),
                         WorkerView(id="w-2", name="userbox", account="corral", **view)]
    lines = cli("workers").output.splitlines()
    assert "RUNS AS" in lines[0]
    assert lines[1].split()[-1] == "owners" and lines[2].split()[-1] == "corral"


def shared_box(now: float) -> WorkerView:
    """Two H100s: device 0 holds two shares (0.5, reserving 20G, and 0.25) read at 7.5G used and 40% busy; device
    1 a whole-device task, never read."""
    devices = [
        DeviceView(index=0, model="NVIDIA H100", memory=80 * 10**9, booked=0.75, memory_reserved=20 * 10**9,
                   tasks=[DeviceTask(task_id=3, job_id=7, index=0, share=0.5),
                          DeviceTask(task_id=4, job_id=8, index=0, share=0.25)],
                   memory_used=75 * 10**8, utilization=40),
        DeviceView(index=1, model="NVIDIA H100", memory=80 * 10**9, booked=1.0,
                   tasks=[DeviceTask(task_id=5, job_id=9, index=2, share=1.0)]),
    ]
    return WorkerView(id="w-2", name="shared-box", address="10.0.0.3", state="ALIVE", labels={},
                      gpu_names=["NVIDIA H100"] * 2, capacity={"cpu": 8, "memory": 16 * 10**9, "gpu": 2},
                      used={"cpu": 3, "memory": 0, "gpu": 1.75}, last_heartbeat=now, registered_at=now - 100,
                      running_tasks=3, devices=devices)


def test_workers_show_gpu_shares_in_use_and_each_device_on_demand(cli, fake):
    fake.worker_views = [shared_box(time.time())]
    plain = cli("workers")
    assert plain.exit_code == 0, plain.output
    assert "1.75/2" in plain.output and "devices" not in plain.output
    for flag in ("--devices", "-v"):
        lines = cli("workers", flag).output.splitlines()
        header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["WORKER", "GPU"])
        assert lines[header].split() == ["WORKER", "GPU", "MODEL", "MEMORY", "BOOKED", "RESERVED", "TASKS", "USED",
                                         "BUSY"]
        first, second = lines[header + 1], lines[header + 2]
        assert first.split() == ["shared-box", "0", "NVIDIA", "H100", "80G", "0.75", "20G", "7:0", "(0.5)", "8:0",
                                 "(0.25)", "7.5G", "40%"]
        assert second.split() == ["shared-box", "1", "NVIDIA", "H100", "80G", "1", "-", "9:2", "-", "-"]


def test_workers_devices_says_when_no_worker_has_a_gpu(cli, fake):
    now = time.time()
    fake.worker_views = [WorkerView(
        id="w-1", name="cpu-box", address="10.0.0.2", state="ALIVE", labels={}, gpu_names=[],
        capacity={"cpu": 8, "memory": 16 * 10**9, "gpu": 0}, used={"cpu": 0, "memory": 0, "gpu": 0},
        last_heartbeat=now, registered_at=now, running_tasks=0)]
    assert "no worker has a GPU" in cli("workers", "--devices").output


def test_info_shows_each_tasks_device_and_share(cli, fake):
    now = time.time()
    fake.jobs = [job_view(7, spec=JobSpec(command=["true"], replicas=2, resources={"gpu": 0.5}), state="RUNNING")]
    fake.task_views = [TaskView(id=3 + i, index=i, state="RUNNING", attempt=0, worker_id="w-2", gpu_ids=[i],
                                failures=0, preemptions=0, exit_code=None, reason=None, state_since=now)
                       for i in range(2)]
    fake.history_entries = []
    lines = cli("info", "7").output.splitlines()
    rows = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith("TASK ")) + 1:]]
    assert [row[4:6] for row in rows[:2]] == [["0", "(0.5)"], ["1", "(0.5)"]]


def test_info_shows_a_jobs_cap_on_tasks_running_at_once(cli, fake):
    fake.jobs = [job_view(8, spec=JobSpec(command=["true"], replicas=100, max_running=8))]
    fake.task_views, fake.history_entries = [], []
    assert "100 independent, at most 8 at once" in cli("info", "8").output


def test_info_shows_spec_tasks_attempts_and_history(cli, fake):
    now = time.time()
    fake.jobs = [job_view(9, state="FAILED", finished_at=now)]
    attempt = AttemptView(attempt=0, worker_id="w-1", state="FAILED", exit_code=3, reason="exit code 3",
                          assigned_at=now - 9, started_at=now - 8, finished_at=now - 2)
    fake.task_views = [TaskView(id=1, index=0, state="FAILED", attempt=0, worker_id="w-1", gpu_ids=[], failures=1,
                                preemptions=0, exit_code=3, reason="exit code 3", state_since=now,
                                attempts=[attempt])]
    fake.history_entries = [HistoryEntry(at=now, job_id=9, task_id=1, task_index=0, attempt=0, handler="Reports",
                                         result="SUCCESS", from_state="RUNNING", to_state="FAILED",
                                         message="non-zero exit")]
    result = cli("info", "9")
    assert result.exit_code == 0, result.output
    for text in ("echo hi", "cpu 1", "RUNNING -> FAILED", "non-zero exit", "Reports", "exit code 3", "6s"):
        assert text in result.output
    body = json.loads(cli("info", "9", "--json").output)
    assert set(body) == {"job", "tasks", "history"} and body["tasks"][0]["attempts"][0]["exit_code"] == 3


def test_info_counts_a_wait_seen_again(cli, fake):
    now = time.time()
    fake.jobs = [job_view(9, state="PENDING")]
    fake.task_views = []
    fake.history_entries = [HistoryEntry(at=now - 60, job_id=9, task_id=None, task_index=None, attempt=None,
                                         handler="ScheduleJobs", result="SKIPPED", from_state="PENDING", to_state=None,
                                         message="no worker is alive", repeats=41, last_at=now)]
    result = cli("info", "9")
    assert result.exit_code == 0, result.output
    assert "no worker is alive (seen 41 times" in " ".join(result.output.split())


def test_info_shows_the_epoch_the_drain_trigger_checkpoints_and_refunds(cli, fake):
    now = time.time()
    fake.jobs = [job_view(9, state="RUNNING", preemption_epoch=2, drain_trigger=1)]
    refunded = AttemptView(attempt=0, worker_id="w-1", state="PREEMPTED", exit_code=0, reason="preempted (epoch 2)",
                           assigned_at=now - 9, started_at=now - 8, finished_at=now - 2, refunded=True)
    fake.task_views = [TaskView(id=1, index=0, state="RUNNING", attempt=1, worker_id="w-1", gpu_ids=[], failures=0,
                                preemptions=0, exit_code=None, reason=None, state_since=now, attempts=[refunded],
                                checkpoint_epoch=2, checkpoint_size=2048)]
    fake.history_entries = []
    result = cli("info", "9")
    assert result.exit_code == 0, result.output
    for text in ("epoch 2; last gang drain started by task 1", "PREEMPTED refunded", "2.0K"):
        assert text in result.output


def test_cancel_prints_the_new_state(cli):
    assert cli("cancel", "4").output == "TERMINATING\n"


def test_info_names_the_job_that_launched_it(cli, fake):
    fake.jobs = [job_view(12, launched_by=9, name="driver/step")]
    result = cli("info", "12")
    assert "launched by" in result.output and "job 9" in result.output and "driver/step" in result.output
    fake.jobs = [job_view(13)]
    assert "launched by" not in cli("info", "13").output


def test_info_of_a_pending_job_shows_the_placement_analysis(cli, fake):
    fake.jobs = [job_view(5, spec=JobSpec(command=["train"], pool="a100", constraints=["gpu=h100"]),
                          pending_reason="no worker in pool a100 matches constraint gpu=h100")]
    fake.placement_analysis = PlacementAnalysis(
        job_id=5, state="PENDING", pool="a100", project="vision", priority=100,
        pending_reason="no worker in pool a100 matches constraint gpu=h100", gate=None,
        quota={"gpu": (6.0, 8.0)},
        workers=[WorkerFit(worker_id="w-1", name="box-1", fits=False, why="has gpu=a100; the job needs gpu=h100"),
                 WorkerFit(worker_id="w-2", name="box-2", fits=False, why="in pool default, not a100")])
    out = cli("info", "5").output
    for text in ("pool a100, project default, gpu=h100", "placement (pool a100, project vision, priority 100)",
                 "quota gpu 6/8", "box-1", "has gpu=a100; the job needs gpu=h100", "in pool default, not a100",
                 "no worker in pool a100 matches constraint gpu=h100"):
        assert text in out, text
    body = json.loads(cli("info", "5", "--json").output)
    assert body["placement"]["workers"][1]["why"] == "in pool default, not a100"


def test_info_what_if_lists_one_line_per_remedy(cli, fake):
    now = time.time()
    fake.jobs = [job_view(5, pending_reason="needs 8 gpu per task; at most 4 free on w3")]
    fake.what_if_view = WhatIfView(job_id=5, now=now, forecasts=7, baseline=StartEstimate(
        text="~1h after job 41", start_at=now + 3600, after_job=41, basis="job 41's end: its time limit"), remedies=[
        RemedyView(kind="gpus", change="--gpus 4 instead of 8", spec={"resources": {"gpu": 4}}, text="now",
                   start_at=now, workers=["w3"]),
        RemedyView(kind="priority", change="--priority 6 instead of 0", spec={"priority": 6}, text="now",
                   start_at=now + 1, preempts=[41, 44]),
        RemedyView(kind="pool", change="--pool batch instead of default", spec={"pool": "batch"}, text="~30m",
                   start_at=now + 1800)])
    lines = cli("info", "5", "--what-if").output.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("what would it take")))
    assert lines[at].startswith("what would it take: as it is, it starts ~1h after job 41 (at ")
    assert re.fullmatch(r"  --gpus 4 instead of 8 +starts now on w3", lines[at + 1])
    assert lines[at + 2].endswith("starts now, preempting jobs 41, 44")
    assert re.fullmatch(r"  --pool batch instead of default +starts in ~30m \(at \d\d:\d\d\)", lines[at + 3])
    assert json.loads(cli("info", "5", "--what-if", "--json").output)["what_if"]["remedies"][0]["workers"] == ["w3"]
    fake.what_if_view = WhatIfView(job_id=5, now=now, forecasts=2, remedies=[], baseline=StartEstimate(
        text="unknown: it does not start within the 7 days simulated", start_at=None))
    assert "would start it meaningfully sooner" in cli("info", "5", "--what-if").output


def test_info_what_if_of_a_job_not_pending_is_one_error_line(cli, fake):
    fake.jobs = [job_view(6, state="RUNNING")]
    result = cli("info", "6", "--what-if")
    assert result.exit_code == 1
    assert result.stderr == "error: job 6 is RUNNING, not pending: --what-if is for a job waiting to start\n"


def test_info_shows_the_workdir_and_where_each_attempt_started(cli, fake):
    now = time.time()
    workdir = Workdir(path="/home/a/proj", filesystem="a" * 32)
    fake.jobs = [job_view(7, spec=JobSpec(command=["train"], workdir=workdir, bundle="3fa2c9e1" + "0" * 56))]
    shared = AttemptWorld(start="shared", directory="/home/a/proj")
    copied = AttemptWorld(start="bundle", directory="/w/tasks/7-1/work")
    fake.task_views = [TaskView(id=1, index=0, state="RUNNING", attempt=1, worker_id="w-1", gpu_ids=[], failures=1,
                                preemptions=0, exit_code=None, reason=None, state_since=now, attempts=[
                                    AttemptView(attempt=a, worker_id="w-1", state=s, exit_code=None, reason=None,
                                                assigned_at=now, started_at=now, finished_at=None, world=w)
                                    for a, s, w in ((0, "FAILED", shared), (1, "RUNNING", copied))])]
    out = " ".join(cli("info", "7").output.split())
    assert "workdir /home/a/proj (files uploaded as bundle 3fa2c9e1" in out
    assert "/home/a/proj (shared)" in out and "copy of bundle 3fa2c9e1 in /w/tasks/7-1/work" in out
    fake.jobs = [job_view(7, spec=JobSpec(command=["train"], workdir=workdir))]
    assert "files not uploaded: only workers that share it run it" in " ".join(cli("info", "7").output.split())
    fake.jobs = [job_view(7, spec=JobSpec(command=["train"]))]
    assert "workdir none: an empty directory" in " ".join(cli("info", "7").output.split())


def test_stats_estimates_by_horizon(cli, fake):
    assert cli("stats", "estimates").output == "no job with a start estimate started in the last 30 days\n"
    fake.estimates = EstimateStats(days=7, count=12, horizons=[
        EstimateAccuracy(horizon="1-10 min", count=9, median_error=40, p90_error=150, median_relative=0.12),
        EstimateAccuracy(horizon="1-6 h", count=3, median_error=1800, p90_error=3600, median_relative=0.2)])
    out = cli("stats", "estimates", "--days", "7").output
    assert ("estimate_stats", 7.0) in fake.calls
    assert "1-10 min" in out and "40s" in out and "2m30s" in out and "12%" in out and "30m" in out
    assert json.loads(cli("stats", "estimates", "--json").stdout)["count"] == 12
    assert cli("stats", "estimates", "--days", "0").exit_code == 2
