"""dspark serve against hostile or careless clients (raw sockets):
  - connect bursts: 256 simultaneous connects all complete at once (listen backlog) and are served;
  - slow clients: 40 connections trickling their head or body one byte at a time do not stop
    /health or new requests (a pool of 18 workers), and are dropped (408) after --request-timeout;
  - content type: only application/json (charset utf-8) reaches a POST endpoint, else 415 in the
    OpenAI shape; no CORS headers, so a browser page cannot read responses or preflight JSON;
  - body size: a Content-Length over --max-body-bytes gets 413 before the body is sent;
  - framing: conflicting Content-Length, Content-Length with Transfer-Encoding -> 400; pipelined
    requests are answered in order on one connection;
  - tools with a chat template that cannot render them -> 400 (a template that can: 200).
"""

import json
import os
import select
import socket
import tempfile
import threading
import time

from server_util import (Server, args, check, model_with_tools_template, post, raw_http,
                         read_response, run_test)

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
CHAT = "/v1/chat/completions"
GOOD = json.dumps({"model": "qwen3", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 2, "temperature": 0})
SMALL_POOL = ["--max-batch", "1", "--max-queue", "1"]  # 1 + 1 + 16 = 18 HTTP workers


def error_of(status, body, want, name):
    check(status == want, f"{name}: status {status}, want {want}: {body[:300]!r}")
    e = json.loads(body)["error"]
    check(e["message"] and e["type"] and "param" in e and "code" in e, f"{name}: shape {e}")
    return e


def timed_get(port, path="/health", timeout=5.0):
    """(seconds, status) of a GET on a fresh connection."""
    t0 = time.time()
    status, _, _ = raw_http(port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                            .encode(), timeout=timeout)
    return time.time() - t0, status


def connect_burst(srv):
    # The kernel caps every backlog at net.core.somaxconn (4096 since Linux 5.4, 128 before).
    with open("/proc/sys/net/core/somaxconn") as f:
        n = min(256, int(f.read()))
    socks, started, done = [], {}, {}
    t0 = time.time()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", srv.port))
        socks.append(s)
        started[s.fileno()] = time.time()
    pending = {s.fileno(): s for s in socks}
    while pending and time.time() - t0 < 10:
        _, writable, _ = select.select([], list(pending.values()), [], 0.05)
        for s in writable:
            check(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0, "a connect failed")
            done[s.fileno()] = time.time() - started[s.fileno()]
            del pending[s.fileno()]
    check(not pending, f"{len(pending)} of {n} connects did not complete in 10 s")
    slow = sorted(done.values())[-1]
    check(slow < 0.5, f"a connect took {slow:.2f} s (SYN retransmitted: listen backlog too small)")
    for s in socks:
        s.setblocking(True)
        s.settimeout(30)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    for s in socks:
        status, _, _ = read_response(s)
        check(status == 200, f"burst /health: {status}")
        s.close()
    print(f"burst: {n} connects, slowest {slow * 1000:.0f} ms, all served")


def trickle(socks, payload, stop):
    """Sends `payload` one byte per 0.2 s on every socket until stop is set."""
    i = 0
    while not stop.is_set() and i < len(payload):
        for s in socks:
            try:
                s.send(payload[i:i + 1])
            except OSError:
                pass
        i += 1
        stop.wait(0.2)


def slow_clients(with_timeout):
    extra = SMALL_POOL + (["--request-timeout", "2"] if with_timeout else [])
    with Server(DSPARK, M, *extra) as srv:
        head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        slow_head = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(20)]
        slow_body = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(f"{head}Content-Length: {len(GOOD)}\r\n\r\n".encode())
            slow_body.append(s)
        stop = threading.Event()
        threads = [threading.Thread(target=trickle, args=(slow_head, (head + "\r\n").encode(),
                                                           stop)),
                   threading.Thread(target=trickle, args=(slow_body, GOOD.encode(), stop))]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            worst = 0.0
            for _ in range(5):
                dt, status = timed_get(srv.port)
                check(status == 200, f"/health under slow clients: {status}")
                worst = max(worst, dt)
            check(worst < 0.5, f"/health took {worst:.2f} s with 40 slow connections open")
            status, _, body = post(CHAT, GOOD, srv.port)
            check(status == 200, f"a chat request under slow clients: {status} {body[:200]!r}")
            print(f"slow clients: /health in <= {worst * 1000:.0f} ms with 40 slow connections")
            if not with_timeout:
                return
            # --request-timeout 2: every slow connection is answered 408 (or closed) and closed.
            deadline = time.time() + 5
            for s in slow_head + slow_body:
                s.settimeout(max(0.1, deadline - time.time()))
                got = b""
                try:
                    while True:
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                except socket.timeout:
                    check(False, "a slow connection was still open 5 s after its timeout of 2 s")
                except ConnectionResetError:
                    pass
                if got:
                    check(got.startswith(b"HTTP/1.1 408 "), f"slow client got {got[:100]!r}")
            m = srv.metrics()
            check(m.get('dspark_errors_total{kind="http_protocol"}', 0) >= 20,
                  f"408s counted: {m}")
            print("slow clients: all dropped after --request-timeout")
        finally:
            stop.set()
            for t in threads:
                t.join()
            for s in slow_head + slow_body:
                s.close()


