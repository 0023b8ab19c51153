"""The Redis key schema, in one place.

======================================  ==========  ==========================================
key                                     type        meaning
======================================  ==========  ==========================================
``chaz:lane:{sid}``                     string      lease on session ``sid``: ``TOKEN JOB_ID``,
                                                    with a TTL renewed by the holder's heartbeat
``chaz:leases``                          zset        session ids whose lane is leased, scored by
                                                    when the lease expires (ms, Redis clock):
                                                    the lease watch wakes the expired ones
``chaz:entries:{sid}``                  channel     every committed entry of ``sid``, as JSON
``chaz:events:{sid}``                   channel     a committed event of ``sid``'s event log, as
                                                    JSON (a nudge: followers re-read the table)
``chaz:partials:{sid}``                 channel     partial text of an answer being streamed in
                                                    ``sid``, as JSON (best effort)
``chaz:pbuf:{job}``                     stream      the same partials of ``job``, in publish
                                                    order, for HTTP streams to replay: at most
                                                    about ``BUFFER_MAX``, expiring
                                                    ``BUFFER_SECONDS`` after the last
                                                    (``chaz.coord.partials``)
``chaz:q:{sid}``                        string      jobs admitted and waiting in ``sid``
``chaz:cum:{sid}``                      string      jobs ever admitted in ``sid`` (never refunded)
``chaz:plive:{project}``                zset        job id -> when its admission was reserved
                                                    (ms, Redis clock) of every unfinished job of
                                                    ``project``, plus a sentinel member ``_``
``chaz:pjobs:{project}``                string      jobs ever admitted in ``project`` (never
                                                    refunded)
``chaz:prate:{project}``               hash        the project's turns-per-minute token bucket:
                                                    ``tokens`` left as of ``at`` (ms, Redis
                                                    clock) and its size ``cap``; it expires once
                                                    full, and a missing bucket is full
``chaz:live:{tree}``                    hash        job id -> session id of turns running in a
                                                    tree, plus a sentinel field ``_``
``chaz:wait:{tree}``                    zset        sessions whose head job waits for tree
                                                    capacity (score: when it started waiting;
                                                    negated once a freed slot is handed to it)
``chaz:cancel:{job}``                   string      set while cancellation of ``job`` is requested
``chaz:rb:{sid}``                       string      rollbacks of ``sid``'s jobs begun plus ended:
                                                    odd while one is under way, expiring a week
                                                    after the last (``chaz.coord.rollbacks``)
``chaz:idem:{sid}:{key}``               string      held while one caller admits with that
                                                    idempotency key (retries wait for it)
``chaz:worker:{hostname}``              string      pid of a worker that is ready for tasks,
                                                    re-set on each of its beats with a short
                                                    expiry (``chaz.plumbing.heartbeat``)
``chaz:inbox:{sid}``                    string      set while messages wait in ``sid``'s inbox
                                                    (a hint: the deliveries table is the record)
``chaz:reconciled``                     string      when a reconciler pass last completed (ISO
                                                    time), expiring a few reconcile periods later
``chaz:beat``                           string      when a beat last ticked (ISO time), expiring
                                                    soon after: no key, no beat (``chaz doctor``)
``chaz:refusals``                       hash        error code -> admissions refused with it,
                                                    fleet-wide, ever (``chaz exporter``)
``chaz:deadletter``                     list        broker messages no worker could decode, newest
                                                    first, as JSON; at most ``DEADLETTER_MAX``
======================================  ==========  ==========================================

On a Redis Cluster (``CHAZ_REDIS_CLUSTER``) every key a script touches with
others carries a hash tag after the prefix, ``chaz:{cNN}:lane:SID``: the tag
of the key's *project*'s bucket (:func:`tag`), one of :data:`BUCKETS` tags
spread evenly over the 16,384 slots. A project's session, job, tree and
project keys therefore share one slot, and admission (``lua/reserve.lua``)
and a turn's end (``lua/turn_ended.lua``) stay one script call. The leases
zset is one per bucket (``chaz:{cNN}:leases``). Pub/sub channels of a
session are tagged by the session itself (``chaz:entries:{SID}``) and are
sharded channels (``SPUBLISH``). Keys no script shares (``chaz:worker:*``,
``chaz:beat``, ``chaz:reconciled``, ``chaz:refusals``, ``chaz:deadletter``,
``chaz:idem:*``, ``chaz:pbuf:*``, ``chaz:cancel:*`` read alone, ``chaz:rb:*``) keep their
names; a single Redis (the default) has no tags at all, so the names above
are exactly its keys. See docs/coordination.md#on-a-redis-cluster.
"""

from __future__ import annotations

import functools
import zlib

PREFIX = "chaz"

#: How many hash tags a cluster's keys are spread over: each project's keys
#: live in one of them (so on one slot, one shard). 64 spreads evenly over up
#: to a few dozen shards and keeps the lease watch at 64 small calls a pass.
BUCKETS = 64

#: The number of hash slots of a Redis Cluster.
SLOTS = 16384


