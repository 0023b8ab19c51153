"""Workers on other hosts (issue 25 item 4, docs/brokers.md#workers-on-other-hosts).

Two workers and the beat each run in a network namespace of their own, on
this machine, with a home directory of their own: they reach PostgreSQL,
RabbitMQ (the broker) and Redis only over their veth's address, through the
test's forwarder (tests/support/netns.py), never over 127.0.0.1, which in a
namespace is a loopback with nothing behind it. Each process also runs in a
mount namespace where every other home (the other hosts' and the
producer's) is hidden under an empty tmpfs and its own is mounted at one
shared path: a worker that read a file another one wrote would find
nothing. Over that fleet: 200 turns across both hosts in order per session,
a SIGKILLed worker's turn resumed on the other host, and a SIGTERMed
worker's turn handed back and resumed there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.settings import Settings
from chaz.stack import WorkerProcess
from tests.support import stack as stack_support
from tests.support.netns import Forwarder, Host, hosts
from tests.support.servers import IN_CI
from tests.support.stack import BOOT_TIMEOUT, Stack

pytestmark = pytest.mark.hosts

WAIT = 120
ECHO = chaz.AgentSpec(id="h-echo", script=[{"steps": [{"echo": True}]}])
#: A turn that does one step, then sleeps long enough to be caught mid-turn.
LONG = chaz.AgentSpec(
    id="h-long",
    tools=["echo", "sleep"],
    script=[
        {
            "steps": [
                {"call": "echo", "args": {"text": "before"}},
                {"call": "sleep", "args": {"seconds": 60}},
                {"say": "after {last_result}"},
            ]
        }
    ],
)
#: In each worker's mount namespace: its own home bound at the shared view
#: path, every other home under an empty tmpfs, then the worker itself.
ISOLATE = (
    'set -e; mount --bind "$1" "$2"; '
    'mount -t tmpfs -o size=1m,mode=700 chaz-elsewhere "$3"; '
    'mount -t tmpfs -o size=1m,mode=700 chaz-elsewhere "$4"; '
    'shift 4; exec "$@"'
)


class HostWorker(WorkerProcess):
    """A chaz worker started inside ``host``'s network namespace, seeing only its home."""

    def __init__(
        self, settings: Settings, *, host: Host, real: Path, hidden: tuple[Path, Path], **kw: Any
    ) -> None:
        super().__init__(settings, **kw)
        self.host = host
        self.real = real
        self.hidden = hidden

    def command(self) -> list[str]:
        """``ip netns exec`` (same pid: it execs) around the usual command line."""
        view = self.settings.home.resolve()
        return [
            "ip", "netns", "exec", self.host.netns, "sh", "-c", ISOLATE, "sh",
            str(self.real), str(view), *map(str, self.hidden), *super().command(),
        ]  # fmt: skip


def _on(url: str, host: Host, ports: dict[tuple[str, int], int], default: int) -> str:
    """``url`` with its 127.0.0.1:PORT replaced by the forwarder's on the host's link."""
    assert "127.0.0.1" in url, url
    port = _port(url, default)
    here = f"{host.gateway}:{ports[(host.netns, port)]}"
    return url.replace(f"127.0.0.1:{port}", here).replace("127.0.0.1", here)


def _port(url: str, default: int) -> int:
    return urlsplit(url.replace("+psycopg", "")).port or default


@pytest.fixture
def root_and_ip() -> None:
    missing = os.geteuid() != 0 or shutil.which("ip") is None
    if missing:
        message = "network namespaces need root and iproute2's ip"
        if IN_CI:
            pytest.fail(message + " (CI=true)")
        pytest.skip(message)