def content_types(srv):
    refused = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
               "", "application/json; charset=latin-1", "application/jsonx", "text/json"]
    for ct in refused:
        status, _, body = post(CHAT, GOOD, srv.port, content_type=ct)
        e = error_of(status, body, 415, f"Content-Type {ct!r}")
        check(e["code"] == "unsupported_media_type", f"{ct!r}: {e}")
    for ct in ["application/json", "application/json; charset=utf-8",
               "Application/JSON; Charset=\"UTF-8\"", "application/json;charset=utf8"]:
        status, _, body = post(CHAT, GOOD, srv.port, content_type=ct)
        check(status == 200, f"Content-Type {ct!r}: {status} {body[:200]!r}")
    # CORS: no Access-Control-* headers on a cross-origin request, nor on a preflight (405).
    status, headers, _ = post(CHAT, GOOD, srv.port, headers={"Origin": "http://evil.example"})
    check(status == 200 and not any(k.startswith("access-control") for k in headers),
          f"cross-origin POST: {status} {headers}")
    status, headers, _ = raw_http(srv.port, (
        f"OPTIONS {CHAT} HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
        "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
        "Connection: close\r\n\r\n").encode())
    check(status == 405 and not any(k.startswith("access-control") for k in headers),
          f"preflight: {status} {headers}")
    print(f"content types: {len(refused)} refused with 415, CORS preflight refused")


def body_limit():
    with Server(DSPARK, M, "--max-body-bytes", "1M") as srv:
        # Only the head is sent: the 413 must come without the body.
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=3)
        s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {(1 << 20) + 1}\r\n\r\n".encode())
        try:
            status, headers, body = read_response(s)
        except socket.timeout:
            check(False, "no 413 before the body was sent")
        s.close()
        e = error_of(status, body, 413, "Content-Length over --max-body-bytes")
        check(e["code"] == "payload_too_large" and headers.get("connection") == "close", f"{e}")
        # A client that sends the whole body anyway still reads the 413.
        status, _, body = post(CHAT, b" " * (2 << 20), srv.port)
        error_of(status, body, 413, "a 2 MiB body")
        # Exactly at the limit: parsed (padding is valid JSON whitespace).
        padded = GOOD + " " * ((1 << 20) - len(GOOD))
        status, _, body = post(CHAT, padded, srv.port)
        check(status == 200, f"a body of exactly --max-body-bytes: {status} {body[:200]!r}")
    print("body limit: 413 from the head alone")


def framing(srv):
    good = GOOD.encode()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    n = len(good)
    cases = [  # (name, the header lines after `head`); each request carries the good body
        ("conflicting Content-Length", f"Content-Length: {n}\r\nContent-Length: 5"),
        ("Content-Length and Transfer-Encoding",
         f"Content-Length: {n}\r\nTransfer-Encoding: chunked"),
        ("negative Content-Length", "Content-Length: -1"),
        ("Content-Length with junk", "Content-Length: 12abc"),
        ("space before the colon", f"Content-Length : {n}"),
        ("folded header line", f"X-A: 1\r\n Content-Length: 3\r\nContent-Length: {n}"),
        ("header line without a colon", f"Content-Length {n}"),
    ]
    cases = [(name, f"{head}{lines}\r\n\r\n".encode() + good) for name, lines in cases]
    for name, data in cases:
        status, headers, body = raw_http(srv.port, data)
        e = error_of(status, body, 400, name)
        check(headers.get("connection") == "close", f"{name}: connection {headers}")
        check(e["code"] == "invalid_framing", f"{name}: {e}")
    # Two identical Content-Length headers are one length (RFC 9110).
    status, _, body = raw_http(srv.port, f"{head}Content-Length: {len(good)}\r\nContent-Length: "
                               f"{len(good)}\r\nConnection: close\r\n\r\n".encode() + good)
    check(status == 200, f"repeated equal Content-Length: {status} {body[:200]!r}")
    # Pipelining: three requests in one send, three responses in order.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                  f"{head}Content-Length: {len(good)}\r\n\r\n".encode() + good +
                  b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):  # the last request closes the connection
            data += chunk
    got = []
    while data:  # (status, body) of each response, all with Content-Length
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        n = int(next(v for k, _, v in (h.partition(": ") for h in lines[1:])
                     if k.lower() == "content-length"))
        got.append((int(lines[0].split()[1]), data[:n]))
        data = data[n:]
    check([g[0] for g in got] == [200, 200, 200], f"pipelined statuses {[g[0] for g in got]}")
    check(json.loads(got[0][1]) == {"status": "ok"}, f"first: {got[0][1]!r}")
    check(json.loads(got[1][1])["object"] == "chat.completion", f"second: {got[1][1][:200]!r}")
    check(json.loads(got[2][1])["object"] == "list", f"third: {got[2][1][:200]!r}")
    print(f"framing: {len(cases)} refused with 400, 3 pipelined requests answered in order")


def tools():
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                             "parameters": {"type": "object", "properties": {}}}}
    body = json.dumps({"model": "qwen3", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2, "tools": [tool]})
    with Server(DSPARK, M) as srv:  # its template has no tools
        status, _, resp = post(CHAT, body, srv.port)
        e = error_of(status, resp, 400, "tools with a template without tools")
        check(e["param"] == "tools" and e["code"] == "tools_unsupported", f"{e}")
        status, _, resp = post(CHAT, json.dumps({**json.loads(body), "tools": []}), srv.port)
        check(status == 200, f"an empty tools list: {status} {resp[:200]!r}")
    with tempfile.TemporaryDirectory() as d:
        model = model_with_tools_template(
            M, d, "{%- if tools %}{{- 'Tools: ' + tools | length | string + '\\n' }}{%- endif %}")
        with Server(DSPARK, model) as srv:
            status, _, resp = post(CHAT, body, srv.port)
            check(status == 200, f"tools with a template that renders them: {status} {resp!r}")
    print("tools: 400 when the template cannot render them")


def main():
    with Server(DSPARK, M) as srv:
        connect_burst(srv)
        content_types(srv)
        framing(srv)
    slow_clients(with_timeout=False)
    slow_clients(with_timeout=True)
    body_limit()
    tools()


if __name__ == "__main__":
    run_test(main)