@functools.cache
def bucket_tags() -> tuple[str, ...]:
    """The :data:`BUCKETS` hash tags, ``{cNN}`` where tag ``i``'s slot lies in
    the ``i``-th of :data:`BUCKETS` equal slot ranges: a cluster whose slots
    are split evenly (``redis-cli --cluster create``) gets an even share of
    the buckets on each shard."""
    from redis.crc import key_slot

    width = SLOTS // BUCKETS
    found: dict[int, str] = {}
    n = 0
    while len(found) < BUCKETS:
        tag = f"c{n}"
        slot = key_slot(tag.encode())
        found.setdefault(slot // width, tag)
        n += 1
    return tuple("{" + found[i] + "}" for i in range(BUCKETS))


def bucket(project: str) -> int:
    """The bucket a project's keys live in (stable across processes and versions)."""
    return zlib.crc32(project.encode()) % BUCKETS


def tag(project: str) -> str:
    """The key infix of a project's keys on a cluster: ``{cNN}:``."""
    return bucket_tags()[bucket(project)] + ":"


def lane(session_id: str, t: str = "") -> str:
    """The lease key of a session's lane."""
    return f"{PREFIX}:{t}lane:{session_id}"


def leases(t: str = "") -> str:
    """The sessions whose lane is leased, scored by the lease's expiry (ms)
    (on a cluster, one zset per bucket ``t``)."""
    return f"{PREFIX}:{t}leases"


def entries_channel(session_id: str) -> str:
    """The pub/sub channel that carries a session's new entries."""
    return f"{PREFIX}:entries:{session_id}"


def events_channel(session_id: str) -> str:
    """The pub/sub channel that announces a session's new events."""
    return f"{PREFIX}:events:{session_id}"


def partials_channel(session_id: str) -> str:
    """The pub/sub channel that carries partial text of a session's streamed answers."""
    return f"{PREFIX}:partials:{session_id}"


def partials_buffer(job_id: str) -> str:
    """The Redis Stream that keeps a job's recent partials for replay."""
    return f"{PREFIX}:pbuf:{job_id}"


def queued(session_id: str, t: str = "") -> str:
    """Counter of admitted, waiting jobs in a session."""
    return f"{PREFIX}:{t}q:{session_id}"


def cumulative(session_id: str, t: str = "") -> str:
    """Counter of jobs ever admitted in a session."""
    return f"{PREFIX}:{t}cum:{session_id}"


def live(tree_id: str, t: str = "") -> str:
    """Set (hash) of jobs running now in a session tree."""
    return f"{PREFIX}:{t}live:{tree_id}"


def cancel(job_id: str, t: str = "") -> str:
    """Flag set while a job's cancellation is requested."""
    return f"{PREFIX}:{t}cancel:{job_id}"


def waiting(tree_id: str, t: str = "") -> str:
    """Sessions waiting for a free live slot in a tree."""
    return f"{PREFIX}:{t}wait:{tree_id}"


def rollbacks(session_id: str) -> str:
    """The count of rollbacks begun and ended on a session's jobs (chaz.coord.rollbacks)."""
    return f"{PREFIX}:rb:{session_id}"


def idempotency_claim(session_id: str, key: str) -> str:
    """Single-flight claim on an idempotency key while its admission is under way."""
    return f"{PREFIX}:idem:{session_id}:{key}"


def worker_ready(hostname: str) -> str:
    """Set by a worker once it consumes tasks (its pid)."""
    return f"{PREFIX}:worker:{hostname}"


def inbox(session_id: str, t: str = "") -> str:
    """Set while messages wait in a session's inbox: its turn's end drains them."""
    return f"{PREFIX}:{t}inbox:{session_id}"


def project_live(project: str, t: str = "") -> str:
    """Sorted set of a project's unfinished jobs (the live quota), with a sentinel ``_``."""
    return f"{PREFIX}:{t}plive:{project}"


def project_live_pattern(tagged: bool = False) -> str:
    """A ``SCAN`` pattern matching every project's live set (for the reconciler)."""
    return f"{PREFIX}:{{*}}:plive:*" if tagged else f"{PREFIX}:plive:*"


def live_pattern(tagged: bool = False) -> str:
    """A ``SCAN`` pattern matching every tree's live hash (for the reconciler)."""
    return f"{PREFIX}:{{*}}:live:*" if tagged else f"{PREFIX}:live:*"


def key_tag(key: str) -> str:
    """The tag infix (``{cNN}:``, or ``""``) of a key this module named."""
    rest = key[len(PREFIX) + 1 :]
    if rest.startswith("{"):
        return rest[: rest.index("}") + 2]
    return ""


def sharded(channel: str) -> str:
    """A session channel's name as a sharded channel: its session id as the tag."""
    head, _, session_id = channel.rpartition(":")
    return f"{head}:{{{session_id}}}"


def project_jobs(project: str, t: str = "") -> str:
    """Counter of jobs ever admitted in a project."""
    return f"{PREFIX}:{t}pjobs:{project}"


def project_rate(project: str, t: str = "") -> str:
    """The token bucket of a project's turns per minute (missing: full)."""
    return f"{PREFIX}:{t}prate:{project}"


def project_tokens(project: str, t: str = "") -> str:
    """The token bucket of a project's model tokens per minute (missing: no debt)."""
    return f"{PREFIX}:{t}ptok:{project}"


def reconciled() -> str:
    """When a reconciler pass last completed; its TTL makes a stale pass a missing key."""
    return f"{PREFIX}:reconciled"


def beat_heartbeat() -> str:
    """When a beat last ticked; it expires soon after, so no key means no beat."""
    return f"{PREFIX}:beat"


def refusals() -> str:
    """Admissions refused, by error code, counted by every producer (the exporter reads it)."""
    return f"{PREFIX}:refusals"


#: How many set-aside broker messages ``chaz:deadletter`` keeps (the oldest go).
DEADLETTER_MAX = 1000


def deadletter() -> str:
    """Broker messages a worker popped and could not decode (``chaz.coord.poison``)."""
    return f"{PREFIX}:deadletter"
