from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from corral.cli.main import main
from corral.client.errors import CorralError, format_detail
from corral.core.spec import JobBatch, JobSpec, Workdir
from corral.core.views import EstimateStats, JobView, WorkdirSharing


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
        self.batches = 0  # submit_many calls
        self.uploaded: list = []
        self.jobs: list[JobView] = []
        self.final_state = "SUCCEEDED"
        self.task_views: list = []
        self.history_entries: list = []
        self.worker_views: list = []
        self.placement_analysis = None
        self.what_if_view = None
        self.sharing = WorkdirSharing(alive=1, sharing=1)  # every worker shares the submission directory
        self.asked_sharing: list = []  # by the question or as the condition of a submission
        self.questions = 0  # GET /workdir/sharing asked alone
        self.attachment_views: list = []
        self.log_chunks: list[bytes] = []
        self.listed: list[dict] = []  # the filters each jobs listing asked for
        self.me = {"name": "alice", "role": "member", "cluster_admin": False, "projects": {"vision": "member"},
                   "token": {"kind": "user", "id": 3, "expires_at": None}}
        self.user_views: dict[str, dict] = {}
        self.member_roles: dict[str, dict[str, str]] = {}
        self.token_views: list[dict] = []
        self.calls: list[tuple] = []  # team calls, in order
        self.estimates = EstimateStats(days=30, count=0, horizons=[])

    def submit(self, spec, idempotency_key=None):
        self.submitted.append((spec, idempotency_key))
        return job_view(42, spec)

    def submit_many(self, specs, idempotency_keys=None):
        self.batches += 1
        self.submitted += zip(specs, idempotency_keys or [None] * len(specs), strict=True)
        return [job_view(42 + i, spec) for i, spec in enumerate(specs)]

    def submit_rows(self, specs, idempotency_keys=None, *, batch=False, shared_workdir=False):
        """As the controller answers: the specs checked (a 422 with FastAPI's detail), with `shared_workdir` a 409
        saying `upload_needed` where `sharing` needs the files uploaded, the jobs as JSON."""
        try:
            if batch:
                checked = JobBatch.model_validate({"jobs": specs, "idempotency_keys": idempotency_keys}).jobs
            else:
                checked = [JobSpec.model_validate(specs[0])]
        except ValidationError as error:
            detail = [{"loc": ["body", *item["loc"]], "msg": item["msg"], "type": item["type"]}
                      for item in error.errors()]
            raise CorralError(422, format_detail(detail), detail) from None
        if shared_workdir and checked[0].workdir is not None and not checked[0].bundle and \
                self.workdir_sharing(checked[0].workdir, checked[0].pool).upload_needed:
            raise CorralError(409, "upload its files", {"message": "upload its files",
                                                        **self.sharing.model_dump(mode="json")})
        views = self.submit_many(checked, idempotency_keys) if batch else \
            [self.submit(checked[0], (idempotency_keys or [None])[0])]
        return [view.model_dump(mode="json") for view in views]

    def wait_row(self, job_id, timeout=None):
        return self.wait(job_id, timeout).model_dump(mode="json")

    def upload_needed(self, workdir, pool="default"):
        self.questions += 1
        return self.workdir_sharing(Workdir.model_validate(workdir), pool).upload_needed

    def estimate_stats(self, days=30.0):
        self.calls.append(("estimate_stats", days))
        return self.estimates

    def workdir_sharing(self, workdir, pool="default"):
        self.asked_sharing.append((workdir, pool))
        return self.sharing

    def upload_bundle(self, directory):
        self.uploaded.append(directory)
        return "ab" * 32

    def wait(self, job_id, timeout=None, poll=0.2):
        return job_view(job_id, state=self.final_state, task_counts={self.final_state: 1})

    def list(self, states=None, limit=100, owner=None, project=None):
        self.listed.append({"owner": owner, "project": project})
        return iter(self.jobs[:limit])

    def list_rows(self, states=None, limit=100, owner=None, project=None):
        return (job.model_dump(mode="json") for job in self.list(states, limit, owner, project))

    def count(self, states=None, owner=None, project=None):
        return len(self.jobs)

    def whoami(self):
        return self.me

    def create_user(self, name, *, cluster_admin=False, unix_user=None, projects=None):
        self.calls.append(("create_user", name, cluster_admin, unix_user, dict(projects or {})))
        if name in self.user_views:
            raise CorralError(409, f"user {name} exists")
        self.user_views[name] = {"name": name, "cluster_admin": cluster_admin, "unix_user": unix_user,
                                 "projects": dict(projects or {}), "created_at": time.time(), "disabled_at": None}
        return self.user_views[name]

    def users(self):
        return list(self.user_views.values())

    def update_user(self, name, **changes):
        self.calls.append(("update_user", name, changes))
        if name not in self.user_views:
            raise CorralError(404, f"no user {name}")
        found = self.user_views[name]
        found.update({k: v for k, v in changes.items() if k != "disabled"})
        if "disabled" in changes:
            found["disabled_at"] = time.time() if changes["disabled"] else None
        return found

    def set_member(self, project, name, role):
        self.calls.append(("set_member", project, name, role))
        if name not in self.user_views:
            raise CorralError(404, f"no user {name}")
        self.member_roles.setdefault(project, {})[name] = role
        return {"name": name, "role": role}

    def remove_member(self, project, name):
        self.calls.append(("remove_member", project, name))
        if name not in self.member_roles.get(project, {}):
            raise CorralError(404, f"{name} is not a member of project {project}")
        del self.member_roles[project][name]

    def members(self, project):
        return [{"name": n, "role": r} for n, r in sorted(self.member_roles.get(project, {}).items())]

    def create_token(self, name=None, *, expires_in=None, user=None):
        self.calls.append(("create_token", name, expires_in, user))
        now = time.time()
        view = {"id": len(self.token_views) + 1, "user": user or self.me["name"], "name": name, "prefix": "cu_ab12",
                "created_at": now, "expires_at": None if expires_in is None else now + expires_in, "revoked_at": None}
        self.token_views.append(view)
        return {**view, "token": "cu_ab12-the-secret"}

    def tokens(self, user=None):
        self.calls.append(("tokens", user))
        return self.token_views

    def revoke_token(self, token_id):
        self.calls.append(("revoke_token", token_id))
        held = next((t for t in self.token_views if t["id"] == token_id), None)
        if held is None:
            raise CorralError(404, f"alice has no token {token_id}")
        held["revoked_at"] = time.time()

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

    def what_if(self, job_id):
        return self.what_if_view

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
