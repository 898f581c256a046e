"""``python -m build`` makes an sdist and a wheel that hold everything the app needs at run
time (templates, static files, migrations, ``py.typed``), and the wheel, installed on its own,
runs the demo of a checkout on SQLite (what the README's "install from a checkout" promises
until the package is published)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.processes import REPO_ROOT

pytestmark = [
    pytest.mark.acceptance,
    # The build and the demo (SQLite, in a temporary directory) use no database server: they
    # run once, in the SQLite environments, not again beside each PostgreSQL suite.
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="needs no database server: runs in the SQLite environments",
    ),
]

# What the app reads from its own package at run time.
NEEDED = (
    "django_workqueue/py.typed",
    "django_workqueue/templates/admin/django_workqueue/job/change_form.html",
    "django_workqueue/templates/admin/django_workqueue/dashboard.html",
    "django_workqueue/static/django_workqueue/live-progress.js",
    "django_workqueue/static/django_workqueue/admin.css",
    "django_workqueue/migrations/0001_initial.py",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel of a copy of the checkout's tracked files (the build writes
    its egg-info beside the sources: not into the checkout)."""
    source = tmp_path_factory.mktemp("source")
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        if (REPO_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # python -m build makes the sdist, then the wheel from the sdist: the sdist is complete.
    return {"sdist": next(dist.glob("*.tar.gz")), "wheel": next(dist.glob("*.whl"))}


def test_the_wheel_holds_the_templates_static_files_migrations_and_py_typed(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())

    assert set(NEEDED) <= names
    assert not any(name.startswith(("tests/", "testproject/")) for name in names)


def test_the_sdist_holds_them_too(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}

    assert set(NEEDED) <= names
    assert {"pyproject.toml", "README.md"} <= names


def test_the_installed_wheel_runs_the_demo(built, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(built["wheel"])],
        check=True, timeout=120,
    )  # fmt: skip
    # The checkout's project without the app's sources: django_workqueue comes from the wheel.
    project = tmp_path / "project"
    shutil.copytree(REPO_ROOT / "testproject", project / "testproject")
    shutil.copy2(REPO_ROOT / "manage.py", project / "manage.py")
    env = {
        **os.environ, "PYTHONPATH": str(site), "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }  # fmt: skip
    where = subprocess.run(
        [sys.executable, "-c", "import django_workqueue; print(django_workqueue.__file__)"],
        cwd=project, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(site))

    demo = subprocess.run(
        [sys.executable, "manage.py", "demo", "--quick"],
        cwd=project, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip

    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "25 of 25 jobs finished" in demo.stdout
