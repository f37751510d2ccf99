"""Schemathesis over every operation of the server's own OpenAPI document, as the instance administrator, against
the real binary on a scratch data dir. It fails on any 5xx, on a status code the document does not declare for the
operation, and on a content type or a body that does not match what the document says.

The examples, the coverage phase (boundaries of every parameter and field) and bounded fuzzing run with a fixed
seed, so a failure reproduces. One operation is left out: `GET /api/v1/notifications/stream` is a server-sent event
stream that never ends, which no request-and-answer check can judge (tests/compat/test_notifications.py drives
it). Long polls (`wait`, up to 30 s) get a request timeout longer than their longest hold.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))

from conftest import running_server  # noqa: E402

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_every_operation_answers_as_its_document_says():
    schemathesis = Path(sys.executable).parent / "schemathesis"
    # Its own files (a cache of what it found) go to a scratch dir, not the checkout.
    with running_server(own_store=True) as srv, tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                str(schemathesis),
                "run",
                f"{srv.url}/api/v1/openapi.json",
                "--header",
                f"Authorization: Bearer {srv.admin_token}",
                "--checks",
                CHECKS,
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                "5",
                "--seed",
                "20261206",
                "--workers",
                "2",
                "--request-timeout",
                "40",
                "--exclude-path",
                "/api/v1/notifications/stream",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=scratch,
        )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-12000:]
    assert "Tested:" in report, report[-4000:]
