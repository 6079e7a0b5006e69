"""The controller's app in this process (no socket, no worker): fast tests of the HTTP API's answers."""

from __future__ import annotations

import httpx
import pytest

from corral.controller.app import create_app
from corral.controller.job_tokens import mint
from corral.controller.settings import ControllerSettings

ADMIN = "admin-token"


class Api:
    def __init__(self, app, data_dir) -> None:
        self.app = app
        self.data_dir = data_dir

    def as_(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://ctl",
                                 headers={"Authorization": f"Bearer {token}"})

    def admin(self) -> httpx.AsyncClient:
        return self.as_(ADMIN)

    def job(self, job_id: int) -> httpx.AsyncClient:
        return self.as_(mint(ADMIN, job_id))


@pytest.fixture
async def api(tmp_path):
    settings = ControllerSettings(data_dir=tmp_path, admin_token=ADMIN, join_token="join-token")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield Api(app, tmp_path)
