from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.core.spec import JobSpec
from corral.core.views import JobView, WorkdirSharing


def job_view(job_id: int = 7, spec: JobSpec | None = None, state: str = "PENDING", **changes) -> JobView:
    spec = spec or JobSpec(command=["echo", "hi"])
    now = time.time()
    fields = dict(id=job_id, name=spec.name, state=state, gang=spec.gang, priority=spec.priority,
                  replicas=spec.replicas, spec=spec, pending_reason=None, created_at=now - 10, state_since=now - 5,
                  finished_at=None, task_counts={"PENDING": spec.replicas})
    return JobView(**{**fields, **changes})


class FakeClient:
    """Stands in for corral.client.Client: records what the CLI asked for."""

    def __init__(self) -> None:
        self.submitted: list[tuple[JobSpec, str | None]] = []
        self.uploaded: list = []
        self.jobs: list[JobView] = []
        self.final_state = "SUCCEEDED"
        self.task_views: list = []
        self.history_entries: list = []
        self.worker_views: list = []
        self.placement_analysis = None
        self.sharing = WorkdirSharing(alive=1, sharing=1)  # every worker shares the submission directory
        self.asked_sharing: list = []
        self.attachment_views: list = []
        self.log_chunks: list[bytes] = []

    def submit(self, spec, idempotency_key=None):
        self.submitted.append((spec, idempotency_key))
        return job_view(42, spec)

    def workdir_sharing(self, workdir, pool="default"):
        self.asked_sharing.append((workdir, pool))
        return self.sharing

    def upload_bundle(self, directory):
        self.uploaded.append(directory)
        return "ab" * 32

    def wait(self, job_id, timeout=None, poll=0.2):
        return job_view(job_id, state=self.final_state, task_counts={self.final_state: 1})

    def list(self, states=None, limit=100):
        return iter(self.jobs[:limit])

    def count(self, states=None):
        return len(self.jobs)

    def get(self, job_id):
        return next(j for j in self.jobs if j.id == job_id)

    def tasks(self, job_id):
        return self.task_views

    def history(self, job_id):
        return self.history_entries

    def workers(self):
        return self.worker_views

    def placement(self, job_id):
        return self.placement_analysis

    def cancel(self, job_id):
        return job_view(job_id, state="TERMINATING")

    def attachments(self, job_id):
        return self.attachment_views

    def logs(self, job_id, task=0, stream="stdout"):
        return iter(self.log_chunks)

    def close(self):
        pass


@pytest.fixture
def fake():
    return FakeClient()


@pytest.fixture
def cli(fake):
    """Runs `corral ARGS` against the fake client; returns the click Result."""
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(main, list(args), obj={"client": fake}, catch_exceptions=False)

    return run
