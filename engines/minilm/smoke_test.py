#!/usr/bin/env python3
"""End-to-end check of the MiniLM engine: start serve.py, embed, compare meanings, stop it.

    python3 engines/minilm/smoke_test.py              # after engines/minilm/install
    python3 engines/minilm/smoke_test.py --bench 100  # also time 100 single-sentence embeds

Standard library only; serve.py runs under engines/minilm/.venv/bin/python (or --python).
Exits 0 when every check passes, 1 with a message otherwise. Every wait is bounded.
"""

import argparse
import http.client
import json
import math
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAT, KITTEN, REVENUE = "A cat sits on the mat", "A kitten is sitting on a rug", "Quarterly revenue rose 5%"


class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def expect(condition, message):
    if not condition:
        raise Failed(message)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def start(python, port, model_id):
    stderr = tempfile.TemporaryFile(mode="w+")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen([python, str(HERE / "serve.py"), "--port", str(port), "--model-id", model_id],
                            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
    return proc, lines, stderr


def wait_ready(proc, lines, port, timeout):
    """Polls /health until 200; returns (seconds, saw_503, listening line)."""
    t0 = time.monotonic()
    saw_503 = False
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise Failed(f"serve.py exited with code {proc.returncode} before it was healthy")
        try:
            status, _ = request(port, "GET", "/health", timeout=2)
            if status == 503:
                saw_503 = True
            elif status == 200:
                break
            else:
                raise Failed(f"GET /health answered {status}")
        except OSError:
            pass  # not listening yet
        time.sleep(0.05)
    else:
        raise Failed(f"not healthy within {timeout}s")
    ready = time.monotonic() - t0
    try:
        line = lines.get(timeout=10).strip()
    except queue.Empty:
        raise Failed("no 'listening' line on stdout within 10s of being healthy")
    expect(line == f"minilm engine listening on http://127.0.0.1:{port}", f"unexpected stdout line {line!r}")
    return ready, saw_503, line


def checks(port, model_id):
    # Two sentences that mean the same and one that does not, in one batch.
    status, body = request(port, "POST", "/embed", {"inputs": [CAT, KITTEN, REVENUE]})
    expect(status == 200, f"POST /embed answered {status}: {body[:300]}")
    vectors = json.loads(body)
    expect(isinstance(vectors, list) and len(vectors) == 3, "expected 3 embeddings")
    for v in vectors:
        expect(len(v) == 384, f"expected 384 dims, got {len(v)}")
        norm = math.sqrt(sum(x * x for x in v))
        expect(abs(norm - 1.0) < 1e-3, f"expected a unit vector, norm is {norm:.5f}")
    similar, unrelated = cosine(vectors[0], vectors[1]), cosine(vectors[0], vectors[2])
    expect(similar > unrelated + 0.2,
           f"cat/kitten cosine {similar:.3f} should beat cat/revenue {unrelated:.3f} clearly")

    # A single string gives a list of one embedding, the same as in the batch.
    status, body = request(port, "POST", "/embed", {"inputs": CAT})
    expect(status == 200, f"single POST /embed answered {status}")
    single = json.loads(body)
    expect(len(single) == 1 and cosine(single[0], vectors[0]) > 0.9999, "single and batch differ")

    # normalize=false gives the raw mean-pooled vector.
    status, body = request(port, "POST", "/embed", {"inputs": CAT, "normalize": False})
    raw_norm = math.sqrt(sum(x * x for x in json.loads(body)[0]))
    expect(status == 200 and abs(raw_norm - 1.0) > 0.01, f"normalize=false still gave norm {raw_norm:.4f}")

    # TEI's errors.
    long_text = "word " * 400
    for payload, want_status, want_type in [
        ({"inputs": long_text}, 413, "validation"),
        ({"inputs": []}, 400, "empty"),
        ({"inputs": ["x"] * 33}, 413, "validation"),
        ({"inputs": 42}, 422, "validation"),
        (b"{not json", 422, "validation"),
    ]:
        status, body = request(port, "POST", "/embed", payload)
        expect(status == want_status, f"{str(payload)[:40]} answered {status}, expected {want_status}")
        err = json.loads(body)
        expect(err.get("error_type") == want_type and err.get("error"), f"bad error body {body[:200]}")
    status, body = request(port, "POST", "/embed", {"inputs": long_text, "truncate": True})
    expect(status == 200 and len(json.loads(body)[0]) == 384, f"truncate=true answered {status}")

    status, body = request(port, "GET", "/info")
    info = json.loads(body)
    expect(status == 200 and info["model_id"] == model_id and info["max_input_length"] == 256,
           f"unexpected /info {body[:300]}")
    status, body = request(port, "GET", "/metrics")
    expect(status == 200 and 'te_request_count{method="batch"}' in body
           and 'te_request_failure{err="validation"}' in body, "te_request_* missing from /metrics")
    return similar, unrelated


def bench(port, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # one keep-alive connection
    body = json.dumps({"inputs": "The quick brown fox jumps over the lazy dog."}).encode()
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            times.append(time.perf_counter() - t0)
            expect(resp.status == 200, f"bench request answered {resp.status}")
    finally:
        conn.close()
    times.sort()
    return {"n": n, "p50_ms": 1000 * statistics.median(times), "p90_ms": 1000 * times[int(0.9 * (n - 1))],
            "mean_ms": 1000 * statistics.fmean(times), "max_ms": 1000 * times[-1]}


def stop(proc, timeout=15):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            raise Failed(f"serve.py did not stop within {timeout}s of SIGTERM")
    return proc.returncode


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=os.environ.get("MINILM_PYTHON", str(HERE / ".venv" / "bin" / "python")))
    p.add_argument("--bench", type=int, default=0, metavar="N", help="also time N single-sentence embeds")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for /health")
    args = p.parse_args()
    if not Path(args.python).exists():
        print(f"smoke test FAILED: {args.python} not found: run engines/minilm/install first", file=sys.stderr)
        return 1

    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    port = free_port()
    spawned = time.monotonic()
    proc, lines, stderr = start(args.python, port, model_id)
    try:
        ready, saw_503, _ = wait_ready(proc, lines, port, args.timeout)
        similar, unrelated = checks(port, model_id)
        result = bench(port, args.bench) if args.bench else None
        code = stop(proc)
        expect(code == 0, f"serve.py exited with code {code} after SIGTERM")
    except (Failed, OSError, ValueError, KeyError) as exc:
        stop_quietly(proc)
        stderr.seek(0)
        print(f"smoke test FAILED: {exc}\n--- serve.py stderr ---\n{stderr.read()[-4000:]}", file=sys.stderr)
        return 1
    stderr.seek(0)
    loaded = [l.strip() for l in stderr if "model loaded in" in l]
    print(f"healthy {ready:.2f}s after spawn (503 seen while loading: {saw_503}); "
          f"{loaded[0].split('minilm: ', 1)[-1] if loaded else ''}")
    print(f"cosine: cat/kitten {similar:.4f} > cat/revenue {unrelated:.4f}")
    if result:
        print("bench: {n} single-sentence POST /embed on one connection: p50 {p50_ms:.2f} ms, "
              "p90 {p90_ms:.2f} ms, mean {mean_ms:.2f} ms, max {max_ms:.2f} ms".format(**result))
    print(f"smoke test passed ({time.monotonic() - spawned:.1f}s)")
    return 0


def stop_quietly(proc):
    try:
        stop(proc, timeout=5)
    except Failed:
        pass


if __name__ == "__main__":
    sys.exit(main())
