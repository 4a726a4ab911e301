#!/usr/bin/env python3
"""Load acceptance of `dspark serve`: many streams, connect bursts and slow clients at once.

    python3 bench/serve_stress.py --dspark build/bin/dspark -m MODEL --draft DRAFTER \
        [--serve-arg=--draft-vocab --serve-arg=FILE] [--streams 256] [--burst 256] [--slow 500] \
        [--slow-streams 32] [--max-tokens 64] --json out.json

Three checks, each printed as one table row and kept in the JSON:

- streams: `--streams` greedy chat requests sent at once to a server with the draft source; every
  text must equal the same request's text from a server without a drafter that answered the
  requests one at a time (the reference).
- burst: `--burst` TCP connections opened at once, each sending `GET /health`: how many were
  refused or reset, and the slowest connect-to-answer time.
- slow: `--slow` connections that send a request head one byte per second (slow clients), open
  while `--slow-streams` greedy streams run (again and again, for `--slow-seconds` at least);
  `/health` is polled every 50 ms meanwhile: its slowest answer, and whether the streams finish
  with their reference texts.

Prompts: the first turns of tools/eval/data/chat_eval.jsonl (hand-written, held out from
training), cycled. Exit status 1 when a check fails (a text differs, a stream errs, a burst
connection fails, /health never answers); the latency figures are reported, not judged.
"""

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_prompts(n):
    prompts = []
    with open(os.path.join(ROOT, "tools", "eval", "data", "chat_eval.jsonl")) as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                prompts.append(item.get("prompt") or item["turns"][0])
    return [prompts[i % len(prompts)] for i in range(n)]


class Server:
    def __init__(self, args, draft):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve-stress-", suffix=".log",
                                               delete=False)
        cmd = [args.dspark, "serve", "-m", args.model, "--port", "0", "--device", args.device,
               "--draft", draft] + (args.serve_arg if draft != "none" else [])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            self.log.seek(0)
            sys.exit(f"serve_stress: the server did not start: {' '.join(cmd)}\n{self.log.read()}")
        print(f"[{draft}] {line.strip()}", flush=True)
        self.port = int(m.group(2))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", "/v1/models")
        self.model_id = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


