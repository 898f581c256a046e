"""A command run under a real pseudo-terminal of a given size, as an operator's shell runs it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import sys
import termios
from collections.abc import Mapping, Sequence

from tests.support.processes import MANAGE_PY, REPO_ROOT

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_in_terminal(args: Sequence[str], env: Mapping[str, str], columns: int) -> tuple[int, str]:
    """``manage.py <args>`` on a pseudo-terminal ``columns`` wide (TIOCSWINSZ and ``COLUMNS``):
    its exit status and what it showed, colours removed and line endings made ``\\n``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr are the terminal
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
            os.chdir(REPO_ROOT)
            os.execve(
                sys.executable, [sys.executable, str(MANAGE_PY), *args],
                {**env, "COLUMNS": str(columns), "TERM": "xterm-256color"},
            )  # fmt: skip
        finally:
            os._exit(127)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(fd)
    _, wait_status = os.waitpid(pid, 0)
    text = _ANSI.sub("", shown.decode()).replace("\r\n", "\n")
    return os.waitstatus_to_exitcode(wait_status), text
