"""Webhooks when a run ends: checked at the request, POSTed from the outbox
(docs/http.md#webhooks, docs/security.md#webhooks).

A run names a URL (:func:`check`, at request time: the URL's form, and the
address guard over its literal address or what its name resolves to now).
Its job's end writes the outbox row in the end's own transaction
(:mod:`chaz.store.webhooks`); after the commit the job's end sends
``chaz.webhook`` (:func:`announce`), and the reconciler's :func:`sweep`
sends it again for every row due and not claimed, so a lost message or a
killed worker delays a delivery and never loses it.

:func:`deliver` is one attempt: claim the row, resolve the host again and
check every address (a name that resolved to a public address at the
request may resolve to a private one now: DNS rebinding), connect to the
checked address itself, and POST the signed run. A 2xx settles it; anything
else waits ``CHAZ_WEBHOOK_BACKOFF_SECONDS`` doubled per attempt, and after
``CHAZ_WEBHOOK_ATTEMPTS`` the row is dead, its last error kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from chaz.domain.runs import RUN_STATUS
from chaz.domain.webhooks import (
    ATTEMPT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    IPAddress,
    Network,
    Target,
    Webhook,
    backoff,
    check_host,
    check_url,
    forbidden,
    literal_address,
    parse_networks,
    refusal,
    sign,
)
from chaz.errors import Conflict, WebhookForbidden, WebhookNotFound
from chaz.ids import utcnow
from chaz.services import Services
from chaz.settings import Settings
from chaz.store.webhooks import Claim

log = logging.getLogger(__name__)

#: A claimed attempt holds its row for this many timeouts (httpx applies the
#: timeout to the connect, the send and the answer each) plus the margin:
#: after that the attempt is presumed lost (its worker died) and the sweep
#: sends it again.
HOLD_TIMEOUTS = 3
HOLD_MARGIN_SECONDS = 1.0
#: What a delivery says it is.
USER_AGENT = "chaz-webhooks/1"


def _allowed(settings: Settings) -> tuple[bool, tuple[Network, ...]]:
    return settings.webhook_allow_private, parse_networks(settings.webhook_allow_networks)


def check(settings: Settings, raw: object) -> str:
    """A run's ``webhook``, checked at the request: ``request.invalid`` for a
    malformed or oversized URL, ``webhook.forbidden`` for one that names or
    resolves to an address the guard refuses. A name that does not resolve
    now is accepted: each attempt resolves it again."""
    target = check_url(raw)
    private, allow = _allowed(settings)
    check_host(target, allow_private=private, allow=allow)
    if target.literal is None:
        # A resolver's failure is not the URL's fault: each attempt resolves again.
        with contextlib.suppress(OSError):
            try:
                guard(settings, target)
            except WebhookForbidden as exc:
                # Not which address: a tenant must not map the internal DNS.
                why = str(exc.details["reason"])
                raise WebhookForbidden(
                    f"webhook host {target.host!r} resolves to {why}; an operator may allow "
                    "it with CHAZ_WEBHOOK_ALLOW_PRIVATE or CHAZ_WEBHOOK_ALLOW_NETWORKS",
                    field="webhook",
                    host=target.host,
                    reason=why,
                ) from None
    return target.url


def resolve(target: Target) -> list[IPAddress]:
    """Every address the target's host resolves to now (or the one it spells)."""
    literal = literal_address(target.host)
    if literal is not None:
        return [literal]
    found = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for *_, sockaddr in found:
        address = literal_address(str(sockaddr[0]).split("%", 1)[0])
        if address is not None and address not in out:
            out.append(address)
    if not out:
        raise OSError(f"{target.host} resolves to no address")
    return out


def guard(settings: Settings, target: Target) -> IPAddress:
    """The address to connect to: the first the host resolves to, once every
    one of them passed the guard (one refused address refuses the host: a
    resolver may answer with either)."""
    private, allow = _allowed(settings)
    check_host(target, allow_private=private, allow=allow)
    addresses = resolve(target)
    for address in addresses:
        why = refusal(address, allow_private=private, allow=allow)
        if why is not None:
            raise forbidden(target, str(address), why)
    return addresses[0]


def announce(services: Services, job_id: str, *, countdown: float | None = None) -> bool:
    """Send ``chaz.webhook`` for the ended job's delivery (after its commit)."""
    return services.dispatcher.send_webhook(job_id, countdown=countdown)


def payload(claim: Claim) -> dict[str, Any]:
    """What a delivery POSTs: the run as it ended."""
    job = claim.job
    failed = job.error or None
    return {
        "run_id": job.id,
        "thread_id": job.session_id,
        "status": RUN_STATUS[job.status],
        "output": {"content": job.result} if job.result is not None else None,
        "error": (
            {"error": failed.get("code", "chaz.error"), "message": failed.get("message", "")}
            if failed
            else None
        ),
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "webhook_id": claim.webhook.id,
        "attempt": claim.attempt,
    }


