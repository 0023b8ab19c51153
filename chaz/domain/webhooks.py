"""Webhooks: the rules of a run's end told to a URL (docs/http.md#webhooks).

Pure rules, no I/O: which URLs a run may name, which addresses chaz will
not connect to (docs/security.md#webhooks: the SSRF guard), how a delivery
is signed and how a receiver verifies it, and how long a failed delivery
waits before its next attempt. Resolving a name and sending the POST are
the use case's (:mod:`chaz.usecases.webhooks`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from chaz.errors import ValidationError, WebhookForbidden

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The longest webhook URL a run may name, in characters.
MAX_URL_CHARS = 2048
#: The schemes a webhook may use.
SCHEMES = ("http", "https")
#: The header that carries ``t=TIMESTAMP,v1=SIGNATURE`` (see :func:`sign`).
SIGNATURE_HEADER = "chaz-signature"
#: The header that carries the delivery's id, the same on every attempt:
#: a receiver dedupes on it.
ID_HEADER = "chaz-webhook-id"
#: The header that carries the attempt's number (1, 2, ...).
ATTEMPT_HEADER = "chaz-webhook-attempt"
#: How old a signature's timestamp a receiver should still accept, in seconds.
TOLERANCE_SECONDS = 300
#: The longest a failed delivery waits before its next attempt.
MAX_BACKOFF_SECONDS = 3600.0
#: Addresses of cloud metadata services. Refused even when private addresses
#: are allowed: nothing a run ends with belongs there, and they hand out
#: credentials. Only naming the network in CHAZ_WEBHOOK_ALLOW_NETWORKS lets one through.
METADATA: tuple[IPAddress, ...] = (
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task credentials
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
)


class WebhookState(StrEnum):
    """Where a delivery is: waiting for its next attempt, accepted, or given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


@dataclass(frozen=True)
class Target:
    """A webhook URL, checked: its scheme, host (lowercase, IDNA) and port."""

    url: str
    scheme: str
    host: str
    port: int

    @property
    def literal(self) -> IPAddress | None:
        """The address the host spells, if it is one (in any form a resolver reads)."""
        return literal_address(self.host)


def check_url(raw: object) -> Target:
    """A run's ``webhook``: an absolute http(s) URL with a host and nothing
    that would mislead a reader or a resolver; ``request.invalid`` (field
    ``webhook``) otherwise. The address guard is :func:`refusal`."""
    if not isinstance(raw, str):
        raise _invalid("webhook must be a URL string")
    if len(raw) > MAX_URL_CHARS:
        raise _invalid(f"webhook is longer than {MAX_URL_CHARS} characters")
    if not raw.isascii() or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in raw):
        raise _invalid("webhook must be ASCII with no spaces or control characters")
    if "\\" in raw:
        # Browsers and some parsers read a backslash as a slash; urlsplit does not.
        raise _invalid("webhook must not contain a backslash")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise _invalid(f"webhook is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise _invalid("webhook must be an http:// or https:// URL")
    if "@" in parts.netloc:
        # http://good.example@127.0.0.1/ reads as one host and connects to another.
        raise _invalid("webhook must not carry a user name or password")
    if port == 0:
        raise _invalid("webhook's port must be 1 to 65535")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise _invalid("webhook must name a host")
    if parts.fragment:
        raise _invalid("webhook must not have a #fragment")
    return Target(raw, scheme, host, port or (443 if scheme == "https" else 80))


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells, in every form a C resolver accepts:
    ``127.0.0.1``, ``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``,
    ``::1``, ``::ffff:127.0.0.1``; None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        # inet_aton reads the legacy forms (shortened, hex, octal, one number).
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def embedded(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), else itself:
    ``::ffff:127.0.0.1`` is loopback however it is written."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal(
    address: IPAddress, *, allow_private: bool, allow: Iterable[Network] = ()
) -> str | None:
    """Why chaz will not connect to ``address`` (None: it may).

    A public (globally routable) address is allowed. Loopback, private,
    link-local, shared, reserved and unspecified addresses are refused unless
    ``allow_private``, and cloud metadata addresses and multicast always
    unless a network of ``allow`` holds them (docs/security.md#webhooks).
    """
    seen = embedded(address)
    if any(seen in net or address in net for net in allow):
        return None
    if seen in METADATA or address in METADATA:
        return "a cloud metadata address"
    if seen.is_multicast:
        return "a multicast address"
    if seen.is_unspecified:
        return "an unspecified address"
    if seen.is_global:
        return None
    if allow_private:
        return None
    if seen.is_loopback:
        return "a loopback address"
    if seen.is_link_local:
        return "a link-local address"
    if seen.is_private:
        return "a private address"
    return "an address that is not publicly routable"


