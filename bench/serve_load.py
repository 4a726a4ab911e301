#!/usr/bin/env python3
"""Load benchmark of `dspark serve`: aggregate tok/s and per-request latency at several client
concurrencies, for each draft configuration, in one run (one server per configuration).

    python3 bench/serve_load.py --dspark build/bin/dspark -m MODEL --device cuda \
        --draft none --draft DRAFTER_DIR --concurrency 1,4,16,32 --max-tokens 128 \
        --json results.json

Each level sends `--requests` streamed requests (default: 2 x concurrency, at least 8) from that
many client threads over raw HTTP (no client library needed), measures for each request the time
to the first text and to the end, and reads usage (completion tokens, speculation) from the last
chunk. Aggregate tok/s = completion tokens of the level / wall time of the level. Prints a table
and writes JSON (per level: tok/s, latency and TTFT percentiles, tau, acceptance, the mean chosen
draft length; per draft
configuration relative to the first one: speedup).
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash table works and when its operations become slow.",
    "List ten facts about the planet Mars, one per line.",
    "Describe the water cycle to a ten-year-old.",
    "What are the differences between TCP and UDP? Answer in detail.",
    "Write a Python function that merges two sorted lists, and explain it.",
    "Summarize the plot of a heist movie you invent, scene by scene.",
    "Give step-by-step instructions for baking bread at home.",
]


def config_name(draft):
    """A short name of a draft configuration: the source's basename and its extra flags."""
    source, *extra = draft.split()
    shown = [e for e in extra if "/" not in e and e != "--draft-vocab"]
    return " ".join([os.path.basename(source.rstrip("/"))] + shown)


def start_server(args, draft):
    log = tempfile.NamedTemporaryFile("w+", prefix="serve-load-", suffix=".log", delete=False)
    source, *extra = draft.split()
    cmd = [args.dspark, "serve", "-m", args.model, "--port", "0", "--device", args.device,
           "--draft", source, "--max-batch", str(max(args.concurrency))] + extra
    if args.gamma is not None:
        cmd += ["--gamma", str(args.gamma)]
    cmd += args.serve_arg
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on http://([^:]+):(\d+)", line)
    if not m:
        proc.kill()
        log.seek(0)
        sys.exit(f"serve_load: dspark serve did not start: {' '.join(cmd)}\n{line}{log.read()}")
    print(f"[{draft}] {line.strip()}", flush=True)
    port = int(m.group(2))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/v1/models")
    args.model_id = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.close()
    return proc, port, log


def one_request(port, body, timeout):
    """Streams one request; returns (ttft_s, latency_s, usage dict, text)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", body["_path"], json.dumps({k: v for k, v in body.items()
                                                    if not k.startswith("_")}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, usage, text = None, None, []
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        usage = chunk.get("usage") or usage
        for c in chunk.get("choices", []):
            piece = c.get("text") or (c.get("delta") or {}).get("content") or ""
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(piece)
    conn.close()
    return ttft, time.perf_counter() - t0, usage or {}, "".join(text)


def make_body(args, i):
    prompt = PROMPTS[i % len(PROMPTS)]
    body = {"model": args.model_id, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.chat:
        body.update(_path="/v1/chat/completions",
                    messages=[{"role": "user", "content": prompt}])
    else:
        body.update(_path="/v1/completions", prompt=prompt)
    return body


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def run_level(args, port, concurrency):
    n = args.requests or max(8, 2 * concurrency)
    results, errors, lock = [], [], threading.Lock()
    next_i = [0]

    def worker():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n:
                return
            try:
                r = one_request(port, make_body(args, i), args.timeout)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 (counted and reported)
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(u.get("completion_tokens", 0) for _, _, u, _ in results)
    spec = [u.get("speculation", {}) for _, _, u, _ in results]
    rounds = sum(s.get("rounds", 0) for s in spec)
    drafted = sum(s.get("drafted", 0) for s in spec)
    accepted = sum(s.get("accepted", 0) for s in spec)
    budget = sum(s.get("mean_draft_length", 0) * s.get("rounds", 0) for s in spec)
    lat = [r[1] for r in results]
    ttft = [r[0] for r in results if r[0] is not None]
    return {
        "concurrency": concurrency, "requests": n, "errors": len(errors),
        "error_examples": errors[:3], "wall_s": wall, "completion_tokens": tokens,
        "tok_per_s": tokens / wall if wall > 0 else 0.0,
        "latency_s": {"p50": pct(lat, 0.5), "p90": pct(lat, 0.9), "mean": statistics.fmean(lat)
                      if lat else None},
        "ttft_s": {"p50": pct(ttft, 0.5), "p90": pct(ttft, 0.9)},
        # Tokens emitted per target forward over the level (sum over rows: prefill's first token
        # is not a round, so tau = (completion tokens - requests) / rounds).
        "tau": (tokens - len(results)) / rounds if rounds else None,
        "acceptance": accepted / drafted if drafted else None,
        # The draft length the server's policy chose per round (speculation.mean_draft_length).
        "mean_draft_length": budget / rounds if rounds else None,
        "texts": [r[3] for r in results] if args.keep_texts else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dspark", default="build/bin/dspark")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--draft", action="append", help="draft configuration (repeat): the "
                    "--draft value, then optional dspark serve flags for this configuration only, "
                    "e.g. 'DIR --draft-policy fixed'; default: none")
    ap.add_argument("--gamma", type=int)
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default 2 x c)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--chat", action="store_true", help="chat completions (default: completions)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra dspark serve flag")
    ap.add_argument("--keep-texts", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    drafts = args.draft or ["none"]

    report = {"model": args.model, "device": args.device, "max_tokens": args.max_tokens,
              "chat": args.chat, "configs": []}
    for draft in drafts:
        proc, port, log = start_server(args, draft)
        try:
            one_request(port, make_body(args, 0), args.timeout)  # warm-up (not measured)
            levels = []
            for c in args.concurrency:
                lv = run_level(args, port, c)
                levels.append(lv)
                print(f"[{config_name(draft)}] c={c:3d} {lv['tok_per_s']:9.1f} "
                      f"tok/s  p50 latency {lv['latency_s']['p50'] or 0:7.3f} s  errors "
                      f"{lv['errors']}", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        report["configs"].append({"draft": draft, "levels": levels})

    base = report["configs"][0]["levels"]
    print(f"\n{'draft':<40} {'conc':>4} {'tok/s':>9} {'speedup':>8} {'p50 lat s':>10} "
          f"{'p90 lat s':>10} {'p50 ttft':>9} {'tau':>6} {'accept':>7} {'len':>5} {'err':>4}")
    for cfg in report["configs"]:
        for lv, b in zip(cfg["levels"], base):
            lv["speedup_vs_first"] = lv["tok_per_s"] / b["tok_per_s"] if b["tok_per_s"] else None
            name = config_name(cfg["draft"])[:40]
            print(f"{name:<40} {lv['concurrency']:>4} {lv['tok_per_s']:>9.1f} "
                  f"{lv['speedup_vs_first'] or 0:>8.2f} {lv['latency_s']['p50'] or 0:>10.3f} "
                  f"{lv['latency_s']['p90'] or 0:>10.3f} {lv['ttft_s']['p50'] or 0:>9.3f} "
                  f"{lv['tau'] or 0:>6.2f} {lv['acceptance'] or 0:>7.2f} "
                  f"{lv['mean_draft_length'] or 0:>5.2f} {lv['errors']:>4}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if any(lv["errors"] for cfg in report["configs"] for lv in cfg["levels"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
