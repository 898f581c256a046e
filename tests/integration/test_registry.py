"""``@task``: options, names, context and async detection, validation, and autodiscovery."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from django.conf import settings
from django.core import checks
from django.test import override_settings

from django_workqueue import Task, discovery, registry, task
from django_workqueue.checks import check_task_imports
from django_workqueue.exceptions import InvalidOption, TaskNotRegistered
from django_workqueue.registry import MAX_ATTEMPTS, EnqueueOptions
from testproject.testapp import tasks as testapp_tasks


@pytest.fixture(autouse=True)
def restore_registry():
    """Tasks defined by a test are removed again, so the registry stays as autodiscovery left it."""
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def test_task_records_its_options():
    def backoff(attempt):
        return 1.0

    def classify(exc):
        return "discard"

    @task(
        name="h1.options",
        queue="mail",
        priority=7,
        max_attempts=9,
        lease_seconds=120,
        timeout=5.5,
        backoff=backoff,
        atomic=True,
        on_failure=classify,
    )
    def send(to):
        return to

    assert isinstance(send, Task)
    spec = send.spec
    assert (spec.name, spec.queue, spec.priority) == ("h1.options", "mail", 7)
    assert (spec.max_attempts, spec.lease_seconds, spec.timeout) == (9, 120, 5.5)
    assert spec.backoff is backoff
    assert spec.on_failure is classify
    assert spec.atomic is True
    assert send.name == "h1.options"
    assert registry.get_task("h1.options") is send


@override_settings(
    WORKQUEUE={
        "QUEUES": ["default", "bulk"],
        "DEFAULT_QUEUE": "bulk",
        "DEFAULT_PRIORITY": -3,
        "DEFAULT_MAX_ATTEMPTS": 11,
        "DEFAULT_LEASE_SECONDS": 45,
    }
)
def test_options_left_out_come_from_the_settings():
    @task
    def plain():
        pass

    spec = plain.spec
    assert (spec.queue, spec.priority, spec.max_attempts, spec.lease_seconds) == (
        "bulk", -3, 11, 45,
    )  # fmt: skip
    assert (spec.timeout, spec.backoff, spec.atomic, spec.on_failure) == (None, None, False, None)


def test_default_settings_give_the_documented_defaults():
    @task()
    def plain():
        pass

    spec = plain.spec
    assert (spec.queue, spec.priority, spec.max_attempts, spec.lease_seconds) == (
        "default", 0, 3, 60,
    )  # fmt: skip


def test_explicit_zero_priority_is_kept():
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "DEFAULT_PRIORITY": 9}):

        @task(priority=0)
        def zero():
            pass

    assert zero.spec.priority == 0


def test_name_defaults_to_the_dotted_path_of_the_function():
    @task
    def local_task():
        pass

    expected = (
        f"{__name__}.test_name_defaults_to_the_dotted_path_of_the_function.<locals>.local_task"
    )
    assert local_task.name == expected
    assert registry.get_task(expected) is local_task


def test_testapp_task_names_are_their_dotted_paths():
    assert testapp_tasks.add.name == "testproject.testapp.tasks.add"
    assert testapp_tasks.send_mail.spec.queue == "mail"
    assert testapp_tasks.send_mail.spec.priority == 5


def test_bare_and_called_decorator_both_register_and_the_task_stays_callable():
    @task
    def bare(a, b):
        return a + b

    @task()
    def called(a, b):
        return a * b

    assert isinstance(bare, Task)
    assert isinstance(called, Task)
    assert bare(2, 3) == 5
    assert called(2, b=3) == 6
    assert repr(bare) == f"<Task {bare.name}>"


def test_context_as_first_parameter_is_detected():
    @task
    def with_context(context, a):
        pass

    @task
    def context_later(a, context):
        pass

    @task
    def no_params():
        pass

    @task
    def ctx_named_otherwise(ctx, a):
        pass

    assert with_context.spec.takes_context is True
    assert context_later.spec.takes_context is False
    assert no_params.spec.takes_context is False
    assert ctx_named_otherwise.spec.takes_context is False


def test_async_functions_are_detected():
    @task
    async def fetch(url):
        return url

    @task
    def sync(url):
        return url

    assert fetch.spec.is_async is True
    assert sync.spec.is_async is False
    assert testapp_tasks.async_add.spec.is_async is True


def test_atomic_async_task_is_rejected_and_not_registered():
    with pytest.raises(InvalidOption, match="atomic=True needs a sync function") as raised:

        @task(name="h1.atomic_async", atomic=True)
        async def bad():
            pass

    assert "make it a plain def" in str(raised.value)
    assert "h1.atomic_async" not in registry.registered_tasks()


def test_atomic_sync_task_is_accepted():
    @task(atomic=True)
    def good():
        pass

    assert good.spec.atomic is True


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be from 1 to 1,000,000, got 0"),
        ({"max_attempts": -2}, "max_attempts must be from 1 to 1,000,000, got -2"),
        # Snoozes, releases and redrives add to max_attempts: a budget near PostgreSQL's integer
        # limit would make those writes fail (a snoozed job would be dead-lettered).
        (
            {"max_attempts": MAX_ATTEMPTS + 1},
            "max_attempts must be from 1 to 1,000,000, got 1000001",
        ),
        ({"lease_seconds": 0}, "lease_seconds must be at least 1"),
        ({"timeout": 0}, "timeout must be a positive number of seconds"),
        ({"timeout": -1.5}, "timeout must be a positive number of seconds"),
        ({"hard_timeout": 0}, r"hard_timeout must be a positive number of seconds .*got 0"),
        ({"hard_timeout": "60"}, r"hard_timeout must be a positive number .*got '60'"),
        ({"hard_timeout": True}, r"hard_timeout must be a positive number .*got True"),
        (
            {"hard_timeout": 30, "timeout": 30},
            r"hard_timeout \(30s\) must be longer than timeout \(30s\)",
        ),
        (
            {"hard_timeout": 30, "batch_size": 10},
            "hard_timeout does not apply to batch tasks",
        ),
    ],
)
def test_bad_options_are_rejected_and_not_registered(options, message):
    with pytest.raises(InvalidOption, match=f"task h1.bad: {message}"):

        @task(name="h1.bad", **options)
        def bad():
            pass

    with pytest.raises(TaskNotRegistered):
        registry.get_task("h1.bad")


def test_a_name_taken_by_another_function_is_rejected():
    @task(name="h1.shared")
    def first():
        pass

    with pytest.raises(InvalidOption) as raised:

        @task(name="h1.shared")
        def second():
            pass

    assert str(raised.value) == (
        "task name 'h1.shared' is already registered by another function; "
        "pass name= to @task to tell them apart"
    )
    assert registry.get_task("h1.shared") is first


def test_registering_the_same_function_again_is_allowed():
    def job():
        pass

    first = task(name="h1.again")(job)
    second = task(name="h1.again")(job)
    assert registry.get_task("h1.again") is second
    assert first.spec.func is second.spec.func is job


def test_a_reimported_module_may_register_its_task_again():
    # A module imported twice (reload, autoreloader) makes a new function object with the same
    # module and qualname: that is the same task, not a clash.
    def make():
        def twice():
            pass

        return twice

    first = task(name="h1.reloaded")(make())
    second = task(name="h1.reloaded")(make())
    assert first.spec.func is not second.spec.func
    assert registry.get_task("h1.reloaded") is second


def test_using_returns_a_new_task_with_overrides_and_leaves_the_original_alone():
    add = testapp_tasks.add
    custom = add.using(queue="mail", priority=5)
    more = custom.using(delay=30, unique_key="k")
    assert add.options == EnqueueOptions()
    assert custom.options == EnqueueOptions(queue="mail", priority=5)
    assert more.options == EnqueueOptions(queue="mail", priority=5, delay=30, unique_key="k")
    assert more.spec is add.spec
    assert more(1, 2) == 3


def test_using_with_an_unknown_option_names_it_and_lists_the_options():
    with pytest.raises(InvalidOption) as raised:
        testapp_tasks.add.using(prio=5, queue="mail", countdown=3)
    assert str(raised.value) == (
        "testproject.testapp.tasks.add.using() got unknown option(s) countdown, prio; the options "
        "are deadline, delay, depends_on, lease_seconds, max_attempts, on_conflict, priority, "
        "queue, run_at, run_if, skip_queue, unique_for, unique_key"
    )


def test_get_task_of_an_unknown_name_says_how_to_register_it():
    with pytest.raises(TaskNotRegistered) as raised:
        registry.get_task("billing.tasks.nope")
    message = str(raised.value)
    assert "no task is registered as 'billing.tasks.nope'" in message
    assert "WORKQUEUE['TASK_MODULES']" in message


def test_django_setup_alone_registers_the_installed_apps_tasks():
    # In a fresh interpreter nothing imports the tasks modules but the app's ready().
    script = (
        "import sys, django; django.setup(); "
        "from django_workqueue.registry import registered_tasks; "
        "loaded = 'testproject.testapp.tasks' in sys.modules; "
        "print(loaded, sorted(n for n in registered_tasks() if n.endswith(('.add', '.record'))))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "True ['testproject.testapp.tasks.add', 'testproject.testapp.tasks.record']"
    )


def test_installed_apps_tasks_modules_are_autodiscovered():
    registered = registry.registered_tasks()
    for name in ("add", "send_mail", "record", "async_add", "atomic_effect", "progress"):
        dotted = f"testproject.testapp.tasks.{name}"
        assert registered[dotted] is getattr(testapp_tasks, name)
    assert registry.get_task("testproject.testapp.tasks.add")(2, 3) == 5


def test_registered_tasks_is_a_copy():
    registry.registered_tasks().clear()
    assert "testproject.testapp.tasks.add" in registry.registered_tasks()


# --- discover_tasks with a broken module ---------------------------------------------------------


@pytest.fixture
def task_modules(tmp_path, monkeypatch):
    """A package on sys.path with one module that fails to import and one that works."""
    package = tmp_path / "h1_taskmods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text('raise RuntimeError("settings.API_KEY is missing")\n')
    (package / "working.py").write_text(
        textwrap.dedent(
            """
            from django_workqueue import task

            @task(name="h1.working.ping")
            def ping():
                return "pong"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "h1_taskmods"
    for name in [m for m in sys.modules if m == "h1_taskmods" or m.startswith("h1_taskmods.")]:
        del sys.modules[name]
    for name in [m for m in discovery.import_errors if m.startswith("h1_taskmods")]:
        del discovery.import_errors[name]


