"""Claims on Redis database numbers, so that concurrent test runs on one
Redis server never share (and FLUSHDB) each other's database.

A claim is a key in database 0 whose value names its owner
(``HOST:PID``), taken with SET NX and deleted by its owner at the end. A
run that is killed (a CI timeout, SIGKILL, a pytest-xdist process that
crashed) cannot delete its claims; their expiry would free them only hours
later, and meanwhile every later run on the same server could find every
number taken. So a claim whose owner is a process of this host that no
longer exists is taken over (compare-and-set, so two runs never take over
the same one). A claim of another host is left to its expiry: its pid means
nothing here.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

import redis

#: The claims' keys: ``PREFIX:N`` in database 0.
PREFIX = "chaz-test:redis-db"
#: How long a claim lives if its owner never deletes it (and is not on
#: this host, where a dead owner's claim is taken over at once).
CLAIM_SECONDS = 6 * 3600

#: Replace the claim's value only if it is still the one we judged stale.
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""


def owner() -> str:
    """This process as a claim's value: ``HOST:PID``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_stale(value: str) -> bool:
    """Whether the claim ``value`` belongs to a process of this host that is gone.

    A bare pid (the value before claims named their host) counts as this
    host's: test runs use a Redis on 127.0.0.1.
    """
    host, _, pid = value.rpartition(":")
    if host and host != socket.gethostname():
        return False
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def claim(admin: redis.Redis, numbers: Iterable[int], prefix: str = PREFIX) -> int | None:
    """Claim the first free number of ``numbers`` (keys ``PREFIX:N`` on ``admin``),
    else the first whose owner is a dead process of this host; None if all
    are held by live owners."""
    numbers = list(numbers)
    me = owner()
    for n in numbers:
        if admin.set(f"{prefix}:{n}", me, nx=True, ex=CLAIM_SECONDS):
            return n
    for n in numbers:
        key = f"{prefix}:{n}"
        held = admin.get(key)
        if held is None:
            if admin.set(key, me, nx=True, ex=CLAIM_SECONDS):
                return n
            continue
        value = held.decode() if isinstance(held, bytes) else str(held)
        if is_stale(value) and admin.eval(_TAKE_OVER, 1, key, value, me, CLAIM_SECONDS):
            return n
    return None


def release(admin: redis.Redis, number: int, prefix: str = PREFIX) -> None:
    """Drop this process's claim on ``number`` (not one another run took over)."""
    key = f"{prefix}:{number}"
    held = admin.get(key)
    if held is not None and (held.decode() if isinstance(held, bytes) else str(held)) == owner():
        admin.delete(key)
