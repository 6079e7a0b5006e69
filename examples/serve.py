"""A deployment's replica, as `corral deploy chat ... -- python examples/serve.py` runs it: HTTP on $PORT.

GET /health answers once it is ready; POST /v1/chat/completions answers in the OpenAI format, echoing
the last message; any other GET says where the replica runs. Only the standard library.
"""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Replica(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._answer(b"ok" if self.path == "/health" else f"served from {os.getcwd()}".encode(), "text/plain")

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        said = (request.get("messages") or [{}])[-1].get("content", "")
        reply = {"object": "chat.completion", "model": request.get("model"),
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": f"you said: {said}"}}]}
        self._answer(json.dumps(reply).encode(), "application/json")

    def _answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Replica).serve_forever()