def test_a_broken_task_module_is_reported_once_and_the_others_still_load(task_modules, caplog):
    broken, working = f"{task_modules}.broken", f"{task_modules}.working"
    assert broken not in discovery.import_errors
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "TASK_MODULES": [broken, working]}):
        with caplog.at_level(logging.ERROR, logger="django_workqueue"):
            discovery.discover_tasks()
            discovery.discover_tasks()  # a second discovery (a reload) does not log again

        assert discovery.import_errors[broken] == "RuntimeError: settings.API_KEY is missing"
        assert registry.get_task("h1.working.ping")() == "pong"
        assert "testproject.testapp.tasks.add" in registry.registered_tasks()
        logged = [r for r in caplog.records if broken in r.getMessage()]
        assert len(logged) == 1
        assert "could not import task module" in logged[0].getMessage()

        warnings = check_task_imports()
        assert [w.id for w in warnings] == ["django_workqueue.W006"]
        assert isinstance(warnings[0], checks.Warning)
        assert warnings[0].msg == (
            f"Task module {broken} failed to import (RuntimeError: settings.API_KEY is missing); "
            f"its tasks cannot run."
        )
        all_messages = checks.run_checks()
        assert [m.id for m in all_messages if m.id == "django_workqueue.W006"] == [
            "django_workqueue.W006"
        ]


