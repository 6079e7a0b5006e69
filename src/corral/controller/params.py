"""The API's edge, one way for every route: ids typed to the store's range, and the answer to a request
that fails validation.

An id in a path that no row can have (out of the id columns' range) is an unknown id: 404, as a missing row
is. Anything else malformed is a 422 whose body serialises whatever the input was (NaN, a lone surrogate).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import Path, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from corral.core.wire import MAX_ID, storable

PathId = Annotated[int, Path(ge=1, le=MAX_ID, description="an id the controller gave")]
PathIndex = Annotated[int, Path(ge=0, le=MAX_ID, description="a task's index in its job, from 0")]

# Routes that read their body as bytes say so, so that the OpenAPI document (and a fuzzer) knows it.
RAW_BODY = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}

_OUT_OF_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}
ECHOED_TEXT = 200  # characters of a refused string value echoed back; objects and lists are only described


def _echo(value: Any) -> Any:
    """What a 422 says of a refused input: a scalar as sent (a string cut short), an object or a list described,
    so that a refused multi-megabyte body is not sent back whole."""
    if isinstance(value, str) and len(value) > ECHOED_TEXT:
        return f"{value[:ECHOED_TEXT]}... ({len(value)} characters)"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    return value


def _serialisable(value: Any) -> Any:
    """`value` with what JSON cannot carry spelled out: non-finite numbers as text, lone surrogates escaped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {_serialisable(key): _serialisable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_serialisable(item) for item in value]
    return value


async def refuse_invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """404 for an id in the path that cannot exist; otherwise 422 with the errors, always valid JSON."""
    errors = error.errors()
    if errors and all(e["loc"][0] == "path" and e["type"] in _OUT_OF_RANGE for e in errors):
        return JSONResponse({"detail": _serialisable(f"not found: {request.url.path}")}, status.HTTP_404_NOT_FOUND)
    detail = _serialisable(jsonable_encoder([{**e, "input": _echo(e["input"])} if "input" in e else e
                                             for e in errors]))
    return JSONResponse({"detail": detail}, status.HTTP_422_UNPROCESSABLE_CONTENT)
