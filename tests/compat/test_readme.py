"""The README's tour, run as written: its `sh` blocks in order, then its `huggingface_hub` snippet, against a
scratch server that the tour starts itself (on the embedded store, as a new user has it). Only what a test must
change is changed: the binary's path, the data dir and the port (tests never take a fixed one). What the tour
deploys must end `running` and answer.

The installs reach the package registry; where it cannot be reached the test skips, saying so (in CI it fails).
The suite's PostgreSQL pass leaves the module out (see conftest.py): the tour runs on SQLite."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, _binary_path, skip_outside_ci

TOUR_TIMEOUT_S = 1500
REGISTRY_UNREACHABLE = 69

pytestmark = [pytest.mark.timeout(TOUR_TIMEOUT_S + 120)]


def tour() -> tuple[list[str], str]:
    """The tour's `sh` blocks and its one `python` block, from the README."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## A tour\n") : text.index("## Read on")]
    shell = re.findall(r"```sh\n(.*?)```", section, re.S)
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(shell) >= 5 and len(python) == 1, "the tour's blocks moved"
    return shell, python[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_written(text: str, binary: Path, data_dir: Path, port: int) -> str:
    """The README's text with this run's binary, data dir and port; the release build is the test's own build."""
    text = text.replace("cargo build --release\n", "")
    text = text.replace("target/release/switchyard", str(binary))
    text = text.replace("/tmp/sy", str(data_dir))
    return text.replace("127.0.0.1:8080", f"127.0.0.1:{port}").replace("localhost:8080", f"127.0.0.1:{port}")


def test_the_readme_tour_runs_as_written_and_what_it_deploys_answers():
    binary = _binary_path()
    work = Path(tempfile.mkdtemp(prefix="switchyard-tour-"))
    data_dir = work / "sy"
    port = free_port()
    shell, python = tour()
    snippet = work / "snippet.py"
    snippet.write_text(as_written(python, binary, data_dir, port))
    # One shell: the server the tour starts in the background serves the snippet too, and goes with the shell.
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
    script += "\n".join(as_written(block, binary, data_dir, port) for block in shell)
    script += f'\n"{sys.executable}" "{snippet}"\n'
    env = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_STORE_URL"}
    try:
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=TOUR_TIMEOUT_S, env=env, cwd=work
        )
        if done.returncode == REGISTRY_UNREACHABLE:
            skip_outside_ci("the package registry cannot be reached, so the tour's engines cannot be installed")
        said = f"stdout:\n{done.stdout}\nstderr (tail):\n{done.stderr[-4000:]}"
        assert done.returncode == 0, said
        lines = done.stdout.splitlines()
        assert "all-minilm-l6-v2-cpu-tei" in lines, said
        assert "384" in lines, said  # the curl embedding
        assert "chat" in lines, said
        reply = lines[lines.index("chat") + 1]
        assert reply.strip() and reply != "null", said  # SmolLM2 answered
        assert "cpu" in lines and not any(line == "gpu" for line in lines), said
        assert any(line.startswith("no compatible compute found for Qwen/Qwen2.5-7B-Instruct") for line in lines), said
        assert "paused" in lines and "pending" in lines, said
        # The snippet: the catalog recipe and the plain create (a hub image, on the built-in engine) both serve.
        assert "admin" in lines, said
        assert "embedder-py running 384" in lines, said
        assert "minilm-hub running 384" in lines, said
    finally:
        for name in ("minilm", "smollm"):
            subprocess.run(
                [str(binary), "engines", "remove", name, "--data-dir", str(data_dir)],
                capture_output=True,
                timeout=120,
                env=env,
            )
        shutil.rmtree(work, ignore_errors=True)