def deliver(services: Services, job_id: str) -> str:
    """One attempt of the job's webhook delivery: ``delivered``, ``retry``,
    ``dead``, or ``skipped`` (nothing due: delivered, dead, not yet due, or
    claimed by another sender)."""
    settings = services.settings
    timeout = settings.webhook_timeout_seconds
    claim = services.store.webhooks.claim(job_id, HOLD_TIMEOUTS * timeout + HOLD_MARGIN_SECONDS)
    if claim is None:
        return "skipped"
    body = json.dumps(payload(claim), separators=(",", ":")).encode()
    stamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        SIGNATURE_HEADER: sign(claim.secrets, stamp, body),
        ID_HEADER: claim.webhook.id,
        ATTEMPT_HEADER: str(claim.attempt),
    }
    import httpx  # here: a producer that only checks URLs never loads it

    status: int | None = None
    try:
        target = check_url(claim.webhook.url)
        address = guard(settings, target)
        status = post(target, address, body, headers, timeout)
        error = None if 200 <= status < 300 else f"HTTP {status}"
    except WebhookForbidden as exc:
        # The guard refuses it now: a later attempt would be refused the same
        # way unless an operator changes the settings, so it ends here.
        return _dead(services, claim, exc.message, None)
    except (httpx.HTTPError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is None:
        assert status is not None
        services.store.webhooks.delivered(claim.webhook.id, status)
        return "delivered"
    if claim.attempt >= settings.webhook_attempts:
        return _dead(services, claim, error, status)
    wait = backoff(claim.attempt, settings.webhook_backoff_seconds)
    if services.store.webhooks.failed(
        claim.webhook.id, claim.attempt, error, status=status, retry_in=wait
    ):
        # The retry's own message; if it is lost, the sweep sends it.
        announce(services, job_id, countdown=wait)
    log.info("webhook %s attempt %d failed (%s); next in %gs", job_id, claim.attempt, error, wait)
    return "retry"


def _dead(services: Services, claim: Claim, error: str, status: int | None) -> str:
    hooks = services.store.webhooks
    hooks.failed(claim.webhook.id, claim.attempt, error, status=status, retry_in=None)
    log.warning(
        "webhook of run %s is dead after %d attempt(s): %s", claim.job.id, claim.attempt, error
    )
    return "dead"


def post(
    target: Target,
    address: IPAddress,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    *,
    verify: ssl.SSLContext | bool = True,
) -> int:
    """POST ``body`` to the target at ``address``, the one the guard checked:
    the URL's host goes in ``Host`` and, for https, in the TLS server name
    (so the certificate is verified against it). No redirect is followed
    (its target was never checked), and no proxy from the environment is
    used (it would connect to the name itself). ``verify``: the trust store
    (default: httpx's, certifi's roots). The answer's status."""
    parts = urlsplit(target.url)
    ip = f"[{address}]" if address.version == 6 else str(address)
    pinned = urlunsplit((target.scheme, f"{ip}:{target.port}", parts.path or "/", parts.query, ""))
    host = parts.netloc
    sent = {**headers, "host": host}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    import httpx

    with (
        httpx.Client(
            timeout=timeout, trust_env=False, follow_redirects=False, verify=verify
        ) as http,
        # Streamed, and the body never read: only the status matters, and a
        # receiver's answer of any size costs nothing.
        http.stream("POST", pinned, content=body, headers=sent, extensions=extensions) as answer,
    ):
        return answer.status_code


def retry(services: Services, delivery_id: str, project: str) -> Webhook:
    """Send a dead delivery again, with a fresh count of attempts: the
    operator fixed the receiver (or the settings). ``webhook.not_found`` for
    an id not in ``project``; ``conflict`` for one that is not dead."""
    hooks = services.store.webhooks
    revived = hooks.revive(delivery_id, project)
    if revived is None:
        found = hooks.get(delivery_id)
        if found is None or found.project != project:
            raise WebhookNotFound(f"no webhook delivery {delivery_id!r}", webhook_id=delivery_id)
        raise Conflict(
            f"webhook delivery {delivery_id} is {found.state.value}: only a dead one is retried",
            webhook_id=delivery_id,
            state=found.state.value,
        )
    announce(services, revived.job_id)
    return revived


def sweep(services: Services, grace: timedelta) -> int:
    """Send ``chaz.webhook`` again for every delivery due longer than ``grace``
    ago that nobody claimed (a lost message, a dead worker's attempt); the
    number sent. A send that races the message it replaces is harmless: one
    of them claims the row."""
    due = services.store.webhooks.due(utcnow() - grace)
    for job_id in due:
        announce(services, job_id)
    return len(due)
