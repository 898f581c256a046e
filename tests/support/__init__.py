"""What the test suites share, one module per concept.

- ``waiting``: wait on a condition (never a fixed sleep), and on a stopped worker's slot threads;
- ``factories``: job rows in any state, built directly (factory-boy);
- ``database``: the database's clock, rows read back, leases forced past their end, a LISTEN;
- ``settings``: a few ``WORKQUEUE`` keys overridden for one test;
- ``tasks``: tasks that exist only for tests (importing the module registers them);
- ``processes``: real ``manage.py runworker`` subprocesses on the test database.

Fixtures stay in the ``conftest.py`` files, where pytest finds them; they call what is here.
"""
