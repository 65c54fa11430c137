"""A loopback model API for the agent-CLI tests: the streaming Anthropic Messages API
(`POST /v1/messages`, server-sent events), the streaming OpenAI Responses API
(`POST /v1/responses`), OpenAI Chat Completions (`POST /v1/chat/completions`, not streamed, as
aider asks with `--no-stream`) and Gemini's `POST /v1beta/models/M:streamGenerateContent?alt=sse`, as
their documentation gives them, enough for Claude Code, opencode, Codex, Gemini CLI and aider to run a task with a
tool call.

What it answers is chosen by the request:

- by the model's name, its trouble: `...-401` refuses the key (echoing it, as a careless
  provider might), `...-429` answers 429 with `retry-after: 1` to its first request and works
  after, `...-529` or `...-503` is overloaded (Anthropic's 529,
  OpenAI's 503),
  `...-stall` sends its first event and then nothing; any other model works (Gemini's 429 carries a
`RetryInfo` of 2 s);
- by the task, the edit: a task holding the lines `file: NAME`, `content: TEXT` and optionally
  `first: TEXT` (`\\n` a line break in either) writes TEXT (or, on a first attempt, the
  broken FIRST) into NAME with the CLI's own file tools — Claude Code's `Read` and `Write`, Codex's
`exec_command`, Gemini CLI's `write_file`, opencode's `read` and `write`, aider's edit blocks — and then says it is done; a
  later attempt is one whose prompt carries runner's feedback (`<runner-feedback>`).

Every request is logged, one JSON object per line, to the file named by `--log`: the API, the
model, whether the prompt carried feedback, the status answered. The port it listens on is
printed on stdout once it listens. `MOCK_SECRET`, when set, is printed by the agent in its last
message, so that the test can look for it in what runner kept.
"""

import argparse
import http.server
import json
import os
import re
import shlex
import threading
import time

LOG_LOCK = threading.Lock()
SEEN_429 = set()


