"""Bad input against dspark serve (raw HTTP over sockets): malformed and non-object JSON, wrong
types (every field with every wrong JSON type), out-of-range values, absurd max_tokens, empty / missing messages, unknown roles, oversized
prompts, invalid UTF-8, header and request-line abuse, oversized bodies, and abrupt disconnects
mid-stream. Every client error gets its 4xx in the OpenAI error shape (never a 5xx); the server
never crashes; good requests running concurrently all the while stay identical to their greedy
reference; disconnected requests are cancelled and their KV pages come back.
"""

import json
import os
import socket
import struct
import threading
import time

from server_util import (Server, args, check, fail, generate, post, raw_http, read_response,
                         wait_until)

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
PROMPT = "The cat sat on the mat. The cat sat on the"
MAX_CONTEXT = 8192
GOOD = {"model": "qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def with_(**kw):
    body = dict(GOOD)
    body.update(kw)
    return json.dumps(body)


def without(key):
    return json.dumps({k: v for k, v in GOOD.items() if k != key})


def msgs(*messages):
    return with_(messages=list(messages))


def cases():
    """(name, path, body bytes/str, expected status)."""
    long_prompt = "the cat sat on the mat " * 3000  # > 8192 tokens
    c = [
        ("malformed JSON", CHAT, '{"model": "qwen3", "messages": [', 400),
        ("trailing garbage", CHAT, json.dumps(GOOD) + "}}", 400),
        ("empty body", CHAT, "", 400),
        ("JSON array body", CHAT, "[1, 2, 3]", 400),
        ("JSON string body", CHAT, '"hello"', 400),
        ("JSON null body", COMPLETIONS, "null", 400),
        ("deeply nested JSON", CHAT, "[" * 200000 + "]" * 200000, 400),
        ("invalid UTF-8 bytes", CHAT,
         b'{"model": "qwen3", "messages": [{"role": "user", "content": "a\xff\xfeb"}]}', 400),
        ("overlong UTF-8", COMPLETIONS, b'{"model": "qwen3", "prompt": "\xc0\xaf"}', 400),
        ("lone surrogate escape", CHAT, with_(messages=[{"role": "user", "content": "x"}])
         .replace('"x"', '"\\ud800"'), 400),
        ("missing model", CHAT, without("model"), 400),
        ("model not a string", CHAT, with_(model=123), 400),
        ("unknown model", CHAT, with_(model="gpt-17"), 404),
        ("missing messages", CHAT, without("messages"), 400),
        ("empty messages", CHAT, with_(messages=[]), 400),
        ("messages not a list", CHAT, with_(messages="hello"), 400),
        ("message not an object", CHAT, with_(messages=[42]), 400),
        ("unknown role", CHAT, msgs({"role": "wizard", "content": "x"}), 400),
        ("role missing", CHAT, msgs({"content": "x"}), 400),
        ("role not a string", CHAT, msgs({"role": ["user"], "content": "x"}), 400),
        ("content missing", CHAT, msgs({"role": "user"}), 400),
        ("content a number", CHAT, msgs({"role": "user", "content": 7}), 400),
        ("image content part", CHAT,
         msgs({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}),
         400),
        ("negative temperature", CHAT, with_(temperature=-0.5), 400),
        ("temperature a string", CHAT, with_(temperature="hot"), 400),
        ("huge temperature", CHAT, with_(temperature=1e308), 400),
        ("top_p zero", CHAT, with_(top_p=0), 400),
        ("top_p above one", CHAT, with_(top_p=1.5), 400),
        ("top_k a string", CHAT, with_(top_k="many"), 400),
        ("min_p above one", CHAT, with_(min_p=2), 400),
        ("max_tokens zero", CHAT, with_(max_tokens=0), 400),
        ("max_tokens negative", CHAT, with_(max_tokens=-5), 400),
        ("max_tokens absurd", CHAT, with_(max_tokens=10**12), 400),
        ("max_tokens beyond int64", CHAT, with_(max_tokens=2**64 + 5), 400),
        ("max_tokens a float", CHAT, with_(max_tokens=5.5), 400),
        ("max_tokens a string", COMPLETIONS, json.dumps({"model": "qwen3", "prompt": "x",
                                                         "max_tokens": "10"}), 400),
        ("n = 0", CHAT, with_(n=0), 400),
        ("n = 17", CHAT, with_(n=17), 400),
        ("n a float", CHAT, with_(n=2.0), 400),
        ("stop a number", CHAT, with_(stop=5), 400),
        ("stop empty string", CHAT, with_(stop=[""]), 400),
        ("too many stops", CHAT, with_(stop=["a"] * 100), 400),
        ("stream not a bool", CHAT, with_(stream="yes"), 400),
        ("stream_options without stream", CHAT, with_(stream_options={"include_usage": True}),
         400),
        ("seed a string", CHAT, with_(seed="abc"), 400),
        ("spec_sampling unknown", CHAT, with_(spec_sampling="maximal"), 400),
        ("spec_sampling a number", CHAT, with_(spec_sampling=1), 400),
        ("chat logprobs a number", CHAT, with_(logprobs=3), 400),
        ("top_logprobs without logprobs", CHAT, with_(top_logprobs=2), 400),
        ("top_logprobs 21", CHAT, with_(logprobs=True, top_logprobs=21), 400),
        ("top_logprobs negative", CHAT, with_(logprobs=True, top_logprobs=-1), 400),
        ("completions logprobs 21", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": "x", "logprobs": 21}), 400),
        ("completions logprobs a bool", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": "x", "logprobs": True}), 400),
        ("completions top_logprobs", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": "x", "logprobs": 1, "top_logprobs": 1}), 400),
        ("presence_penalty 2.5", CHAT, with_(presence_penalty=2.5), 400),
        ("frequency_penalty -3", CHAT, with_(frequency_penalty=-3), 400),
        ("repetition_penalty 0", CHAT, with_(repetition_penalty=0), 400),
        ("repetition_penalty negative", CHAT, with_(repetition_penalty=-1.2), 400),
        ("best_of 2", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": "x", "best_of": 2}), 400),
        ("oversized chat prompt", CHAT, msgs({"role": "user", "content": long_prompt}), 400),
        ("oversized completion prompt", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": long_prompt}), 400),
        ("prompt + max_tokens over the context", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": PROMPT, "max_tokens": MAX_CONTEXT - 5}), 400),
        ("missing prompt", COMPLETIONS, json.dumps({"model": "qwen3"}), 400),
        ("empty prompt", COMPLETIONS, json.dumps({"model": "qwen3", "prompt": ""}), 400),
        ("prompt batch", COMPLETIONS, json.dumps({"model": "qwen3", "prompt": ["a", "b"]}), 400),
        ("token id out of vocabulary", COMPLETIONS,
         json.dumps({"model": "qwen3", "prompt": [1, 2, 100000]}), 400),
        ("negative token id", COMPLETIONS, json.dumps({"model": "qwen3", "prompt": [-1]}), 400),
        ("prompt an object", COMPLETIONS, json.dumps({"model": "qwen3", "prompt": {"a": 1}}),
         400),
        ("unknown POST route", "/v1/embeddings", json.dumps(GOOD), 404),
    ]
    return c + type_matrix()


def type_matrix():
    """Every request field with a value of every wrong JSON type: 400; null on an optional field
    is the field left out (200), on a required one 400."""
    types = {"s": ("string", "x"), "a": ("array", [1]), "o": ("object", {"a": 1}),
             "b": ("bool", True), "f": ("float", 1.5), "i": ("int", 3)}
    fields = {"model": "s", "messages": "a", "temperature": "fi", "top_p": "fi", "top_k": "i",
              "min_p": "fi", "max_tokens": "i", "max_completion_tokens": "i", "seed": "i",
              "stop": "sa", "stream": "b", "n": "i", "stream_options": "o", "tools": "a",
              "chat_template_kwargs": "o", "prompt": "sa", "logprobs": "b", "top_logprobs": "i",
              "presence_penalty": "fi", "frequency_penalty": "fi", "repetition_penalty": "fi"}
    required = {"model", "messages", "prompt"}
    out = []
    for field, accepted in fields.items():
        path, body = ((COMPLETIONS, {"model": "qwen3", "prompt": "hi", "max_tokens": 4})
                      if field == "prompt" else (CHAT, dict(GOOD)))
        wrong = [types[t] for t in types if t not in accepted] + [("null", None)]
        for type_name, value in wrong:
            want = 200 if value is None and field not in required else 400
            case = {**body, field: value}
            if field == "top_logprobs":
                case["logprobs"] = True  # top_logprobs needs it
            if field == "max_tokens" and value is None:
                case["max_completion_tokens"] = 4  # a null limit must not leave it unbounded
            out.append((f"{field} {type_name}", path, json.dumps(case), want))
    return out


def error_shape(status, headers, body, name):
    check(headers.get("content-type", "").startswith("application/json"),
          f"{name}: content-type {headers.get('content-type')}")
    try:
        e = json.loads(body)["error"]
    except Exception:  # noqa: BLE001
        fail(f"{name}: status {status} body is not an OpenAI error: {body[:300]!r}")
    check(isinstance(e.get("message"), str) and e["message"], f"{name}: message {e}")
    check(isinstance(e.get("type"), str) and "param" in e and "code" in e, f"{name}: shape {e}")
    return e


def raw_cases(port):
    """(name, raw bytes, expected status): abuse below the JSON level."""
    big_header = "X-Junk: " + "a" * 20000
    many_headers = "".join(f"X-H{i}: {'b' * 50}\r\n" for i in range(200))
    good = json.dumps(GOOD)
    return [
        ("huge header", f"GET /health HTTP/1.1\r\nHost: x\r\n{big_header}\r\n\r\n".encode(), 400),
        ("huge URI", f"GET /{'u' * 10000} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 414),
        ("garbage request line", b"HELLO THERE\r\n\r\n", 400),
        ("unknown method", b"BREW /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET on a POST route", b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        ("DELETE on a GET route", b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n"
                                  b"Content-Length: 0\r\n\r\n", 405),
        ("unknown GET route", b"GET /v2/everything HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        ("unknown model path", b"GET /v1/models/nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        ("bad chunked body", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400),
        ("multipart body", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: multipart/form-data; boundary=XX\r\n"
                           b"Content-Length: 10\r\n\r\n--XX--\r\n\r\n", 415),
        ("body over the limit", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: 41943040\r\n\r\n" + b" " * 41943040, 413),
        ("many headers, good body", (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{many_headers}"
                                     "Content-Type: application/json\r\n"
                                     f"Content-Length: {len(good)}\r\n\r\n{good}").encode(), 200),
    ]


def good_loop(port, ref, stop, errors, counts):
    """Good requests (streamed and not) all the while; each must equal the greedy reference."""
    from openai import OpenAI
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0,
                    timeout=60)
    try:
        while not stop.is_set():
            if counts[0] % 2 == 0:
                text = "".join(c.choices[0].text for c in client.completions.create(
                    model="qwen3", prompt=PROMPT, max_tokens=120, temperature=0, stream=True))
            else:
                text = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=120,
                                                 temperature=0).choices[0].text
            if text != ref:
                errors.append(f"good request {counts[0]}: {text!r} != {ref!r}")
            counts[0] += 1
    except Exception as e:  # noqa: BLE001
        errors.append(f"good request failed: {type(e).__name__}: {e}")
    finally:
        client.close()


def abrupt_close(sock):
    """Close with RST (SO_LINGER 0), like a killed client."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def disconnects(srv):
    """Clients that vanish; returns how many long requests they abandoned."""
    long_body = json.dumps({"model": "qwen3", "prompt": PROMPT, "max_tokens": 8000,
                            "temperature": 0, "stream": True})
    # 1. Mid-stream: read the first event, then reset the connection.
    for close in (abrupt_close, lambda s: s.close()):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall((f"POST {COMPLETIONS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(long_body)}\r\n\r\n{long_body}").encode())
        got = b""
        while b"data: " not in got:
            chunk = s.recv(4096)
            check(chunk, "the stream ended before its first event")
            got += chunk
        close(s)
    # 2. Not streamed: send, then reset without reading.
    body = long_body.replace('"stream": true', '"stream": false')
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall((f"POST {COMPLETIONS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    time.sleep(0.3)  # admitted and decoding
    abrupt_close(s)
    # 3. Gone while sending the body, and gone before sending anything.
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             f"Content-Length: 1000\r\n\r\n{{\"mod".encode())
    abrupt_close(s)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    abrupt_close(s)
    return 3


def main():
    with Server(DSPARK, M, "--draft", "ngram", "--max-context", str(MAX_CONTEXT),
                "--kv-memory", "64M") as srv:
        stop, errors, counts = threading.Event(), [], [0]
        ref = generate(DSPARK, M, PROMPT, 120, "--temperature", "0")["text"]
        good = threading.Thread(target=good_loop, args=(srv.port, ref, stop, errors, counts))
        good.start()
        wait_until(lambda: counts[0] >= 1 or errors, 30, "the first good request")
        n = 0
        for name, path, body, want in cases():
            status, headers, resp = post(path, body, srv.port)
            check(status == want, f"{name}: status {status}, want {want}: {resp[:300]!r}")
            if want >= 400:
                e = error_shape(status, headers, resp, name)
                check(e["type"] and not (500 <= status < 600), f"{name}: {e}")
            n += 1
        for name, data, want in raw_cases(srv.port):
            status, headers, resp = raw_http(srv.port, data)
            check(status == want, f"{name}: status {status}, want {want}: {resp[:300]!r}")
            if status >= 400:
                error_shape(status, headers, resp, name)
            n += 1
        abandoned = disconnects(srv)
        n += 5
        check(srv.alive(), "the server died during the bad-input suite")
        wait_until(lambda: srv.metrics().get(
            'dspark_requests_finished_total{reason="cancelled"}', 0) >= abandoned, 10,
            f"{abandoned} abandoned requests cancelled")
        stop.set()
        good.join(timeout=120)
        check(not errors, "; ".join(errors))
        check(counts[0] >= 2, f"only {counts[0]} good requests ran during the suite")
        wait_until(lambda: srv.metrics()["dspark_kv_pages_used"] == 0 and
                   srv.metrics()["dspark_live_rows"] == 0, 10, "KV pages back at idle")
        m = srv.metrics()
        check(not any(k.startswith("dspark_http_responses_total") and 'status="5' in k
                      for k in m), f"a 5xx was served: {m}")
        check(m["dspark_engine_step_failures_total"] == 0, "an engine step failed")
        check(m['dspark_requests_finished_total{reason="length"}'] >= counts[0],
              "good requests finished")
        # Still serving normally.
        r = srv.client().chat.completions.create(model="qwen3", max_tokens=4, temperature=0,
                                                 messages=[{"role": "user", "content": "hi"}])
        check(r.usage.completion_tokens == 4, f"after the suite: {r}")
        print(f"{n} bad-input cases, {counts[0]} concurrent good requests unaffected")
    print("PASS")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        fail(f"{type(e).__name__}: {e}")
