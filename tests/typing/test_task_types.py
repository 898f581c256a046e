"""mypy checks ``enqueue()`` calls against the task function's parameters (``Task[P, R]``).

mypy runs on ``enqueue_calls.py``: each line ending in ``# error`` must be reported, and no
other line. Django and other installed packages are left out (``--no-site-packages``), so the
result does not depend on which stubs an environment has; it takes a few seconds. It runs in
a subprocess: mypy changes interpreter-wide state (it raises the recursion limit), which other
tests depend on.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).with_name("enqueue_calls.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_mypy_reports_exactly_the_calls_that_do_not_fit() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file=",  # not the project's: no Django plugin, only this file's errors
            "--no-site-packages",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--no-incremental",
            "--python-version=3.11",
            str(SAMPLE.relative_to(REPO_ROOT)),
        ],
        cwd=REPO_ROOT,  # mypy finds django_workqueue in its working directory
        capture_output=True,
        text=True,
        timeout=300,
    )
    stdout, stderr, status = completed.stdout, completed.stderr, completed.returncode
    assert stderr == ""
    reported = {
        int(line.split(":")[1])
        for line in stdout.splitlines()
        if re.match(r"tests/typing/enqueue_calls\.py:\d+: error:", line)
    }
    lines = SAMPLE.read_text().splitlines()
    expected = {number for number, line in enumerate(lines, 1) if line.endswith("# error")}
    assert len(expected) >= 10
    assert sorted(reported) == sorted(expected), stdout
    assert status == 1
