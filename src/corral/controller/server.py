"""Serving the controller with uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.log_format import configure_logging
from corral.serving.fast_lane import protocol_for


def controller_logging(log_format: str) -> None:
    """The controller's log lines, set up before it opens the store (a migration it makes is on record)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    configure_logging(log_format)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its own steps, at every start: corral says what changed


def serve(settings: ControllerSettings) -> None:
    controller_logging(settings.log_format)
    json_logs = {"log_config": None} if settings.log_format == "json" else {}  # uvicorn's lines as JSON too
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                timeout_keep_alive=75, http=protocol_for(app), **json_logs)
