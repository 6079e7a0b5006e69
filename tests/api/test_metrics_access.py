"""/metrics: open by default (scrapers expect it), the admin token's alone when the controller says so."""

from __future__ import annotations

import httpx
import pytest

from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.core.config import ConfigError, parse_config
from tests.api.conftest import ADMIN


async def metrics_status(tmp_path, required: bool, token: str | None) -> int:
    settings = ControllerSettings(data_dir=tmp_path, admin_token=ADMIN, join_token="join-token",
                                  metrics_token_required=required)
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl", headers=headers) as http:
        return (await http.get("/metrics")).status_code


@pytest.mark.parametrize(("required", "token", "status"), [
    (False, None, 200), (False, ADMIN, 200),
    (True, None, 401), (True, "join-token", 401), (True, "wrong", 401), (True, ADMIN, 200)])
async def test_metrics_need_the_admin_token_only_when_required(tmp_path, required, token, status):
    assert await metrics_status(tmp_path, required, token) == status


def test_the_config_file_can_require_the_token():
    assert parse_config("metrics: {require_token: true}\n", "corral.yaml").metrics.require_token
    assert not parse_config("", "corral.yaml").metrics.require_token
    with pytest.raises(ConfigError, match="metrics.require"):
        parse_config("metrics: {require: yes}\n", "corral.yaml")
