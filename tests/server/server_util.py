"""Helpers for the dspark serve tests: start a server on a free port, references from
`dspark generate`, raw HTTP over sockets, and /metrics parsing.

The tests run as `python3 tests/server/<name>_test.py <path-to-dspark> <repo-root>` (ctest label
cpu) with the Python of the test virtualenv (scripts/setup_python.sh: the `openai` package).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import openai  # noqa: F401  (the tests import it; fail early with a useful message)
except ImportError:
    print("FAIL: the 'openai' package is missing: run scripts/setup_python.sh and put its bin/ "
          "first on PATH (make test does)", file=sys.stderr)
    sys.exit(1)


def args():
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} <path-to-dspark> <repo-root>", file=sys.stderr)
        sys.exit(2)
    dspark, root = sys.argv[1], sys.argv[2]
    models = os.environ.get("DSPARK_TEST_MODELS", os.path.join(root, "tests/data/models"))
    return dspark, root, models


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


def run_test(main):
    """Runs a test's main(); any exception (a client error, a timeout) fails it with its message,
    then PASS."""
    try:
        main()
    except Exception as e:  # noqa: BLE001
        fail(f"{type(e).__name__}: {e}")
    print("PASS")


class Server:
    """`dspark serve -m MODEL --port 0 ARGS...`; the port is read from its first stdout line."""

    def __init__(self, dspark, model, *extra, env=None):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="dspark-serve-", suffix=".log",
                                               delete=False)
        cmd = [dspark, "serve", "-m", model, "--port", "0", *extra]
        self.cmd = " ".join(cmd)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if not m:
            self.proc.wait(timeout=30)
            fail(f"dspark serve did not start ({' '.join(cmd)}): {line!r} "
                 f"stderr: {self._stderr()}")
        self.host, self.port = "127.0.0.1", int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        self.banner = line
        self.clients = []

    def _stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def client(self, **kw):
        from openai import OpenAI
        kw.setdefault("api_key", "unused")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 60)
        client = OpenAI(base_url=self.url + "/v1", **kw)
        self.clients.append(client)
        return client

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.status, r.read().decode()

    def metrics(self):
        return parse_metrics(self.get("/metrics")[1])

    def stop(self):
        """SIGTERM; the server must exit 0 within a few seconds."""
        check(self.alive(), f"the server died (exit {self.proc.returncode}): {self._stderr()}")
        for c in self.clients:  # idle keep-alive connections would hold the shutdown up to 5 s
            c.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            fail(f"the server did not stop within 15 s of SIGTERM ({self.cmd}); its stderr:\n"
                 f"{self._stderr()[-4000:]}")
        check(rc == 0, f"the server exited {rc} after SIGTERM: {self._stderr()}")
        os.unlink(self.log.name)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.stop()
        elif self.alive():
            self.proc.kill()
            self.proc.wait()


def model_with_tools_template(model, directory, tools_part):
    """A copy of `model` in `directory` whose chat template starts with the Jinja `tools_part`
    (e.g. one that renders `tools`, which the fixtures' templates do not); returns its path."""
    copy = os.path.join(directory, os.path.basename(model))
    shutil.copytree(model, copy)
    path = os.path.join(copy, "tokenizer_config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["chat_template"] = tools_part + cfg["chat_template"]
    with open(path, "w") as f:
        json.dump(cfg, f)
    return copy


def parse_metrics(text):
    """Prometheus text -> {"name{labels}": value}; unlabelled names keep their plain key."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def generate(dspark, model, prompt, n, *extra):
    """The reference: `dspark generate --json` (plain decoding in its own code path)."""
    cmd = [dspark, "generate", "-m", model, "-p", prompt, "-n", str(n), "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, f"{' '.join(cmd)} failed: {out.stderr}")
    return json.loads(out.stdout.rstrip("\n").split("\n")[-1])


def raw_http(port, data, read=True, timeout=30):
    """Sends raw bytes on a fresh connection; returns (status, headers, body) of the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return None
        return read_response(s)


def read_response(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    check(lines and lines[0].startswith("HTTP/1.1 "), f"not an HTTP response: {buf[:200]!r}")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = rest
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(body) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        body = body[:n]
    elif headers.get("transfer-encoding") == "chunked":
        while not body.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        body = dechunk(body)
    return status, headers, body


def dechunk(data):
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        n = int(size_line, 16)
        if n == 0:
            break
        out += data[:n]
        data = data[n + 2:]
    return out


def post(path, body, port, headers=None, content_type="application/json"):
    """A raw POST (body: bytes or str) -> (status, headers, body bytes)."""
    if isinstance(body, str):
        body = body.encode()
    h = {"Host": "127.0.0.1", "Content-Type": content_type, "Content-Length": str(len(body)),
         "Connection": "close"}
    h.update(headers or {})
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return raw_http(port, head.encode() + body)


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    fail(f"timed out after {timeout} s waiting for {what}")
