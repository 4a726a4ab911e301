"""dspark serve limits and lifecycle:
  - --api-key (and $DSPARK_API_KEY): 401 in the OpenAI shape without / with a wrong key, 200 with
    it; /health and /metrics stay open;
  - --max-batch 1 --max-queue 1: one request decodes, one waits (queue depth 1), the next gets 503
    queue_full; the waiting one is admitted when the first client goes away;
  - an engine step that throws ($DSPARK_SERVE_FAIL_AT_ROWS hook): the live requests fail (a stream
    with an error event, a plain request with a 500), the KV pages come back, later requests work;
  - shutdown (SIGTERM) with a stream in flight: the stream gets an error event and then
    `data: [DONE]`, and the server exits 0;
  - defaults: on the CPU the KV cache holds 16,384 tokens, not --max-batch full contexts.
"""

import json
import os
import signal
import socket
import threading

import openai

from server_util import Server, args, check, fail, post, run_test, wait_until

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
PROMPT = "The cat sat on the mat. The cat sat on the"
LONG = ["--max-context", "8192", "--kv-memory", "64M"]


def open_stream(port, max_tokens=8000):
    """A raw streaming request; returns the socket once the first event arrived."""
    body = json.dumps({"model": "qwen3", "prompt": PROMPT, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True})
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n"
               f"{body}").encode())
    got = b""
    while b"data: " not in got:
        chunk = s.recv(4096)
        check(chunk, "stream ended early")
        got += chunk
    return s


def auth():
    env = dict(os.environ, DSPARK_API_KEY="from-env")
    for extra, key in ((["--api-key", "s3cret"], "s3cret"), ([], "from-env")):
        with Server(DSPARK, M, *extra, env=env) as srv:
            try:
                srv.client(api_key="wrong").chat.completions.create(
                    model="qwen3", max_tokens=2, messages=[{"role": "user", "content": "x"}])
                fail("a wrong key was accepted")
            except openai.AuthenticationError as e:
                check(e.status_code == 401 and e.body["code"] == "invalid_api_key",
                      f"401 body {e.body}")
            # No Authorization header at all (the client always sends one).
            status, headers, body = post("/v1/chat/completions", json.dumps(
                {"model": "qwen3", "messages": [{"role": "user", "content": "x"}]}), srv.port)
            check(status == 401 and headers.get("www-authenticate") == "Bearer" and
                  json.loads(body)["error"]["type"] == "authentication_error", f"no key: {body}")
            try:
                srv.client(api_key="wrong").models.list()
                fail("models without the key")
            except openai.AuthenticationError:
                pass
            r = srv.client(api_key=key).chat.completions.create(
                model="qwen3", max_tokens=2, messages=[{"role": "user", "content": "x"}])
            check(r.usage.completion_tokens == 2, "authorised request")
            check(srv.get("/health")[0] == 200 and srv.get("/metrics")[0] == 200, "open routes")
            m = srv.metrics()
            check(m['dspark_errors_total{kind="unauthorized"}'] == 3, f"401 count {m}")


def queue_full():
    with Server(DSPARK, M, "--max-batch", "1", "--max-queue", "1", *LONG) as srv:
        first = open_stream(srv.port)
        wait_until(lambda: srv.metrics()["dspark_live_rows"] == 1, 10, "the first request live")
        body = json.dumps({"model": "qwen3", "prompt": PROMPT, "max_tokens": 8000, "stream": True,
                           "temperature": 0})
        second = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        second.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                        f"{body}").encode())
        wait_until(lambda: srv.metrics()["dspark_queue_depth"] == 1, 10, "the second queued")
        try:
            srv.client().completions.create(model="qwen3", prompt=PROMPT, max_tokens=4)
            fail("a third request was accepted with a full queue")
        except openai.APIStatusError as e:
            check(e.status_code == 503 and e.body["code"] == "queue_full", f"503 body {e.body}")
        first.close()  # the client goes away: its row is cancelled, the queued one admitted
        wait_until(lambda: srv.metrics()["dspark_queue_depth"] == 0 and
                   srv.metrics()["dspark_live_rows"] == 1, 10, "the queued request admitted")
        status, headers, _ = read_response_head(second)
        check(status == 200 and headers.get("content-type") == "text/event-stream",
              f"second: {status} {headers}")
        second.close()
        wait_until(lambda: srv.metrics()["dspark_live_rows"] == 0 and
                   srv.metrics()["dspark_kv_pages_used"] == 0, 10, "idle after cancellation")
        m = srv.metrics()
        check(m['dspark_requests_finished_total{reason="cancelled"}'] == 2, f"cancelled {m}")
        check(m['dspark_errors_total{kind="queue_full"}'] == 1, "queue_full count")


def read_response_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    head = buf.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
    return int(head[0].split()[1]), headers, buf


def shutdown():
    srv = Server(DSPARK, M, *LONG)
    s = open_stream(srv.port)
    srv.proc.send_signal(signal.SIGTERM)
    rest = b""
    while b"data: [DONE]\n\n" not in rest:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    s.close()  # (an idle keep-alive connection would hold the shutdown up to its 5 s timeout)
    events = [line[6:] for line in rest.decode(errors="replace").split("\n")
              if line.startswith("data: ")]
    check(events and events[-1] == "[DONE]", f"stream did not end with [DONE]: {events[-3:]}")
    err = json.loads(events[-2])
    check(err["error"]["code"] == "unavailable" and "shutting down" in err["error"]["message"],
          f"error event {err}")
    rc = srv.proc.wait(timeout=15)
    check(rc == 0, f"exit code {rc}")


def engine_failure():
    env = dict(os.environ, DSPARK_SERVE_FAIL_AT_ROWS="2")
    with Server(DSPARK, M, *LONG, env=env) as srv:
        client = srv.client()
        results = {}

        def stream():
            try:
                for _ in client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=8000,
                                                   temperature=0, stream=True):
                    pass
                results["stream"] = "completed"
            except openai.APIError as e:
                results["stream"] = e

        def plain():
            try:
                client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=8000,
                                          temperature=0)
                results["plain"] = "completed"
            except openai.APIStatusError as e:
                results["plain"] = e

        threads = [threading.Thread(target=f) for f in (stream, plain)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        e = results.get("stream")
        check(isinstance(e, openai.APIError) and "injected failure" in e.message,
              f"stream: {e!r}")
        e = results.get("plain")
        check(isinstance(e, openai.APIStatusError) and e.status_code == 500 and
              e.body["code"] == "engine_error" and "injected failure" in e.body["message"],
              f"plain: {e!r}")
        wait_until(lambda: srv.metrics()["dspark_kv_pages_used"] == 0, 10, "pages freed")
        r = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=8, temperature=0)
        check(r.usage.completion_tokens == 8, "a request after the failure")
        m = srv.metrics()
        check(m["dspark_engine_step_failures_total"] == 1 and
              m['dspark_requests_finished_total{reason="error"}'] == 2, f"failure metrics {m}")


def defaults():
    with Server(DSPARK, M) as srv:  # max context 512: 32 full contexts would be 18,944 tokens
        check("max batch 32, max context 512, KV 16384 tokens" in srv.banner,
              f"default KV on the CPU: {srv.banner}")


def main():
    defaults()
    auth()
    queue_full()
    engine_failure()
    shutdown()


if __name__ == "__main__":
    run_test(main)
