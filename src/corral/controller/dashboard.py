"""The dashboard: static files served by the controller itself, no build step and no extra server.

The page is one HTML file with its script and style beside it; it reads the same API as the
CLI with the admin token a user types into its login form, and stays live through /api/v1/events.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import FileResponse

STATIC = Path(__file__).parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def home() -> FileResponse:
    return _file("index.html")


@router.get("/static/{name}")
async def static_file(name: str) -> FileResponse:
    return _file(name)


def _file(name: str) -> FileResponse:
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in TYPES or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no dashboard file {name!r}")
    return FileResponse(path, media_type=TYPES[path.suffix], headers={"Cache-Control": "no-cache"})