def log(path, entry):
    with LOG_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def texts(value):
    """Every string of a JSON value, depth first: the prompt wherever a CLI put it."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)


def task_of(conversation):
    """The edit the task asks for: (file, content, first), or None."""
    whole = "\n".join(texts(conversation))
    file = re.search(r"^file: (\S+)$", whole, re.M)
    content = re.search(r"^content: ([^\"\n]*)", whole, re.M)
    if not file or not content:
        return None
    first = re.search(r"^first: ([^\"\n]*)", whole, re.M)
    feedback = "<runner-feedback>" in whole
    text = first.group(1) if first and not feedback else content.group(1)
    # A two-character `\n` in the task is a line break of the content.
    return file.group(1), text.replace("\\n", "\n"), feedback


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if os.environ.get("MOCK_DUMP"):
            log(os.environ["MOCK_DUMP"], {"path": self.path, "body": body})
        path = self.path.split("?")[0]
        if path.endswith("/messages"):
            self.anthropic(body)
        elif path.endswith("/responses"):
            self.openai(body)
        elif path.endswith("/chat/completions"):
            self.chat(body)
        elif ":streamGenerateContent" in path or ":generateContent" in path:
            model = path.rsplit("/", 1)[-1].split(":")[0]
            self.gemini(model, body, stream=":stream" in path)
        else:
            self.error(404, {"error": {"message": f"no such endpoint {path}"}})

    # --- both APIs -------------------------------------------------------------------------

    def key(self):
        auth = self.headers.get("authorization", "")
        query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
        return (self.headers.get("x-api-key") or self.headers.get("x-goog-api-key")
                or query.get("key") or auth.removeprefix("Bearer "))

    def trouble(self, model, api, feedback, steps):
        """The status this model's trouble answers with, or None to work."""
        if model.endswith("-401"):
            return 401
        if model.endswith(("-529", "-503")):
            return 529 if api == "anthropic" else 503
        if model.endswith("-429"):
            # The model's first request is limited; the ones after work.
            with LOG_LOCK:
                first = model not in SEEN_429
                SEEN_429.add(model)
            if first:
                return 429
        return None

    def record(self, api, model, feedback, status):
        log(self.server.log_path, {
            "api": api, "model": model, "feedback": feedback, "status": status,
        })

    def error(self, status, payload, headers=()):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def stream_start(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, name, data):
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def stall(self):
        # Nothing more, until the client gives up or is ended.
        while True:
            time.sleep(1)

    def closing_words(self):
        secret = os.environ.get("MOCK_SECRET")
        return "Done." + (f" The token was {secret}." if secret else "")

    # --- Anthropic Messages ------------------------------------------------------------------

    def anthropic(self, body):
        model = body.get("model", "")
        messages = body.get("messages", [])
        task = task_of(messages)
        feedback = bool(task and task[2])
        steps = sum(
            1 for m in messages if isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        status = self.trouble(model, "anthropic", feedback, steps)
        self.record("anthropic", model, feedback, status or 200)
        if status == 401:
            return self.error(401, {"type": "error", "error": {
                "type": "authentication_error",
                "message": f"invalid x-api-key {self.key()}"}})
        if status == 429:
            return self.error(429, {"type": "error", "error": {
                "type": "rate_limit_error",
                "message": "Number of requests has exceeded your rate limit"}},
                [("retry-after", "1")])
        if status == 529:
            return self.error(529, {"type": "error", "error": {
                "type": "overloaded_error", "message": "Overloaded"}})
        self.stream_start()
        usage = {"input_tokens": 100, "output_tokens": 1}
        self.event("message_start", {"type": "message_start", "message": {
            "id": f"msg_{steps}", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
        if model.endswith("-stall"):
            return self.stall()
        # Claude Code says "Primary working directory: …" and names its tools `Read` and
        # `Write` (`file_path`); opencode says "Working directory: …", `read` and `write`
        # (`filePath`).
        workdir = re.search(r"(?:Primary working|Working) directory: (\S+)",
                            "\n".join(texts(body)))
        tools = {t.get("name") for t in body.get("tools", [])}
        read, write, key = ("Read", "Write", "file_path") if "Write" in tools else \
            ("read", "write", "filePath")
        if task and steps < 2 and workdir and write in tools:
            # Read the file first (a write tool refuses to replace a file it has not read).
            name, text, _ = task
            path = os.path.join(workdir.group(1), name)
            tool, arguments = (read, {key: path}) if steps == 0 else \
                (write, {key: path, "content": text + "\n"})
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                       "content_block": {"type": "tool_use", "id": f"toolu_{steps}",
                                         "name": tool, "input": {}}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                       "delta": {"type": "input_json_delta",
                                 "partial_json": json.dumps(arguments)}})
            stop = "tool_use"
        else:
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": self.closing_words()}})
            stop = "end_turn"
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event("message_delta", {"type": "message_delta",
                   "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": 20}})
        self.event("message_stop", {"type": "message_stop"})

    # --- OpenAI Responses --------------------------------------------------------------------

    def openai(self, body):
        model = body.get("model", "")
        items = body.get("input", [])
        task = task_of(items)
        feedback = bool(task and task[2])
        steps = sum(1 for i in items if isinstance(i, dict)
                    and i.get("type") == "function_call_output")
        status = self.trouble(model, "openai", feedback, steps)
        self.record("openai", model, feedback, status or 200)
        if status == 401:
            return self.error(401, {"error": {
                "message": f"Incorrect API key provided: {self.key()}.",
                "type": "invalid_request_error", "code": "invalid_api_key"}})
        if status == 429:
            return self.error(429, {"error": {
                "message": "Rate limit reached for requests", "type": "requests",
                "code": "rate_limit_exceeded"}}, [("retry-after", "1")])
        if status == 503:
            return self.error(503, {"error": {
                "message": "The server is overloaded", "type": "server_error"}})
        self.stream_start()
        rid = f"resp_{steps}"
        self.event("response.created", {"type": "response.created", "response": {
            "id": rid, "object": "response", "status": "in_progress", "model": model,
            "output": []}})
        if model.endswith("-stall"):
            return self.stall()
        if task and steps == 0:
            name, text, _ = task
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                    "name": "exec_command", "status": "completed",
                    "arguments": json.dumps({
                        "cmd": f"printf '%s\\n' {shlex.quote(text)} > {shlex.quote(name)}"})}
        else:
            item = {"type": "message", "id": "msg_1", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": self.closing_words(),
                                 "annotations": []}]}
        self.event("response.output_item.added", {"type": "response.output_item.added",
                   "output_index": 0, "item": item})
        self.event("response.output_item.done", {"type": "response.output_item.done",
                   "output_index": 0, "item": item})
        self.event("response.completed", {"type": "response.completed", "response": {
            "id": rid, "object": "response", "status": "completed", "model": model,
            "output": [item],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 120}}})


    # --- OpenAI Chat Completions (not streamed) ---------------------------------------------

    def chat(self, body):
        model = body.get("model", "")
        messages = body.get("messages", [])
        task = task_of([m for m in messages if m.get("role") == "user"])
        feedback = bool(task and task[2])
        status = self.trouble(model, "openai", feedback, 0)
        self.record("chat", model, feedback, status or 200)
        if status == 401:
            return self.error(401, {"error": {
                "message": f"Incorrect API key provided: {self.key()}.",
                "type": "invalid_request_error", "code": "invalid_api_key"}})
        if status == 429:
            return self.error(429, {"error": {
                "message": "Rate limit reached for requests", "type": "requests",
                "code": "rate_limit_exceeded"}}, [("retry-after", "1")])
        if status == 503:
            return self.error(503, {"error": {
                "message": "The server is overloaded", "type": "server_error"}})
        if model.endswith("-stall"):
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "1000")
            self.end_headers()
            self.wfile.write(b"{")
            self.wfile.flush()
            return self.stall()
        if task:
            # aider's edit formats: a SEARCH/REPLACE block (an empty SEARCH makes the file; on a
            # later attempt the first attempt's text is replaced), or the whole file.
            name, text, again = task
            system = "\n".join(texts([m for m in messages if m.get("role") == "system"]))
            if "SEARCH" in system:
                first = re.search(r"^first: ([^\"\n]*)", "\n".join(texts(messages)), re.M)
                was = first.group(1).replace("\\n", "\n") + "\n" if again and first else ""
                reply = (f"{name}\n```\n<<<<<<< SEARCH\n{was}=======\n{text}\n"
                         f">>>>>>> REPLACE\n```\n")
            else:
                reply = f"{name}\n```\n{text}\n```\n"
            reply += "\n" + self.closing_words()
        else:
            reply = self.closing_words()
        data = json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # --- Gemini generateContent ------------------------------------------------------------

    def gemini(self, model, body, stream):
        contents = body.get("contents", [])
        task = task_of(contents)
        feedback = bool(task and task[2])
        steps = sum(1 for c in contents for p in c.get("parts", [])
                    if isinstance(p, dict) and "functionResponse" in p)
        status = self.trouble(model, "gemini", feedback, steps)
        self.record("gemini", model, feedback, status or 200)
        if status == 401:
            return self.error(401, {"error": {
                "code": 401, "status": "UNAUTHENTICATED",
                "message": f"API key not valid. Please pass a valid API key. ({self.key()})"}})
        if status == 429:
            return self.error(429, {"error": {
                "code": 429, "status": "RESOURCE_EXHAUSTED",
                "message": "Resource has been exhausted (e.g. check quota).",
                "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                             "retryDelay": "2s"}]}},
                [("retry-after", "1")])
        if status == 503:
            return self.error(503, {"error": {
                "code": 503, "status": "UNAVAILABLE", "message": "The model is overloaded."}})
        usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}
        if task and steps == 0:
            name, text, _ = task
            workdir = re.search(r"Workspace Directories:\*\*\s*-\s*(/\S+)",
                                "\n".join(texts(body)))
            path = os.path.join(workdir.group(1), name) if workdir else name
            part = {"functionCall": {"name": "write_file",
                                     "args": {"file_path": path, "content": text + "\n"}}}
        else:
            part = {"text": self.closing_words()}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model}
        if not stream:
            data = json.dumps(chunk).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        self.stream_start()
        if model.endswith("-stall"):
            first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let"}]},
                                     "index": 0}]}
            self.wfile.write(f"data: {json.dumps(first)}\r\n\r\n".encode())
            self.wfile.flush()
            return self.stall()
        self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    server.log_path = args.log
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
