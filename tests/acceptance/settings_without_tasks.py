"""The test project without the apps that define tasks: a worker here has nothing to run."""

from testproject.settings import *  # noqa: F403

INSTALLED_APPS = [app for app in INSTALLED_APPS if not app.startswith("testproject.")]  # noqa: F405
# The project's URLs reach the demo's views and through them its tasks: none here.
ROOT_URLCONF = "tests.acceptance.urls_without_tasks"
