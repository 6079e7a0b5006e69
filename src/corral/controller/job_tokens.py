"""The token of a job, that its tasks call the API with (controller.identity turns it into a Principal).

A task gets a job-scoped token in `CORRAL_TOKEN`, never the admin one. It is derived from the
admin token (an HMAC of the job id), so the controller checks it without storing it. With it,
a task may read, cancel and submit within its job's launch tree only: its own job and the jobs
launched from it; what it submits records the job as `launched_by`.
"""

from __future__ import annotations

import hashlib
import hmac
import re

FORM = re.compile(r"cj_([0-9]+)_([0-9a-f]{40})")


def mint(admin_token: str, job_id: int) -> str:
    digest = hmac.new(admin_token.encode(), f"job:{job_id}".encode(), hashlib.sha256).hexdigest()[:40]
    return f"cj_{job_id}_{digest}"


def out_of_reach(caller: int, job_id: int | str) -> str:
    return f"the token of job {caller} reaches only that job and the jobs launched from it, not job {job_id}"
