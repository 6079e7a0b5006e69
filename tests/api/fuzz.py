"""A property-based fuzz of the whole HTTP API, driven by the app's own OpenAPI document, in this process.

Every operation gets cases both valid and invalid by its schema, each sent with one of the admin, job,
project and join tokens. What must hold for every case: no 5xx, and a 4xx body that is valid JSON (no NaN
either). Routes that wait (the event stream, long-polls) are sent with their wait bounded.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.python import asgi

from corral.controller.app import create_app
from corral.controller.job_tokens import mint
from corral.controller.settings import ControllerSettings

ADMIN, JOIN = "fuzz-admin-token", "fuzz-join-token"


@dataclass
class FuzzRun:
    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        errors = sum(n for status, n in self.statuses.items() if status >= 500)
        return (f"{self.cases} cases in {self.seconds:.0f} s, {errors} 5xx, {len(self.failures)} failures; "
                f"statuses {dict(sorted(self.statuses.items()))}")


def _bounded(case) -> None:
    """Ask nothing to wait: the event stream ends once caught up, long-polls answer at once."""
    path = case.operation.path
    if path.endswith("/events"):
        case.query = {**(case.query or {}), "follow": "false"}
    if path.endswith("/result") and case.operation.method.upper() == "GET":
        case.query = {**(case.query or {}), "wait": 0}
    if path.endswith("/heartbeat") and isinstance(case.body, dict):
        case.body = {**case.body, "wait": 0}


def _problem(response) -> str | None:
    """What is wrong with this answer, if anything."""
    if response.status_code >= 500:
        return f"{response.status_code}: {response.text[:300]}"
    if 400 <= response.status_code < 500 and response.content:
        try:
            json.loads(response.content, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        except ValueError as error:
            return f"{response.status_code} body is not valid JSON ({error}): {response.text[:300]}"
    return None


def fuzz(data_dir: Path, examples: int, db_url: str | None = None) -> FuzzRun:
    """Run `examples` cases per operation and generation mode against a fresh controller app."""
    settings = ControllerSettings(data_dir=data_dir, admin_token=ADMIN, join_token=JOIN, db_url=db_url)
    app = create_app(settings)
    run = FuzzRun()
    started = time.monotonic()
    try:
        with asgi.get_client(app) as client:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            job = client.post("http://testserver/api/v1/jobs", json={"command": ["true"]}, headers=admin).json()
            project = client.post("http://testserver/api/v1/admin/projects/default/tokens", json={},
                                  headers=admin).json()
        tokens = [ADMIN, ADMIN, ADMIN, JOIN, mint(ADMIN, job["id"]), project["token"]]  # most routes are the admin's
        schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
        for result in schema.get_all_operations():
            operation = result.ok()
            cases = st.one_of(operation.as_strategy(generation_mode=mode)
                              for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE))

            @hypothesis.settings(max_examples=examples, deadline=None, database=None,
                                 suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
            @given(case=cases, token=st.sampled_from(tokens))
            def check(case, token) -> None:
                _bounded(case)
                run.cases += 1
                try:
                    response = case.call(headers={"Authorization": f"Bearer {token}"})
                except Exception as error:  # in process, what a server would answer 500 for is raised here
                    run.statuses[500] += 1
                    problem = f"500: {error.__class__.__name__}: {str(error)[:300]}"
                else:
                    run.statuses[response.status_code] += 1
                    problem = _problem(response)
                if problem:
                    run.failures.append(f"{case.operation.method.upper()} {case.formatted_path} {problem}")

            check()
    finally:
        asgi.shutdown_lifespans()
        run.seconds = time.monotonic() - started
    return run