def test_without_import_errors_the_task_import_check_is_silent():
    assert discovery.import_errors == {}
    assert check_task_imports() == []


def _fits(signature, args):
    try:
        signature.bind(*args)
    except TypeError:
        return False
    return True


def test_the_arity_shortcut_agrees_with_binding_the_signature():
    """``check_arguments`` skips ``Signature.bind`` for calls without keywords whose count of
    positional arguments fits: it must accept exactly the calls that bind."""

    def plain(a, b): ...
    def defaults(a, b=1, c=2): ...
    def star(a, *rest): ...
    def keyword_default(a, *, k=1): ...
    def keyword_required(a, *, k): ...
    def positional_only(a, /, b=1): ...
    def nothing(): ...
    def with_context(context, a, b=1): ...

    for fn in [plain, defaults, star, keyword_default, keyword_required, positional_only,
               nothing, with_context]:  # fmt: skip
        spec = task(name=f"arity.{fn.__name__}")(fn).spec
        for count in range(5):
            args = list(range(count))
            try:
                spec.check_arguments(args, {})
            except TypeError:
                accepted = False
            else:
                accepted = True
            assert accepted == _fits(spec.signature, args), (fn.__name__, count)


def test_a_task_is_closed_to_the_http_api_unless_it_opts_in():
    @task(name="h1.closed")
    def closed():
        return None

    @task(name="h1.open", api=True)
    def opened():
        return None

    assert (closed.spec.api, opened.spec.api) == (False, True)
    with pytest.raises(InvalidOption, match="api must be True or False, got 'yes'"):
        task(name="h1.bad", api="yes")(lambda: None)


def test_a_hard_timeout_longer_than_the_timeout_is_kept_on_the_spec():
    @task(name="h1.hard", timeout=10, hard_timeout=12.5)
    def hard():
        pass

    assert registry.get_task("h1.hard").spec.hard_timeout == 12.5
