"""Who a process on this host is, told apart from a later process that got its pid: the pid,
the kernel's boot and pid namespace, and the moment the process started (Linux's ``/proc``).

A worker records its own identity in its ``WorkerProcess`` row (SQLite's liveness, one host by
definition); the maintainer, on the same host and in the same pid namespace, reads it back and
knows at once whether that worker still runs. Where ``/proc`` is missing (not Linux) there is no
identity, and recovery waits for leases as before.

>>> token = own_token()          # "4026531836:5f1c…:123456", or None off Linux
>>> is_gone(12345, token)        # False while that process runs, True once it has exited
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if it is gone (a zombie
    has exited)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _scope() -> str | None:
    """This host's boot and this process's pid namespace: a pid means the same process only
    within both."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return None
    return f"{namespace}:{boot}"


_own: tuple[int, str | None] | None = None  # (pid, token): read once per process


def own_token() -> str | None:
    """This process's identity as a string (``WorkerProcess.liveness``), or None off Linux.

    Read from ``/proc`` once per process (a worker asks before every claim, and its boot,
    namespace and start time cannot change while it runs); a forked child reads its own."""
    global _own
    pid = os.getpid()
    if _own is None or _own[0] != pid:
        _own = (pid, token_of(pid))
    return _own[1]


def token_of(pid: int) -> str | None:
    """The identity of the process ``pid`` on this host now, or None (gone, or off Linux)."""
    scope, started = _scope(), _started(pid)
    if scope is None or started is None:
        return None
    return f"{scope}:{started}"


def is_gone(pid: int, token: str) -> bool | None:
    """Whether the process ``pid`` that recorded ``token`` has exited (its pid free, or taken by
    a later process); None when this process cannot tell (another boot or pid namespace, or no
    ``/proc``)."""
    scope, _, started = token.rpartition(":")
    if not scope or scope != _scope():
        return None
    return _started(pid) != int(started)
