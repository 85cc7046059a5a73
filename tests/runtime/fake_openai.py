"""A small OpenAI-compatible upstream for tests of the real LiteLLM proxy: it answers
`POST /v1/chat/completions` (and `/chat/completions`) with a fixed reply and fixed token usage,
`GET /v1/models` with one model, and records every request it gets (path, headers, JSON body),
so a test can see what reached the provider through the proxy."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    """Serves on 127.0.0.1 in a background thread; `url` is its base (`http://127.0.0.1:P/v1`)."""

    def __init__(self, prompt_tokens=100, completion_tokens=50, reply="the upstream says hi"):
        self.requests = []
        self.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}
        self.reply = reply
        lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._answer(200, {"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]})
                else:
                    self._answer(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with lock:
                    upstream.requests.append({"path": self.path, "headers": dict(self.headers),
                                              "body": body})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._answer(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._answer(200, {
                    "id": f"chatcmpl-{len(upstream.requests)}",
                    "object": "chat.completion",
                    "created": 1764300000,
                    "model": body.get("model", "unknown"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": upstream.reply}}],
                    "usage": upstream.usage,
                })

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def completions(self):
        return [r for r in self.requests if r["path"].rstrip("/").endswith("/chat/completions")]


if __name__ == "__main__":
    # Run alone (a Rust test's upstream): serves until killed, its base URL the first line out.
    with FakeOpenAI() as upstream:
        print(upstream.url, flush=True)
        threading.Event().wait()
