"""Create and fill bench/.venv on first use, then run the harness inside it.

Standard library only: this runs under whatever interpreter started ``bench/run.py``. The venv
holds the peers (pinned in ``bench/requirements.txt``) and this project installed editable. A
stamp file records what was installed; when ``requirements.txt`` or ``pyproject.toml`` changes,
the next run installs again. Nothing is installed outside ``bench/.venv``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
VENV = BENCH_DIR / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".bench-installed"


def _wanted() -> str:
    digest = hashlib.sha256()
    for path in (BENCH_DIR / "requirements.txt", ROOT / "pyproject.toml"):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def inside_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def ensure_venv(*, force: bool = False) -> None:
    """Make bench/.venv hold what requirements.txt asks for (idempotent)."""
    wanted = _wanted()
    if not PYTHON.exists():
        print(f"bench: creating {VENV.relative_to(ROOT)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if force or not STAMP.exists() or STAMP.read_text() != wanted:
        print("bench: installing the peers and this project (editable) into the venv",
              file=sys.stderr)  # fmt: skip
        subprocess.run(
            [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(BENCH_DIR / "requirements.txt"), "-e", str(ROOT)],
            check=True,
        )  # fmt: skip
        STAMP.write_text(wanted)
    compile_project()


def compile_project() -> None:
    """Write this project's bytecode (``__pycache__``) before the run, as pip wrote the peers'
    when it installed them: an editable install has none, and where the environment sets
    ``PYTHONDONTWRITEBYTECODE`` every process the harness starts would compile the project's
    modules again at start-up (about 0.15 s of CPU per worker), a cost an installed wheel does
    not have. Sources unchanged since the last run are skipped; a stale file is replaced."""
    subprocess.run(
        [str(PYTHON), "-m", "compileall", "-q", "-j", "0", "-x", r"[/\\]\.venv[/\\]",
         *(str(ROOT / name) for name in ("django_workqueue", "testproject", "bench", "manage.py"))],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def reexec_in_venv(argv: list[str]) -> None:
    """Replace this process with ``bench/run.py argv`` under the venv's interpreter."""
    os.execv(str(PYTHON), [str(PYTHON), str(BENCH_DIR / "run.py"), *argv])
