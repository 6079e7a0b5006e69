"""A small OpenAI-compatible server the serving tests deploy: `python -m tests.serving_app.server` serves on $PORT.

Embeddings are deterministic 8-dimensional vectors; chat completions echo the last message,
streamed as server-sent events when asked. /health can be made to fail (POST /fail-health),
/slow holds a request open, and /whoami names the replica that answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

STATE = {"healthy": True}
DIMENSIONS = int(os.environ.get("EMBEDDING_DIMENSIONS", "8"))


def vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(DIMENSIONS)]


async def health(request: Request):
    return PlainTextResponse("ok" if STATE["healthy"] else "failing", status_code=200 if STATE["healthy"] else 503)


async def fail_health(request: Request):
    STATE["healthy"] = False
    return PlainTextResponse("health now fails")


async def whoami(request: Request):
    return JSONResponse({"pid": os.getpid(), "port": int(os.environ["PORT"]),
                         "deployment": os.environ.get("CORRAL_DEPLOYMENT"), "job": os.environ.get("CORRAL_JOB_ID")})


async def work(request: Request):
    """Spend `ms` milliseconds of CPU before answering, as a model's forward pass would."""
    until = time.thread_time() + float(request.query_params.get("ms", "1")) / 1000
    while time.thread_time() < until:
        pass
    return PlainTextResponse("done")


async def slow(request: Request):
    await asyncio.sleep(float(request.query_params.get("seconds", "1")))
    return PlainTextResponse("done")


async def echo(request: Request):
    async def body():
        async for chunk in request.stream():
            yield chunk
    return StreamingResponse(body(), media_type="application/octet-stream")


async def digest(request: Request):
    """The body's length and SHA-256, read to its end first: what a router delivered, whatever its size."""
    hashed, length = hashlib.sha256(), 0
    async for chunk in request.stream():
        hashed.update(chunk)
        length += len(chunk)
    return JSONResponse({"length": length, "sha256": hashed.hexdigest()})


async def embeddings(request: Request):
    payload = await request.json()
    inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
    return JSONResponse({
        "object": "list", "model": payload["model"],
        "data": [{"object": "embedding", "index": i, "embedding": vector(str(text))} for i, text in enumerate(inputs)],
        "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
    })


async def chat(request: Request):
    payload = await request.json()
    text = f"echo: {payload['messages'][-1]['content']}"
    created, ident, words = int(time.time()), f"chatcmpl-{os.getpid()}", len(text.split())
    if not payload.get("stream"):
        return JSONResponse({
            "id": ident, "object": "chat.completion", "created": created, "model": payload["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": words, "total_tokens": 1 + words},
        })
    delay = float(os.environ.get("STREAM_DELAY", "0"))

    async def events():
        for word in text.split(" "):
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": payload["model"],
                     "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            await asyncio.sleep(delay)
        done = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": payload["model"],
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(routes=[
    Route("/health", health), Route("/fail-health", fail_health, methods=["POST"]), Route("/whoami", whoami),
    Route("/slow", slow), Route("/work", work), Route("/echo", echo, methods=["POST"]),
    Route("/digest", digest, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]), Route("/v1/chat/completions", chat, methods=["POST"]),
])

if __name__ == "__main__":
    uvicorn.run(app, host="0.0.0.0", port=int(os.environ["PORT"]), log_level="warning")
