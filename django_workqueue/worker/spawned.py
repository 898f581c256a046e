"""The entry point of a process-pool child: ``python -m django_workqueue.worker.spawned FD
WORKER_ID VERBOSITY`` (started by ``processes.Child``).

It sets Django up from ``DJANGO_SETTINGS_MODULE`` before anything of the package that needs the
app registry is imported, then serves jobs on the socket ``FD`` (``child.serve``).
"""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection


def main(argv: list[str]) -> None:
    # A Ctrl-C at the terminal is the worker's to handle (it drains); the child also runs in a
    # session of its own, so a terminal's signals do not reach it in the first place.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd, worker_id, verbosity = int(argv[0]), argv[1], int(argv[2])
    conn = Connection(fd)
    import django

    django.setup()
    from ..management.commands.runworker import configure_logging
    from .child import serve

    configure_logging(verbosity)
    serve(conn, worker_id)


if __name__ == "__main__":
    main(sys.argv[1:])
