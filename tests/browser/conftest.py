"""Fixtures for the browser tests: Playwright driving the system's Chromium against a real ASGI
server (daphne: HTTP and websockets) and a real ``runworker``, both subprocesses on the test
database.

Chromium comes from the operating system (Debian: ``apt-get install chromium``), never from a
download; ``WORKQUEUE_CHROMIUM`` names another binary. Without it the tests fail, naming the
fix: a browser test that silently skips proves nothing. Set ``WORKQUEUE_SKIP_BROWSER=1`` to
leave them out on purpose.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from tests.support.pgbouncer import ADMIN_ENV
from tests.support.processes import (
    REPO_ROOT,
    StartWorker,
    stop_started,
    worker_environment,
    worker_starter,
)
from tests.support.waiting import wait_until

CHROMIUM = os.environ.get("WORKQUEUE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = REPO_ROOT / "docs" / "images"
APP_NAME = "workqueue-browser-test"
PASSWORD = "browser-test-pw"  # a throwaway user of the test database


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("WORKQUEUE_SKIP_BROWSER"):
        skip = pytest.mark.skip(reason="WORKQUEUE_SKIP_BROWSER is set")
        for item in items:
            if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
                item.add_marker(skip)


@pytest.fixture
def server_env(transactional_db: None) -> Callable[..., dict[str, str]]:
    def build(**overrides: str) -> dict[str, str]:
        # PGAPPNAME names the subprocesses' PostgreSQL sessions, so teardown can wait for them.
        return worker_environment(connection.settings_dict, PGAPPNAME=APP_NAME, **overrides)

    return build


@pytest.fixture
def start_worker(
    server_env: Callable[..., dict[str, str]], tmp_path: Path
) -> Iterator[StartWorker]:
    start, started = worker_starter(server_env, tmp_path)
    yield start
    stop_started(started)


@pytest.fixture
def live_url(server_env: Callable[..., dict[str, str]], tmp_path: Path) -> Iterator[str]:
    """The address of a daphne server running ``testproject.asgi`` (HTTP and the websockets)
    on the test database (DEBUG on: it serves the static files, as runserver does)."""
    yield from _daphne(server_env, tmp_path, "testproject.asgi.application")


@pytest.fixture
def live_url_without_websockets(
    server_env: Callable[..., dict[str, str]], tmp_path: Path
) -> Iterator[str]:
    """The same server for a project whose ASGI application mounts no websocket route."""
    yield from _daphne(server_env, tmp_path, "tests.support.asgi_routes.http_only")


def _daphne(
    server_env: Callable[..., dict[str, str]], tmp_path: Path, application: str
) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "daphne.log").open("wb")
    module, _, name = application.rpartition(".")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), f"{module}:{name}"],
        cwd=REPO_ROOT, env=server_env(DEBUG="1", ASGI_APPLICATION=application),
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(
            lambda: process.poll() is not None or _listening(port), timeout=30,
            message=f"daphne listening on {port}",
        )  # fmt: skip
        assert process.poll() is None, (tmp_path / "daphne.log").read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(timeout=30)
        log.close()
        _wait_for_server_sessions_to_end()
        print("--- daphne:\n" + (tmp_path / "daphne.log").read_text(errors="replace"))


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The browser, one per test: Playwright's sync API runs an event loop in this thread
    while it lives, so Django's async-safety check is lifted for that time only (the test's
    own ORM calls between browser steps are plain synchronous code)."""
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install the system's (apt-get install chromium), set "
            "WORKQUEUE_CHROMIUM to its path, or WORKQUEUE_SKIP_BROWSER=1 to leave these tests out"
        )
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield browser
        # The ORM calls a test makes while Playwright's loop runs use a connection of their
        # own (the loop gives them another context): close it here, where it is reachable.
        connections.close_all()
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def screenshot(page_or_element: Any, name: str, tmp_path: Path, **options: Any) -> Path:
    """Take a screenshot; into ``docs/images`` (the README's pictures) when
    ``WORKQUEUE_UPDATE_SCREENSHOTS=1`` (``make screenshots``), else beside the test's files."""
    folder = SCREENSHOTS if os.environ.get("WORKQUEUE_UPDATE_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page_or_element.screenshot(path=str(path), **options)
    assert path.stat().st_size > 5_000, f"{name} is nearly empty"
    return path


def _wait_for_server_sessions_to_end() -> None:
    """A killed subprocess's PostgreSQL sessions end a moment after it: wait, so that the test
    database can be dropped. Through the test PgBouncer (tests/support/pgbouncer.py) the pooled
    server sessions stay, idle, with the last client's name, until the pooler is told to close
    them at the end of the run: there only a session still in a transaction is waited for."""
    if connection.vendor != "postgresql":
        return
    pooled = " AND state <> 'idle'" if os.environ.get(ADMIN_ENV) else ""

    def gone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                f"AND application_name = %s{pooled}",
                [APP_NAME],
            )
            return cursor.fetchone()[0] == 0

    wait_until(gone, timeout=10, interval=0.05, message="the server's sessions to end")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0
