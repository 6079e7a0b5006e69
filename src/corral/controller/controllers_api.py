"""/api/v1/controllers: the controllers serving this store, live or gone, and what each ran lately."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

from corral.controller.identity import allow
from corral.controller.registry import is_gone
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.views import ControllerView
from corral.store.cluster_state import list_controllers

router = APIRouter(prefix="/api/v1/controllers", tags=["controllers"])

State = Literal["live", "gone"]


@router.get("", response_model=list[ControllerView], dependencies=[Depends(allow(Action.READ))])
async def list_all(request: Request, state: State | None = Query(None, description="only those live, or gone")
                   ) -> list[ControllerView]:
    services = services_of(request)
    async with services.store.read() as connection:
        rows = await list_controllers(connection)
    now = time.time()
    views = [ControllerView(id=row.id, url=row.url, state="gone" if is_gone(row, now) else "live", host=row.host,
                            pid=row.pid, version=row.version, started_at=row.started_at, seen_at=row.seen_at,
                            last_pass_at=row.last_pass_at, handlers=row.handlers, this=row.id == services.registry.id)
             for row in rows]
    return [view for view in views if state is None or view.state == state]