def check_host(target: Target, *, allow_private: bool, allow: Iterable[Network] = ()) -> None:
    """``webhook.forbidden`` for a host refused before any lookup: an address
    :func:`refusal` refuses, or ``localhost`` (and its subdomains)."""
    address = target.literal
    if address is not None:
        why = refusal(address, allow_private=allow_private, allow=allow)
        if why is not None:
            raise forbidden(target, str(address), why)
        return
    if not allow_private and (target.host == "localhost" or target.host.endswith(".localhost")):
        raise forbidden(target, target.host, "a loopback name")


def forbidden(target: Target, address: str, why: str) -> WebhookForbidden:
    """The refusal of ``target`` because it is (or resolves to) ``address``."""
    return WebhookForbidden(
        f"webhook host {target.host!r} is {why} ({address}); an operator may allow it "
        "with CHAZ_WEBHOOK_ALLOW_PRIVATE or CHAZ_WEBHOOK_ALLOW_NETWORKS",
        field="webhook",
        host=target.host,
        address=address,
        reason=why,
    )


def parse_networks(raw: Iterable[str]) -> tuple[Network, ...]:
    """CHAZ_WEBHOOK_ALLOW_NETWORKS: CIDR networks (``10.1.0.0/16``, ``fd00::/8``)."""
    return tuple(ipaddress.ip_network(n.strip(), strict=False) for n in raw if n.strip())


def new_secret() -> str:
    """A project's signing secret: 32 random bytes, URL-safe."""
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """HMAC-SHA256 of ``TIMESTAMP.BODY`` under ``secret``, in hex."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(secrets: str | tuple[str, ...], timestamp: int, body: bytes) -> str:
    """The ``chaz-signature`` header's value: ``t=TIMESTAMP,v1=HEX``, one
    ``v1`` per secret (the project's, then one a rotation replaced while its
    overlap lasts: a receiver holding either accepts it)."""
    keys = (secrets,) if isinstance(secrets, str) else secrets
    return ",".join([f"t={timestamp}", *(f"v1={signature(k, timestamp, body)}" for k in keys)])


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    tolerance: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether ``header`` (a ``chaz-signature`` value) signs ``body`` under
    ``secret`` with a timestamp within ``tolerance`` seconds of ``now``: the
    receiver's check, as docs/http.md#webhooks spells it."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    stamps = fields.get("t", [])
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    timestamp = int(stamps[0])
    moment = time.time() if now is None else now
    if abs(moment - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...):
    ``base`` doubled each time, at most :data:`MAX_BACKOFF_SECONDS`."""
    return float(min(base * 2 ** max(attempt - 1, 0), MAX_BACKOFF_SECONDS))


def _invalid(message: str) -> ValidationError:
    return ValidationError(message, field="webhook")


@dataclass(frozen=True)
class Webhook:
    """One run's webhook delivery, as the outbox holds it."""

    id: str
    job_id: str
    session_id: str
    project: str
    url: str
    state: WebhookState
    attempts: int
    next_at: datetime
    last_error: str | None
    last_status: int | None
    created_at: datetime
    settled_at: datetime | None
