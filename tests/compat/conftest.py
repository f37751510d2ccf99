"""Fixtures for the huggingface_hub compatibility suite.

The suite drives the real `huggingface_hub` client (pinned in requirements.txt) against a real `switchyard serve`
child process. The environment is fixed up *before* huggingface_hub is imported, because the client reads
HF_HOME, HF_ENDPOINT and the telemetry switches once, at import time.
"""

import atexit
import os
import shutil
import sys
import tempfile

# --- Environment: must run before the first `import huggingface_hub` -------------------------------------------------
if "huggingface_hub" in sys.modules:  # pragma: no cover - only a misconfigured run gets here
    raise RuntimeError("huggingface_hub was imported before tests/compat/conftest.py could set up its environment")

_HF_HOME = tempfile.mkdtemp(prefix="switchyard-compat-hfhome-")
atexit.register(shutil.rmtree, _HF_HOME, True)
# A token or endpoint from the developer's shell must never leak into the suite: tokens come only from the server
# under test. Telemetry stays enabled (unset) so the client performs its `GET /api/agent-harnesses` request, which
# the server answers with a 404 that the client must tolerate.
for _var in (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_ENDPOINT",
    "HF_INFERENCE_ENDPOINT",
    "HF_HUB_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
    "DISABLE_TELEMETRY",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    "HF_HUB_USER_AGENT_ORIGIN",
):
    os.environ.pop(_var, None)
os.environ["HF_HOME"] = _HF_HOME
# The catalog calls are flagged experimental by the client; the warning is noise in every run.
os.environ["HF_HUB_DISABLE_EXPERIMENTAL_WARNING"] = "1"
# The server listens on loopback: never route it through a proxy from the environment.
for _var in ("NO_PROXY", "no_proxy"):
    _current = os.environ.get(_var, "")
    os.environ[_var] = ",".join(filter(None, [_current, "127.0.0.1", "localhost"]))

# --- Imports (after the environment is fixed) ------------------------------------------------------------------------
import collections  # noqa: E402
import contextlib  # noqa: E402
import queue  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from huggingface_hub import HfApi, constants  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "switchyard"
STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 60.0
TEST_TIMEOUT_S = 120
LISTENING_RE = re.compile(r"listening on (http://\S+)")


