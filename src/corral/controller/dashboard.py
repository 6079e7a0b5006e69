"""The dashboard: static files served by the controller itself, no build step and no extra server.

The page is one HTML file with its script and style beside it; it reads the same API as the
CLI with the admin token a user types into its login form, and stays live through /api/v1/events.
Its terminal, xterm.js, is vendored into static/vendor/ by `make install` (tools/vendor_static.py) and
served from there: the page loads it only when a terminal is opened, and says how to build it if missing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import FileResponse

STATIC = Path(__file__).parent / "static"
VENDOR = STATIC / "vendor"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def home() -> FileResponse:
    return _file(STATIC, "index.html")


@router.get("/static/{name}")
async def static_file(name: str) -> FileResponse:
    return _file(STATIC, name)


@router.get("/static/vendor/{name}")
async def vendored_file(name: str) -> FileResponse:
    return _file(VENDOR, name)


def _file(directory: Path, name: str) -> FileResponse:
    path = directory / name
    if "/" in name or name.startswith(".") or path.suffix not in TYPES or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no dashboard file {name!r}")
    return FileResponse(path, media_type=TYPES[path.suffix], headers={"Cache-Control": "no-cache"})
