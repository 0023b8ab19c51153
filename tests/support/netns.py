"""Other hosts on this machine: network namespaces, veth pairs and a TCP forwarder.

:class:`Hosts` makes one network namespace per "host" (``ip netns add``),
joined to the root namespace by a veth pair on a /30 of its own in
``10.231.X.0/24`` (X from the test's pid, skipping a /24 the machine already
uses). Inside a namespace only its veth and its own loopback exist: the
machine's PostgreSQL, Redis and RabbitMQ, which listen on 127.0.0.1, are
unreachable there, so a process that relied on 127.0.0.1 would fail.

What a host may reach is what :class:`Forwarder` offers: a listener bound
to the root side of that host's veth (``10.231.X.4i+1``) that pipes each
connection to the service on 127.0.0.1 (PostgreSQL listens on loopback only
and is not restarted for a test). Everything stays inside this machine; the
namespaces, veths and listeners are removed at exit, on failure too.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

#: The private range the tests use: nothing else on the machine is expected there.
NET = "10.231"
#: Bounds: /24s tried for a free one, bytes per read of a forwarded stream.
TRIES = 50
CHUNK = 65536


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Host:
    """One namespace: its name, and the two ends of its veth."""

    netns: str
    #: The root namespace's address on this host's link (where its services are).
    gateway: str
    #: The host's own address.
    address: str


def _free_subnet() -> int:
    used = subprocess.run(
        ["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True
    ).stdout
    start = os.getpid() % 250
    for step in range(TRIES):
        x = (start + step) % 250 + 1
        if f" {NET}.{x}." not in used:
            return x
    raise RuntimeError(f"no free /24 in {NET}.0.0/16 after {TRIES} tries")


@contextlib.contextmanager
def hosts(names: list[str]) -> Iterator[dict[str, Host]]:
    """Namespaces ``names`` with a veth each; all removed when the block ends."""
    x = _free_subnet()
    tag = f"{os.getpid() % 100000}"
    made: list[tuple[str, str]] = []
    try:
        out: dict[str, Host] = {}
        for i, name in enumerate(names):
            netns, outer, inner = f"chaz-{tag}-{name}", f"cz{tag}{i}a", f"cz{tag}{i}b"
            gateway, address = f"{NET}.{x}.{4 * i + 1}", f"{NET}.{x}.{4 * i + 2}"
            _ip("netns", "add", netns)
            made.append((netns, outer))
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", netns)
            _ip("addr", "add", f"{gateway}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", netns, "addr", "add", f"{address}/30", "dev", inner)
            _ip("-n", netns, "link", "set", inner, "up")
            _ip("-n", netns, "link", "set", "lo", "up")
            out[name] = Host(netns, gateway, address)
        yield out
    finally:
        for netns, outer in reversed(made):
            # Deleting the namespace deletes its veth end, and the pair with it;
            # the root end goes explicitly in case a process still holds the namespace.
            subprocess.run(["ip", "link", "del", outer], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


class Forwarder:
    """TCP listeners in the root namespace, each piping to a local service."""

    def __init__(self) -> None:
        self._listeners: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def listen(self, address: str, target: tuple[str, int]) -> int:
        """Accept on ``address`` and pipe each connection to ``target``; returns
        the port (a free one: the service itself may listen on every address
        at its own port, refusing what does not come from loopback, as
        Redis's protected mode does)."""
        server = socket.create_server((address, 0), backlog=128)
        self._listeners.append(server)
        threading.Thread(target=self._accept, args=(server, target), daemon=True).start()
        return int(server.getsockname()[1])

    def _accept(self, server: socket.socket, target: tuple[str, int]) -> None:
        while not self._closed:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        # One side ended: end both, as a host's connection would.
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        """Stop listening and drop every piped connection."""
        self._closed = True
        with self._lock:
            for s in [*self._listeners, *self._conns]:
                with contextlib.suppress(OSError):
                    s.close()
