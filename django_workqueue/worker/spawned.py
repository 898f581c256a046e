"""The entry point of a process-pool child: ``python -m django_workqueue.worker.spawned JOBS_FD
CONTROL_FD WORKER_ID VERBOSITY WORKER_PID`` (started by ``processes.Child``).

It sets Django up from ``DJANGO_SETTINGS_MODULE`` before anything of the package that needs the
app registry is imported, then serves the jobs of the socket ``JOBS_FD``, hearing aborts on
``CONTROL_FD`` (``child.serve``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

import django

from .logs import configure_logging

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_worker(worker_pid: int) -> None:
    """Have the kernel SIGKILL this process when its worker dies (Linux).

    The child's reader thread also exits when the worker's socket closes, but only when it gets
    to run: a job stuck in C code that holds the interpreter lock would outlive its worker,
    running a job whose lease is lapsing. Elsewhere the socket is the only way.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != worker_pid:  # the worker died before the request took effect
        os._exit(0)


def main(argv: list[str]) -> None:
    # A Ctrl-C at the terminal is the worker's to handle (it drains); the child also runs in a
    # session of its own, so a terminal's signals do not reach it in the first place.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    jobs_fd, control_fd, worker_id = int(argv[0]), int(argv[1]), argv[2]
    verbosity, worker_pid = int(argv[3]), int(argv[4])
    die_with_worker(worker_pid)
    jobs, control = (socket.socket(fileno=fd) for fd in (jobs_fd, control_fd))
    django.setup()
    # Imported here: the child's modules import the models, which need django.setup() first.
    from ..discovery import import_urlconf
    from .child import serve
    from .wire import Channel

    configure_logging(verbosity)
    import_urlconf()  # the tasks its worker knows: the same imports at start
    serve(Channel(jobs), Channel(control), worker_id)


if __name__ == "__main__":
    main(sys.argv[1:])