def skip_outside_ci(reason: str, module: bool = False) -> None:
    """Skips (the test, or with `module` the whole module), saying why; in CI (`CI` set) fails instead: `.ci/run`
    provides everything the suite needs, so a test that cannot run there is broken, never passed by a skip."""
    if "CI" in os.environ:
        pytest.fail(f"CI runs every test, but: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module)


# A first run (test_engines.py, and the README's tour in test_readme.py) is on the embedded store, whatever the
# suite's store is: the suite's PostgreSQL pass leaves those modules out rather than run them again on SQLite (their
# installs take minutes) or skip them.
collect_ignore = ["test_engines.py", "test_readme.py"] if os.environ.get("SWITCHYARD_STORE_URL") else []


def pytest_collection_modifyitems(config, items):
    """Bound every test in time: the client's HTTP session has no timeout, so a hung server would hang the run."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@dataclass
class Server:
    """A running `switchyard serve` child process."""

    url: str
    data_dir: Path
    binary: Path
    admin_token: str
    process: subprocess.Popen
    output: collections.deque  # last stdout lines, for diagnostics
    stderr_path: Path
    # The environment the server runs in: the CLI opens the same store (an own store leaves out
    # SWITCHYARD_STORE_URL).
    env: dict | None = None

    def cli(self, *args: str) -> str:
        """Run `switchyard admin --data-dir DIR ARGS...` and return its stdout, stripped. Fails the test on error."""
        cmd = [str(self.binary), "admin", "--data-dir", str(self.data_dir), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=self.env)
        if proc.returncode != 0:
            pytest.fail(
                f"CLI failed ({proc.returncode}): {' '.join(cmd)}\nstdout: {proc.stdout}\nstderr: {proc.stderr}",
                pytrace=False,
            )
        return proc.stdout.strip()

    def create_user(self, name: str) -> str:
        """Create a user with the CLI and return a fresh bearer token for it."""
        self.cli("user", "create", name, "--email", f"{name}@example.test")
        return self.create_token(name)

    def create_token(self, user: str, *scopes: str) -> str:
        args = ["token", "create", user]
        for scope in scopes:
            args += ["--scope", scope]
        token = self.cli(*args)
        assert re.fullmatch(r"sy_[A-Za-z0-9_-]{43}", token), f"unexpected token format from `token create`: {token!r}"
        return token

    def diagnostics(self) -> str:
        try:
            stderr = self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError:
            stderr = "<unreadable>"
        return "stdout (last 25 lines):\n" + "\n".join(list(self.output)[-25:]) + "\nstderr (tail):\n" + stderr


def _binary_path() -> Path:
    return Path(os.environ.get("SWITCHYARD_BIN") or DEFAULT_BIN)


# --- The Docker provider: `SWITCHYARD_COMPAT_PROVIDER=docker` (scripts/test's third pass) ---------------------------
DOCKER = os.environ.get("SWITCHYARD_COMPAT_PROVIDER") == "docker"
_docker_image = None
_stub_hub = None


def _docker(*args: str) -> str:
    env = dict(os.environ, DOCKER_HOST=os.environ["SWITCHYARD_TEST_DOCKER_HOST"], DOCKER_BUILDKIT="0")
    done = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"docker {' '.join(args)}: {done.stderr}", pytrace=False)
    return done.stdout.strip()


def docker_engine_image(engine: Path) -> str:
    """The test engine as an image on the test's Docker Engine (its binary and libraries on scratch), built once."""
    global _docker_image
    if _docker_image is None:
        if not os.environ.get("SWITCHYARD_TEST_DOCKER_HOST"):
            pytest.fail("SWITCHYARD_COMPAT_PROVIDER=docker needs SWITCHYARD_TEST_DOCKER_HOST (scripts/docker)", pytrace=False)
        context = Path(tempfile.mkdtemp(prefix="switchyard-compat-image-"))
        shutil.copy(engine, context / "engine")
        libs = subprocess.run(["ldd", str(engine)], capture_output=True, text=True).stdout.split()
        for lib in (w for w in libs if w.startswith("/")):
            target = context / lib.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(lib, target)
        (context / "Dockerfile").write_text('FROM scratch\nCOPY . /\nENTRYPOINT ["/engine", "--host", "0.0.0.0"]\n')
        _docker_image = f"switchyard-compat/test-engine:{uuid.uuid4().hex[:8]}"
        _docker("build", "-q", "-t", _docker_image, str(context))
        shutil.rmtree(context, ignore_errors=True)
    return _docker_image


class _StubHub(threading.Thread):
    """The hub's file API on loopback, every repository at every revision empty: the replicas' `/repository`."""

    def __init__(self):
        import http.server
        import json

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"sha": "0" * 40, "siblings": []}).encode()
                self.send_response(200 if self.path.startswith("/api/models/") else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(daemon=True)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def run(self):
        self.httpd.serve_forever()


def docker_config(data_dir: Path) -> str:
    """The `[runtime]` lines and sections that put a server's replicas on the test's Docker Engine."""
    global _stub_hub
    if _stub_hub is None:
        _stub_hub = _StubHub()
        _stub_hub.start()
    network = f"switchyard-compat-{uuid.uuid4().hex[:8]}"
    return (
        'provider = "docker"\n\n'
        f'[runtime.docker]\nhost = "{os.environ["SWITCHYARD_TEST_DOCKER_HOST"]}"\nnetwork = "{network}"\n'
        "stop_on_shutdown = true\n\n"
        f'[models]\nhub_url = "{_stub_hub.url}"\n\n[outbound]\nallow = ["127.0.0.0/8"]\n\n'
    )


def _drain(stream, lines: "queue.Queue[str | None]", tail: collections.deque) -> None:
    """Read the child's stdout until EOF so the pipe never fills; hand every line to the waiting fixture."""
    for line in iter(stream.readline, ""):
        tail.append(line.rstrip("\n"))
        lines.put(line)
    lines.put(None)


@contextlib.contextmanager
def running_server(extra_config: str = "", own_store: bool = False, test_engine: bool = True):
    """Start `switchyard serve` on loopback with the suite's config plus `extra_config` (TOML appended to it);
    yield it as a `Server`, stop it and remove its data on exit. `own_store`: the embedded store in its data dir
    even when SWITCHYARD_STORE_URL names a shared database (a second server must not share the first one's).
    `test_engine=False`: no configured launchers, as on a first run (engines come from `switchyard engines`)."""
    binary = _binary_path()
    env = dict(os.environ)
    if own_store:
        env.pop("SWITCHYARD_STORE_URL", None)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        pytest.fail(f"switchyard binary not found at {binary} (build it, or set SWITCHYARD_BIN)", pytrace=False)

    data_dir = Path(tempfile.mkdtemp(prefix="switchyard-compat-data-"))
    stderr_path = data_dir.parent / (data_dir.name + ".stderr.log")
    stderr_file = open(stderr_path, "w")
    # Endpoints really run: the managed and TEI images start the workspace's test engine (a tiny TEI-shaped
    # server), so `wait()` and inference go through the real runtime and proxy.
    engine = binary.parent / "switchyard-test-engine"
    if not engine.is_file():
        pytest.fail(f"test engine not found at {engine} (cargo build --workspace)", pytrace=False)
    config_path = data_dir.parent / (data_dir.name + ".toml")
    launcher = f'command = ["{engine}", "--port", "{{port}}"]\nhealth_route = "/health"\n'
    provider = ""
    if DOCKER:
        # Replicas are containers of the test engine's image: what the managed and TEI images run here.
        launcher = f'image = "{docker_engine_image(engine)}"\nhealth_route = "/health"\n'
        provider = docker_config(data_dir)
    launchers = f"[runtime.launchers.hub]\n{launcher}\n[runtime.launchers.tei]\n{launcher}\n" if test_engine else ""
    # The suite's server offers every kind of compute (its replicas are the test engine), so that deploys of
    # every recipe are checked here; a first run (`test_engine=False`) has what the machine has.
    accelerators = 'accelerators = ["cpu", "gpu", "neuron"]\n' if test_engine else ""
    config_path.write_text(
        f"[runtime]\ntick_ms = 200\nstop_grace_ms = 2000\n{accelerators}{provider}\n{launchers}{extra_config}"
    )
    process = subprocess.Popen(
        [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--config", str(config_path)],
        stdin=subprocess.DEVNULL,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        text=True,
        bufsize=1,
    )
    lines: "queue.Queue[str | None]" = queue.Queue()
    tail: collections.deque = collections.deque(maxlen=200)
    threading.Thread(target=_drain, args=(process.stdout, lines, tail), daemon=True).start()

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        stderr_file.close()

    url = None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:  # EOF: the server exited
                break
            match = LISTENING_RE.search(line)
            if match:
                url = match.group(1).rstrip("/")
    except BaseException:
        stop()
        raise
    if url is None:
        stop()
        pytest.fail(
            f"`switchyard serve` did not print 'listening on http://...' within {STARTUP_TIMEOUT_S:.0f}s "
            f"(exit code {process.returncode}).\n" + "\n".join(tail) + "\n" + stderr_path.read_text(errors="replace"),
            pytrace=False,
        )

    token_file = data_dir / "admin-token"
    # The token is written on first start, before the server listens; allow a short grace period anyway.
    for _ in range(50):
        if token_file.is_file() and token_file.read_text().strip():
            break
        time.sleep(0.1)
    if not token_file.is_file():
        stop()
        pytest.fail(f"{token_file} was not written by the first `serve`", pytrace=False)
    admin_token = token_file.read_text().strip()

    srv = Server(
        url=url,
        data_dir=data_dir,
        binary=binary,
        admin_token=admin_token,
        process=process,
        output=tail,
        stderr_path=stderr_path,
        env=env,
    )
    try:
        yield srv
    finally:
        stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        stderr_path.unlink(missing_ok=True)
        config_path.unlink(missing_ok=True)


@contextlib.contextmanager
def client_pointed_at(srv: Server):
    """Points the client's endpoint constants at `srv` for the block, and puts back what they were."""
    saved = (constants.ENDPOINT, constants.INFERENCE_ENDPOINTS_ENDPOINT, constants.INFERENCE_CATALOG_ENDPOINT)
    constants.ENDPOINT = srv.url
    constants.INFERENCE_ENDPOINTS_ENDPOINT = srv.url + "/v2"
    constants.INFERENCE_CATALOG_ENDPOINT = srv.url + "/api/v1/catalog"
    try:
        yield srv
    finally:
        constants.ENDPOINT, constants.INFERENCE_ENDPOINTS_ENDPOINT, constants.INFERENCE_CATALOG_ENDPOINT = saved


@pytest.fixture(scope="session")
def server():
    with running_server() as srv:
        # Point the real client at the server. The two Inference Endpoints bases are read at call time; ENDPOINT (used
        # by the agent-harnesses registry fetch) is also read at call time, so the telemetry request reaches it.
        constants.ENDPOINT = srv.url
        constants.INFERENCE_ENDPOINTS_ENDPOINT = srv.url + "/v2"
        constants.INFERENCE_CATALOG_ENDPOINT = srv.url + "/api/v1/catalog"
        yield srv


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the server's recent output to the report: most failures here are read from its logs."""
    report = yield
    if report.failed and call.when == "call":
        srv = item.funcargs.get("server") if hasattr(item, "funcargs") else None
        if srv is not None:
            report.sections.append(("switchyard server output", srv.diagnostics()))
    return report


@pytest.fixture(scope="session")
def admin_token(server) -> str:
    return server.admin_token


@pytest.fixture(scope="session")
def api(server) -> HfApi:
    """The client as the instance admin (namespace `admin`)."""
    return HfApi(endpoint=server.url, token=server.admin_token)


def make_api(server: Server, token: str) -> HfApi:
    return HfApi(endpoint=server.url, token=token)


@dataclass
class Accounts:
    """Users, an org and tokens made with the real CLI, shared by the access tests."""

    org: str
    writer: str  # `write` member of org
    writer_token: str
    reader: str  # `read` member of org
    reader_token: str
    admin_read_scoped_token: str  # admin token limited to --scope read-endpoints


@pytest.fixture(scope="session")
def accounts(server) -> Accounts:
    suffix = uuid.uuid4().hex[:6]
    org, writer, reader = f"acme-{suffix}", f"bob-{suffix}", f"carol-{suffix}"
    writer_token = server.create_user(writer)
    reader_token = server.create_user(reader)
    server.cli("org", "create", org)
    server.cli("org", "add-member", org, writer, "--role", "write")
    server.cli("org", "add-member", org, reader, "--role", "read")
    scoped = server.create_token("admin", "read-endpoints")
    return Accounts(
        org=org,
        writer=writer,
        writer_token=writer_token,
        reader=reader,
        reader_token=reader_token,
        admin_read_scoped_token=scoped,
    )


def unique_name(prefix: str) -> str:
    """An endpoint name valid for the service: [a-z0-9-], at most 32 characters, unique within the run."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert len(name) <= 32, name
    return name


@pytest.fixture(scope="session")
def catalog(api):
    """The unfiltered catalog, as the client parses it."""
    return api.list_inference_catalog()


@pytest.fixture(scope="session")
def cpu_hardware(api):
    """An available CPU compute from the server's own hardware list, used for every plain `create`."""
    hardware = api.list_inference_endpoints_hardware()
    cpus = [hw for hw in hardware if hw.accelerator == "cpu" and hw.status == "available"]
    if not cpus:
        pytest.fail("the hardware list has no available cpu compute to create endpoints on", pytrace=False)
    # Smallest first so the choice is deterministic and cheap.
    cpus.sort(key=lambda hw: (hw.num_accelerators, hw.memory_gb, hw.id))
    return cpus[0]


@pytest.fixture
def cleanup(api):
    """Register endpoints to delete after the test, so quotas and listings stay small. Deletion errors are ignored."""
    created: list[tuple[HfApi, str, str]] = []

    def register(endpoint, client: HfApi | None = None):
        created.append((client or api, endpoint.name, endpoint.namespace))
        return endpoint

    yield register
    for client, name, namespace in reversed(created):
        try:
            client.delete_inference_endpoint(name, namespace=namespace)
        except Exception:  # already deleted by the test, or the server is gone: nothing to clean
            pass


TEST_REPOSITORY = "openai-community/gpt2"
# A new or resumed endpoint answers `pending`; by the next read the runtime may already be starting or running it.
STARTING = ("pending", "initializing", "running")


def create_endpoint(client: HfApi, hardware, name: str, **kwargs):
    """`HfApi.create_inference_endpoint` on the given hardware entry, with test defaults that kwargs override."""
    params = dict(
        repository=TEST_REPOSITORY,
        framework="pytorch",
        task="text-generation",
        accelerator=hardware.accelerator,
        instance_size=hardware.instance_size,
        instance_type=hardware.instance_type,
        region=hardware.region,
        vendor=hardware.vendor,
    )
    params.update(kwargs)
    return client.create_inference_endpoint(name, **params)
