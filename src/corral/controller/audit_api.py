"""GET /api/v1/audit: the audit log, newest first, for cluster admins."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status

from corral.controller.identity import allow
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.views import AuditEntry
from corral.core.wire import Text
from corral.store.audit import AuditFilter, audit_rows

router = APIRouter(prefix="/api/v1", tags=["audit"], dependencies=[Depends(allow(Action.AUDIT))])

MAX_LISTED = 1000
LATEST = 2**33  # a time past any the log holds (the year 2242): what `until` and `since` may say at most


@router.get("/audit", response_model=list[AuditEntry])
async def audit_log(request: Request,
                    user: Text | None = Query(None, max_length=64, description="only this actor's rows"),
                    action: Text | None = Query(None, max_length=64, description="only this action, e.g. job.cancel"),
                    since: float | None = Query(None, ge=0, le=LATEST, description="unix seconds: at or after"),
                    until: float | None = Query(None, ge=0, le=LATEST, description="unix seconds: before"),
                    limit: int = Query(100, ge=1, le=MAX_LISTED)) -> list[AuditEntry]:
    if since is not None and until is not None and since >= until:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            [{"loc": ["query", "until"], "msg": f"must be after since ({since:g}), not {until:g}",
                              "type": "value_error"}])
    async with services_of(request).store.read() as connection:
        rows = await audit_rows(connection, AuditFilter(actor=user, action=action, since=since, until=until), limit)
    return [AuditEntry.model_validate(row, from_attributes=True) for row in rows]