class Fleet:
    """The hosts' workers, started and restarted on demand."""

    def __init__(
        self, stack: Stack, net: dict[str, Host], root: Path, ports: dict[tuple[str, int], int]
    ) -> None:
        self.stack = stack
        self.ports = ports
        self.net = net
        self.root = root
        self.view = root / "mine"
        self.homes = {name: root / "homes" / name for name in net}
        self.started: list[HostWorker] = []
        for home in self.homes.values():
            home.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, *, beat: bool = False, queues: str = "chaz.turns") -> HostWorker:
        host = self.net[name]
        s = self.stack.settings
        settings = s.model_copy(
            update={
                "home": self.view,
                "database_url": _on(s.database_url or "", host, self.ports, 5432),
                "redis_url": _on(s.redis_url or "", host, self.ports, 6379),
                "broker_url": _on(s.broker_url or "", host, self.ports, 5672),
                # A short grace: a SIGTERMed worker hands its turn back at once.
                "shutdown_grace_seconds": 1.0,
            }
        )
        n = sum(1 for w in self.started if w.host == host)
        worker: HostWorker = HostWorker(
            settings,
            host=host,
            real=self.homes[name],
            hidden=(self.root / "homes", self.stack.settings.home),
            concurrency=1 if beat else 4,
            beat=beat,
            queues=queues,
            loglevel="INFO",
            log_file=self.homes[name] / f"worker-{n}.log",
        )
        worker.start()
        self.started.append(worker)
        try:
            worker.wait_ready(self.stack.client, timeout=BOOT_TIMEOUT)
        except Exception as exc:
            raise AssertionError(f"{name}'s worker did not start\n{self.logs()}") from exc
        return worker

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "homes").glob("*/worker-*.log")):
            out.append(f"==== {path}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        for w in self.started:
            w.stop(timeout=10)


@pytest.fixture
def fleet(
    root_and_ip: None, pg_url: str, redis_url: str, tmp_path: Path
) -> Iterator[tuple[Stack, Fleet]]:
    assert stack_support.FLEET_ALLOWED
    stack = Stack.server(tmp_path / "home", pg_url, redis_url, rabbitmq=True)
    stack.settings.home.mkdir(parents=True, exist_ok=True)  # hidden from the hosts
    forward = Forwarder()
    ports: dict[tuple[str, int], int] = {}
    try:
        with hosts(["w1", "w2", "beat"]) as net:
            for host in net.values():
                for url, default in (
                    (stack.settings.database_url or "", 5432),
                    (stack.settings.redis_url or "", 6379),
                    (stack.settings.broker_url or "", 5672),
                ):
                    port = _port(url, default)
                    ports[(host.netns, port)] = forward.listen(host.gateway, ("127.0.0.1", port))
            f = Fleet(stack, net, tmp_path, ports)
            try:
                yield stack, f
            finally:
                f.stop()
    finally:
        forward.close()
        stack.close()


def _acks(client: chaz.Client, session_id: str, job_id: str | None) -> list[chaz.Entry]:
    return [
        e
        for e in client.sessions.entries(session_id)
        if e.job_id == job_id and e.type is EntryType.ACK
    ]


def _mid_turn(stack: Stack, client: chaz.Client, text: str) -> tuple[chaz.Session, chaz.Entry]:
    """A LONG turn posted and caught in its sleep step."""
    s = client.sessions.create("h-long")
    posted = client.sessions.post(s.id, text, sender="user:ops")
    stack.wait_for(
        lambda: any(
            e.type is EntryType.TOOL_CALL and e.metadata.get("tool") == "sleep"
            for e in client.sessions.entries(s.id)
        ),
        WAIT,
        "the sleep step",
    )
    return s, posted


def test_two_hosts_run_turns_recover_a_kill_and_hand_back(fleet: tuple[Stack, Fleet]) -> None:
    stack, f = fleet
    client = stack.client
    client.agents.put(ECHO)
    client.agents.put(LONG)
    f.start("beat", beat=True, queues="chaz.control")
    workers = {"w1": f.start("w1"), "w2": f.start("w2")}

    # Nothing on a host answers at 127.0.0.1: the services are reachable only
    # over the veth, so a setting that fell back to loopback could not work.
    for host in f.net.values():
        loopback = subprocess.run(
            ["ip", "netns", "exec", host.netns, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/5432"],
            capture_output=True,
            timeout=30,
        )
        assert loopback.returncode != 0

    # 200 turns, 10 in each of 20 sessions: in order per session, on both hosts.
    sessions = [client.sessions.create("h-echo") for _ in range(20)]
    posted = {
        s.id: [client.sessions.post(s.id, f"m{i}", sender="user:a") for i in range(10)]
        for s in sessions
    }
    jobs = {e.job_id for es in posted.values() for e in es}
    assert len(jobs) == 200
    for s in sessions:
        last = posted[s.id][-1]
        reply = client.sessions.wait_for_reply(s.id, after=last.seq, timeout=WAIT)
        assert reply.content == "m9", f"{reply}\n{f.logs()}"
    pids: dict[int, int] = defaultdict(int)
    for s in sessions:
        entries = client.sessions.entries(s.id)
        replies = [
            e.content for e in entries if e.sender == "agent:h-echo" and e.type is EntryType.MESSAGE
        ]
        assert replies == [f"m{i}" for i in range(10)]
        for e in entries:
            if e.type is EntryType.ACK:
                pids[e.metadata["pid"]] += 1
    assert sum(pids.values()) == 200
    assert set(pids) == {workers["w1"].pid, workers["w2"].pid}, pids

    # SIGKILL the worker mid-turn: the other host resumes the turn, once.
    s, first = _mid_turn(stack, client, "killed")
    [ack] = _acks(client, s.id, first.job_id)
    victim = next(name for name, w in workers.items() if w.pid == ack.metadata["pid"])
    other = "w2" if victim == "w1" else "w1"
    workers[victim].kill(signal.SIGKILL)
    reply = client.sessions.wait_for_reply(s.id, after=first.seq, timeout=WAIT)
    assert reply.type is EntryType.MESSAGE and "tool.interrupted" in reply.content, reply
    acks = _acks(client, s.id, first.job_id)
    assert [e.content for e in acks] == ["processing", "resumed: attempt 2"]
    assert [e.metadata["pid"] for e in acks] == [workers[victim].pid, workers[other].pid]
    assert client.jobs.get(first.job_id or "").attempts == 2

    # SIGTERM mid-turn: the worker hands the turn back and exits cleanly; the
    # other host resumes it without spending an attempt.
    workers[victim] = f.start(victim)
    s, held = _mid_turn(stack, client, "handed back")
    [ack] = _acks(client, s.id, held.job_id)
    leaving = next(name for name, w in workers.items() if w.pid == ack.metadata["pid"])
    staying = "w2" if leaving == "w1" else "w1"
    workers[leaving].kill(signal.SIGTERM)
    proc = workers[leaving].proc
    assert proc is not None and proc.wait(WAIT) == 0
    reply = client.sessions.wait_for_reply(s.id, after=held.seq, timeout=WAIT)
    assert reply.type is EntryType.MESSAGE, reply
    acks = _acks(client, s.id, held.job_id)
    assert [e.content for e in acks] == ["processing", "resumed: attempt 1"]
    assert [e.metadata["pid"] for e in acks] == [workers[leaving].pid, workers[staying].pid]

    # Each process saw its own home only: the others' are an empty tmpfs in its
    # mount namespace, and what it wrote is in its own home.
    for w in f.started:
        if not w.alive():
            continue
        seen = Path(f"/proc/{w.pid}/root")
        assert os.listdir(seen / str(f.root / "homes").lstrip("/")) == []
        assert os.listdir(seen / str(stack.settings.home).lstrip("/")) == []
        own = sorted(os.listdir(seen / str(f.view).lstrip("/")))
        assert own == sorted(os.listdir(w.real)), own
    assert (f.homes["beat"] / "celerybeat-schedule").exists() or list(
        f.homes["beat"].glob("celerybeat-schedule*")
    )
    for name in ("w1", "w2"):
        assert not list(f.homes[name].glob("celerybeat-schedule*"))
