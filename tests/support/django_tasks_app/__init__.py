"""An installed app (in ``tests.acceptance.settings_django_tasks``) whose ``tasks.py`` defines
``django.tasks`` tasks, as a Django 6 project's apps do."""
