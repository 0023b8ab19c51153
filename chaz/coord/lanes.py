"""Per-session lanes: a lease in Redis that lets exactly one turn run per session.

The lease value is ``TOKEN JOB_ID``. The token is random, so it stays unique
even if Redis is flushed and a new lease is taken for the same job; the job row
in the database records the token of the turn that owns it, which fences off
a worker that lost its lease (its writes are refused).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis
from redis.crc import key_slot

from chaz.coord import keys, scripts
from chaz.coord.redis import SHARDS_DOWN, clustered

log = logging.getLogger(__name__)


#: What :meth:`Lanes.acquire_with_slot` did with the job's live slot, by its script's answer.
_SLOT = {1: "", 2: "took", 3: "held"}


@dataclass(frozen=True)
class Taken:
    """A lane taken by :meth:`Lanes.acquire_with_slot`, and the job's live slot."""

    token: str
    #: ``"took"``: the job's slot was taken with the lane; ``"held"``: the job
    #: held one already; ``""``: the slot is left to ``TreeCapacity.start``.
    slot: str


class Lanes:
    """Lease operations on session lanes.

    Every lease is also a member of the leases zset, scored by its expiry,
    in the same script that takes, renews or gives it back
    (``lua/lane_*.lua``): the lease watch finds the expired ones
    (``lua/leases_expired.lua``) without scanning lanes. On a cluster the
    lane and its zset carry the session's project's tag (one zset per
    bucket, docs/coordination.md#on-a-redis-cluster); every method takes the
    project for that.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._clustered = clustered(client)
        self._acquire = scripts.register(client, "lane_acquire")
        self._lane_start = scripts.register(client, "lane_start")
        self._renew = scripts.register(client, "lane_renew")
        self._release = scripts.register(client, "lane_release")
        self._expired = scripts.register(client, "leases_expired")

    def _t(self, project: str) -> str:
        return keys.tag(project) if self._clustered else ""

    def acquire(
        self, session_id: str, job_id: str, ttl_seconds: float, *, project: str
    ) -> str | None:
        """Take the session's lease for ``job_id``; the token, or None if it is held."""
        token = secrets.token_hex(8)
        t = self._t(project)
        ok = self._acquire(
            keys=[keys.lane(session_id, t), keys.leases(t)],
            args=[f"{token} {job_id}", _ms(ttl_seconds), session_id],
        )
        return token if ok else None

    def acquire_with_slot(
        self,
        session_id: str,
        job_id: str,
        ttl_seconds: float,
        *,
        project: str,
        slot_keys: list[str],
    ) -> Taken | None:
        """:meth:`acquire`, and in the same script (``lua/lane_start.lua``) the
        job's live slot in the tree whose keys ``slot_keys`` are
        (``TreeCapacity.slot_keys``, on ``project``'s tag) when it needs no
        limit: the job waits in the session and no turn of the tree runs.
        None if the lane is held (then nothing is taken)."""
        token = secrets.token_hex(8)
        t = self._t(project)
        got = self._lane_start(
            keys=[keys.lane(session_id, t), keys.leases(t), keys.queued(session_id, t), *slot_keys],
            args=[f"{token} {job_id}", _ms(ttl_seconds), session_id, job_id],
        )
        return Taken(token, _SLOT[int(got)]) if got else None

    def renew(self, session_id: str, token: str, ttl_seconds: float, *, project: str) -> bool:
        """Extend our lease; False if it expired or another holder took it."""
        t = self._t(project)
        return bool(
            self._renew(
                keys=[keys.lane(session_id, t), keys.leases(t)],
                args=[token, _ms(ttl_seconds), session_id],
            )
        )

    def release(self, session_id: str, token: str, *, project: str) -> bool:
        """Give the lease back; False if it was no longer ours."""
        t = self._t(project)
        return bool(
            self._release(keys=[keys.lane(session_id, t), keys.leases(t)], args=[token, session_id])
        )

    def expired(self, limit: int = 100) -> list[tuple[str, str]]:
        """Claim the sessions whose lease expired without being given back,
        each with the bucket tag it was found in (for :meth:`watch_again`).

        Each is returned to one caller only, which must wake the session:
        its turn's worker is gone (or cut off from Redis for longer than the
        lease), and nobody else will. On a cluster every bucket's zset is
        asked in turn; a shard that does not answer delays only its own
        sessions.
        """
        out: list[tuple[str, str]] = []
        tags = [t + ":" for t in keys.bucket_tags()] if self._clustered else [""]
        for t in tags:
            zset = keys.leases(t)
            if self._clustered and SHARDS_DOWN.down(self.client, zset):
                continue
            try:
                found = self._expired(keys=[zset], args=[keys.lane("", t), limit])
            except (redis.RedisError, redis.exceptions.RedisClusterException):
                if not self._clustered:
                    raise
                SHARDS_DOWN.mark(self.client, zset)
                log.debug("leases of bucket %s unreachable", t, exc_info=True)
                continue
            out.extend((str(s), t) for s in found)
        return out

    def watch_again(self, session_id: str, t: str) -> None:
        """Put a session claimed by :meth:`expired` back, due now, for the next claim.

        For a caller that could not wake it: the session is not lost.
        """
        self.client.zadd(keys.leases(t), {session_id: 0})

    def held(self, sessions: dict[str, str]) -> set[str]:
        """Which of these sessions (id -> project) have a live lease (one round
        trip per shard)."""
        if not sessions:
            return set()
        ids = list(sessions)
        names = [keys.lane(s, self._t(sessions[s])) for s in ids]
        if not self._clustered:
            values = self.client.mget(names)
            return {s for s, v in zip(ids, values, strict=True) if v}
        # One MGET per slot; a shard that does not answer counts its sessions
        # as held: nobody can run them until it is back, so none is woken.
        by_slot: dict[int, list[int]] = {}
        for i, name in enumerate(names):
            by_slot.setdefault(key_slot(name.encode()), []).append(i)
        held: set[str] = set()
        for group in by_slot.values():
            try:
                values = self.client.mget([names[i] for i in group])
            except redis.RedisError:
                log.warning("a cluster shard did not answer; its sessions are left alone")
                values = ["?"] * len(group)
            held.update(ids[i] for i, v in zip(group, values, strict=True) if v)
        return held


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class Lease:
    """One held lane lease, kept alive by a :class:`LeaseKeeper`."""

    def __init__(self, session_id: str, token: str, project: str) -> None:
        self.session_id = session_id
        self.token = token
        self.project = project
        #: Set when a renewal found the lease gone: the turn must stop writing.
        self.lost = threading.Event()


