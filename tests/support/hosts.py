"""Worker hosts simulated with Linux network namespaces, for the fleet tests (PostgreSQL).

Each ``SimulatedHost`` is a network namespace the test creates, joined to this machine by a veth
pair on its own /30; its ``runworker`` processes run inside it (``ip netns exec``) and reach the
database at the host-side address of the pair. PostgreSQL itself listens on 127.0.0.1 only, and
its configuration is not the tests' to change, so a small TCP relay (``Relay``) in the test
process listens on that host-side address and forwards to 127.0.0.1:5432.

What is real: every host has its own network stack (interfaces, routes, sockets, TCP state), its
own processes, and a real partition: ``cut()`` takes the link down, so packets are dropped, not
refused: the workers stay alive, their statements hang, and nothing reaches them until
``heal()``. What the hosts share: the kernel, the clock, the hostname and the file system (which
the chaos ledger relies on).

The relay plays the part of the database server's TCP stack: it sets on each connection from a
host the keepalive and user-timeout settings a production server gets from PostgreSQL's
``tcp_keepalives_idle`` / ``tcp_keepalives_interval`` / ``tcp_keepalives_count`` /
``tcp_user_timeout``, here a few seconds, so that a connection to a host that has gone silent is
closed and its backend ends, rolling back whatever transaction it had open (without them the
backend of a vanished host waits for it for hours, holding its locks).
"""

from __future__ import annotations

import ipaddress
import os
import random
import selectors
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.support.processes import RunworkerProcess, worker_environment

# How soon the relay gives up on a silent host: idle 1 s, then 2 probes 1 s apart; data left
# unacknowledged for 3 s (TCP_USER_TIMEOUT, in ms) ends the connection too.
KEEPALIVE = {"TCP_KEEPIDLE": 1, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 2, "TCP_USER_TIMEOUT": 3000}


class NamespacesUnavailable(RuntimeError):
    """This machine (or this user) cannot create network namespaces."""


def ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise RuntimeError(f"ip {' '.join(args)}: no `ip` command (install iproute2)") from None
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Relay:
    """A TCP relay from ``listen_host`` (an ephemeral port) to ``upstream``, on one thread."""

    def __init__(self, listen_host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server((listen_host, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"relay-{listen_host}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(10)
        for sock in list(self._peers):
            self._drop(sock)
        self._selector.close()
        self._listener.close()

    def _run(self) -> None:
        while not self._stopped.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                sock: Any = key.fileobj
                if sock is self._listener:
                    self._accept()
                elif sock in self._peers:
                    self._pump(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in KEEPALIVE.items():
            client.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            # A host whose buffers are full (partitioned) must not stall the other connections.
            sock.settimeout(5)
            self._peers[sock] = server if sock is client else client
            self._selector.register(sock, selectors.EVENT_READ)

    def _pump(self, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(65536)
            if data:
                peer.sendall(data)
                return
        except OSError:  # e.g. ETIMEDOUT: the keepalive probes went unanswered
            pass
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        peer = self._peers.pop(sock, None)
        for one in (sock, peer):
            if one is None:
                continue
            self._peers.pop(one, None)
            with suppress(KeyError, ValueError):
                self._selector.unregister(one)
            one.close()

    @property
    def connections(self) -> int:
        """Connections from the host that are still open (each is a pair of sockets)."""
        return len(self._peers) // 2


class SimulatedHost:
    """One host: a network namespace, its link to this machine, and its worker processes."""

    def __init__(
        self,
        name: str,
        token: str,
        index: int,
        subnet: ipaddress.IPv4Network,
        settings_dict: Mapping[str, Any],
        log_dir: Path,
    ) -> None:
        self.name = name
        self.namespace = f"wq-{token}-{name}"
        self.link = f"wq{token}{index}h"  # interface names: 15 characters at most
        peer = f"wq{token}{index}n"
        block = list(subnet.subnets(new_prefix=30))[index]
        self.host_side, self.inside = (str(address) for address in list(block.hosts())[:2])
        self.log_dir = log_dir
        self.workers: list[RunworkerProcess] = []
        self.relay: Relay | None = None
        try:
            ip("netns", "add", self.namespace)
        except RuntimeError as exc:
            raise NamespacesUnavailable(str(exc)) from exc
        ip("link", "add", self.link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", self.namespace)
        ip("addr", "add", f"{self.host_side}/30", "dev", self.link)
        ip("link", "set", self.link, "up")
        inside = ("netns", "exec", self.namespace, "ip")
        ip(*inside, "addr", "add", f"{self.inside}/30", "dev", peer)
        ip(*inside, "link", "set", peer, "up")
        ip(*inside, "link", "set", "lo", "up")
        upstream = settings_dict.get("HOST") or "127.0.0.1", settings_dict.get("PORT") or 5432
        self.relay = Relay(self.host_side, (upstream[0], int(upstream[1])))
        self.settings_dict = {**settings_dict, "HOST": self.host_side, "PORT": self.relay.port}

    def __repr__(self) -> str:
        return f"<host {self.name}: {self.namespace} {self.inside} -> {self.host_side}>"

    def start_worker(self, *args: str, name: str, **env: str) -> RunworkerProcess:
        """``manage.py runworker`` inside this host, connected through its link."""
        process = RunworkerProcess(
            name,
            args,
            worker_environment(self.settings_dict, **env),
            self.log_dir,
            prefix=("ip", "netns", "exec", self.namespace),
        )
        self.workers.append(process)
        return process

    def hosts(self, worker: RunworkerProcess) -> bool:
        """Whether ``worker`` runs inside this host's network namespace."""
        namespace = os.stat(f"/run/netns/{self.namespace}").st_ino
        return os.stat(f"/proc/{worker.pid}/ns/net").st_ino == namespace

    @property
    def worker_ids(self) -> set[str]:
        return {worker.worker_id for worker in self.workers}

    def cut(self) -> None:
        """Partition the host: its link goes down and every packet either way is dropped."""
        ip("link", "set", self.link, "down")

    def heal(self) -> None:
        ip("link", "set", self.link, "up")

    def kill(self) -> None:
        """SIGKILL every process of the host."""
        for worker in self.workers:
            if worker.alive:
                worker.send(signal.SIGKILL)
        for worker in self.workers:
            worker.wait()

    def destroy(self) -> None:
        """Kill the processes, delete the namespace (which deletes both ends of the veth pair)
        and stop the relay. Safe to call on a host half made."""
        self.kill()
        _delete(self.namespace, self.link)
        if self.relay is not None:
            self.relay.close()

    def describe(self) -> str:
        return "\n".join(worker.describe() for worker in self.workers)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0/13 that no interface of this machine is on."""
    try:
        taken = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise NamespacesUnavailable("no `ip` command (install iproute2)") from None
    for _ in range(100):
        second, third = random.randint(200, 207), random.randint(0, 255)
        subnet = ipaddress.ip_network(f"10.{second}.{third}.0/24")
        if f" {str(subnet.network_address)[:-1]}" not in taken:
            return subnet
    raise RuntimeError("no free 10.200.0.0/13 subnet for the simulated hosts")


@contextmanager
def simulated_hosts(settings_dict: Mapping[str, Any], log_dir: Path) -> Iterator[Any]:
    """Yield ``add(name) -> SimulatedHost``; every host is destroyed on the way out, even when
    the test failed, and the logs of its workers printed (pytest shows them on failure).

    ``add`` raises ``NamespacesUnavailable`` if a namespace cannot be made.
    """
    token = uuid.uuid4().hex[:6]  # unique names per run: a leftover never collides
    subnets: list[ipaddress.IPv4Network] = []
    hosts: list[SimulatedHost] = []

    def add(name: str) -> SimulatedHost:
        if not subnets:
            subnets.append(free_subnet())
        try:
            host = SimulatedHost(name, token, len(hosts), subnets[0], settings_dict, log_dir)
        except RuntimeError:
            _delete(f"wq-{token}-{name}", f"wq{token}{len(hosts)}h")
            raise
        hosts.append(host)
        return host

    try:
        yield add
    finally:
        for host in hosts:
            host.destroy()
        for host in hosts:
            print(host.describe())


def _delete(namespace: str, link: str) -> None:
    """Delete a namespace and the host side of its link, whichever exist (deleting the
    namespace deletes the veth pair)."""
    for args in (("netns", "del", namespace), ("link", "del", link)):
        with suppress(RuntimeError):
            ip(*args)