def chat(server, prompt, max_tokens, timeout=900):
    """One streamed greedy chat request; returns its text (raises on an HTTP or stream error)."""
    body = {"model": server.model_id, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": prompt}]}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    text = []
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            if line == "data: [DONE]":
                break
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        for c in chunk.get("choices", []):
            text.append((c.get("delta") or {}).get("content") or "")
    conn.close()
    return "".join(text)


def concurrent_chats(server, prompts, max_tokens):
    """All prompts at once, one thread each; returns (texts or None, errors, wall seconds)."""
    texts, errors = [None] * len(prompts), []
    start = threading.Barrier(len(prompts) + 1)

    def run(i):
        start.wait()
        try:
            texts[i] = chat(server, prompts[i], max_tokens)
        except Exception as e:  # noqa: BLE001 (reported)
            errors.append(f"request {i}: {e}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return texts, errors, time.perf_counter() - t0


def health_once(port, timeout=10.0):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", "/health")
    status = conn.getresponse().status
    conn.close()
    return time.perf_counter() - t0, status


def burst(server, n):
    """n connections opened at once, each GET /health; returns (failures, slowest seconds)."""
    start = threading.Barrier(n)
    times, failures = [], []

    def one():
        start.wait()
        try:
            dt, status = health_once(server.port)
            if status != 200:
                raise RuntimeError(f"status {status}")
            times.append(dt)
        except Exception as e:  # noqa: BLE001 (counted)
            failures.append(str(e))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures, max(times) if times else None


def slow_clients(server, n, prompts, max_tokens, reference, seconds):
    """n trickling connections while the prompts stream; /health polled every 50 ms."""
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\n\r\n").encode()
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(n)]
    stop = threading.Event()

    def trickle():
        i = 0
        while not stop.is_set() and i < len(head) - 4:  # never completes the head
            for s in socks:
                try:
                    s.send(head[i:i + 1])
                except OSError:
                    pass
            i += 1
            stop.wait(1.0)

    health, health_errors = [], []

    def poll():
        while not stop.is_set():
            try:
                dt, status = health_once(server.port, timeout=5.0)
                health.append(dt if status == 200 else float("inf"))
            except Exception as e:  # noqa: BLE001 (counted)
                health_errors.append(str(e))
            stop.wait(0.05)

    side = [threading.Thread(target=trickle), threading.Thread(target=poll)]
    for t in side:
        t.start()
    try:
        time.sleep(1.0)
        t0 = time.perf_counter()
        rounds, errors, differ = 0, [], 0
        while rounds == 0 or time.perf_counter() - t0 < seconds:
            texts, errs, _ = concurrent_chats(server, prompts, max_tokens)
            errors += errs
            differ += sum(t is not None and t != reference[i] for i, t in enumerate(texts))
            rounds += 1
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        for t in side:
            t.join()
        for s in socks:
            s.close()
    return {"slow_connections": n, "streams": len(prompts), "stream_rounds": rounds,
            "stream_errors": errors[:3], "n_stream_errors": len(errors), "differing": differ,
            "wall_s": wall,
            "health_polls": len(health), "health_errors": len(health_errors),
            "health_max_ms": 1e3 * max(health) if health else None,
            "health_p99_ms": 1e3 * sorted(health)[int(0.99 * (len(health) - 1))] if health
            else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dspark", default="build/bin/dspark")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--draft", default="ngram", help="the speculative server's draft source")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra flag of the speculative server (repeat)")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--burst", type=int, default=256)
    ap.add_argument("--slow", type=int, default=500)
    ap.add_argument("--slow-streams", type=int, default=32)
    ap.add_argument("--slow-seconds", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json")
    args = ap.parse_args()

    prompts = load_prompts(args.streams)
    report = {"model": args.model, "device": args.device, "draft": args.draft,
              "serve_args": args.serve_arg, "max_tokens": args.max_tokens}
    failed = []

    plain = Server(args, "none")
    try:
        t0 = time.perf_counter()
        reference = [chat(plain, p, args.max_tokens) for p in prompts]
        report["reference_s"] = time.perf_counter() - t0
    finally:
        plain.close()
    print(f"reference: {len(reference)} requests one at a time in {report['reference_s']:.1f} s",
          flush=True)

    spec = Server(args, args.draft)
    try:
        texts, errors, wall = concurrent_chats(spec, prompts, args.max_tokens)
        differ = [i for i, t in enumerate(texts) if t is not None and t != reference[i]]
        report["streams"] = {"n": len(prompts), "errors": len(errors), "error_examples": errors[:3],
                             "differing": len(differ), "differing_examples": differ[:5],
                             "wall_s": wall}
        if errors or differ:
            failed.append("streams")

        fails, slowest = burst(spec, args.burst)
        report["burst"] = {"n": args.burst, "failures": len(fails), "failure_examples": fails[:3],
                           "slowest_ms": 1e3 * slowest if slowest is not None else None}
        if fails:
            failed.append("burst")

        report["slow"] = slow_clients(spec, args.slow, prompts[:args.slow_streams],
                                      args.max_tokens, reference, args.slow_seconds)
        s = report["slow"]
        if s["n_stream_errors"] or s["differing"] or not s["health_polls"]:
            failed.append("slow")
    finally:
        spec.close()

    st, b, s = report["streams"], report["burst"], report["slow"]
    print(f"\n{'check':<8} {'result':<60}")
    print(f"{'streams':<8} {st['n']} at once: {st['errors']} errors, {st['differing']} texts differ "
          f"from the plain sequential run ({st['wall_s']:.1f} s)")
    print(f"{'burst':<8} {b['n']} connects at once: {b['failures']} failed, slowest "
          f"{b['slowest_ms'] or 0:.0f} ms")
    print(f"{'slow':<8} {s['slow_connections']} slow connections + {s['streams']} streams x "
          f"{s['stream_rounds']} ({s['wall_s']:.0f} s): {s['n_stream_errors']} errors, "
          f"{s['differing']} differ; /health max "
          f"{s['health_max_ms'] or 0:.0f} ms, p99 {s['health_p99_ms'] or 0:.0f} ms over "
          f"{s['health_polls']} polls ({s['health_errors']} failed)")
    report["failed"] = failed
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if failed:
        print(f"serve_stress: failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