#: Renewals per lease period: a lease survives three missed beats, and one
#: that nobody renews is at most a quarter of a lease from expiring when the
#: lease watch notices it.
BEATS_PER_LEASE = 4


def heartbeat_seconds(lease_seconds: float) -> float:
    """How often leases are renewed (and the lease watch looks for expired ones)."""
    return lease_seconds / BEATS_PER_LEASE


class LeaseKeeper:
    """Renews every lease this process holds, from one thread.

    One thread per process rather than one per turn: starting and joining a
    thread for every turn cost more than the renewals themselves. A renewal
    runs every :func:`heartbeat_seconds`.
    """

    def __init__(self, lanes: Lanes, ttl_seconds: float) -> None:
        self._lanes = lanes
        self._ttl = ttl_seconds
        self._held: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, session_id: str, token: str, project: str) -> Lease:
        """Keep this lease alive until :meth:`drop`."""
        lease = Lease(session_id, token, project)
        with self._lock:
            self._held[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="chaz-lease-keeper", daemon=True
                )
                self._thread.start()
        return lease

    def drop(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (the turn is over)."""
        with self._lock:
            self._held.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            time.sleep(heartbeat_seconds(self._ttl))
            with self._lock:
                leases = list(self._held.values())
            for lease in leases:
                try:
                    if not self._lanes.renew(
                        lease.session_id, lease.token, self._ttl, project=lease.project
                    ):
                        lease.lost.set()
                except Exception:
                    # A Redis hiccup: try again next beat; the lease outlives three misses.
                    log.warning("renewing the lease of %s failed", lease.session_id, exc_info=True)
