"""The operator's ``manage.py workqueue`` command, below its argument parsing.

``selection`` turns filters into a job queryset, ``reports`` reads what the read-only
subcommands show as plain data (the ``--json`` output), ``tables`` renders that data for a
terminal with ``rich``, and ``actions`` carries out the mutations, each through
``django_workqueue.operations`` (the one implementation every surface calls), with dry runs and
a progress bar.
"""
