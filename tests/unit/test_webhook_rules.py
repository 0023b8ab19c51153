"""Webhooks' pure rules: the URL check, the address guard and the signature
(docs/http.md#webhooks, docs/security.md#webhooks)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from typing import Any

import pytest

from chaz.domain import webhooks as wh
from chaz.errors import ValidationError, WebhookForbidden
from chaz.settings import Settings
from chaz.usecases import webhooks as cases

#: Hosts that are loopback, private, link-local or metadata however they are spelled.
HOSTILE = [
    "http://[::1]/",
    "http://127.1/",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.0.0.1:8080/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]/",
    "http://10.0.0.1/",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://100.64.0.1/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://224.0.0.1/",
    "http://localhost/",
    "http://api.localhost:9000/",
]


def _settings(**over: object) -> Settings:
    return Settings(_env_file=None, **over)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_hosts_are_forbidden_at_the_request(url: str) -> None:
    with pytest.raises(WebhookForbidden) as caught:
        cases.check(_settings(), url)
    assert caught.value.code == "webhook.forbidden"
    assert caught.value.details["field"] == "webhook"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://example.com/", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("//example.com/", "http:// or https://"),
        ("http://user:pw@example.com/", "user name"),
        ("http://example.com@127.0.0.1/", "user name"),
        ("http://example.com%40127.0.0.1@evil/", "user name"),
        ("http://example.com\\@127.0.0.1/", "backslash"),
        ("http:///path", "name a host"),
        ("http://exa mple.com/", "spaces"),
        ("http://example.com/\n", "spaces"),
        ("http://bücher.example/", "ASCII"),
        ("http://example.com:99999/", "not a valid URL"),
        ("http://example.com:0/", "port"),
        ("http://[::1/", "not a valid URL"),
        ("http://example.com/#frag", "fragment"),
        ("https://example.com/" + "a" * wh.MAX_URL_CHARS, "longer than"),
    ],
)
def test_malformed_urls_are_invalid_with_the_field(url: str, why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        wh.check_url(url)
    assert type(caught.value) is ValidationError
    assert caught.value.code == "request.invalid" and caught.value.field == "webhook"
    assert why in caught.value.message


@pytest.mark.parametrize("raw", [None, 1, ["http://example.com/"], {"url": "x"}])
def test_a_webhook_that_is_not_a_string_is_invalid(raw: object) -> None:
    with pytest.raises(ValidationError):
        wh.check_url(raw)


def test_public_literals_pass_and_the_url_is_kept_as_given() -> None:
    assert cases.check(_settings(), "https://93.184.215.14:8443/h?x=1") == (
        "https://93.184.215.14:8443/h?x=1"
    )
    target = wh.check_url("HTTPS://Example.COM./hook")
    assert (target.scheme, target.host, target.port) == ("https", "example.com", 443)


def test_the_operator_allows_private_addresses_but_never_metadata_by_that() -> None:
    allow = _settings(webhook_allow_private=True)
    for url in ("http://127.0.0.1:9/", "http://[::1]/", "http://10.1.2.3/", "http://localhost/"):
        assert cases.check(allow, url) == url
    for url in ("http://169.254.169.254/", "http://[::ffff:169.254.169.254]/", "http://0.0.0.0/"):
        with pytest.raises(WebhookForbidden):
            cases.check(allow, url)
    # A network named in the allow-list lets exactly that network through.
    nets = _settings(webhook_allow_networks="10.20.0.0/16, 169.254.169.254/32")
    assert nets.webhook_allow_networks == ["10.20.0.0/16", "169.254.169.254/32"]
    assert cases.check(nets, "http://10.20.3.4/") == "http://10.20.3.4/"
    assert cases.check(nets, "http://169.254.169.254/") == "http://169.254.169.254/"
    with pytest.raises(WebhookForbidden):
        cases.check(nets, "http://10.21.0.1/")


def test_a_bad_allow_list_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="not a CIDR"):
        _settings(webhook_allow_networks="10.0.0.0/8,not-a-net")


def test_a_rebinding_name_is_refused_at_the_send_and_never_named_by_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No DNS server here: the resolver answers as a rebinding one would, a
    # public address at the request and a private one at the send.
    answers = {"rebind.example": ["93.184.215.14"]}

    def getaddrinfo(host: str, port: object, *args: object, **kw: object) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    url = "https://rebind.example/in"
    assert cases.check(_settings(), url) == url
    answers["rebind.example"] = ["93.184.215.14", "10.0.0.7"]  # one bad answer is enough
    with pytest.raises(WebhookForbidden) as caught:
        cases.check(_settings(), url)
    assert caught.value.details["reason"] == "a private address"
    assert "address" not in caught.value.details and "10.0.0.7" not in caught.value.message
    # At the send the operator sees which address it was.
    with pytest.raises(WebhookForbidden) as sent:
        cases.guard(_settings(), wh.check_url(url))
    assert sent.value.details["address"] == "10.0.0.7"


def test_the_send_time_guard_refuses_a_name_that_resolves_to_loopback() -> None:
    # "localhost" through the resolver (not the name rule): what a rebinding
    # name that now answers 127.0.0.1 looks like at send time.
    target = wh.Target("http://localhost./", "http", "localhost", 80)
    with pytest.raises(WebhookForbidden):
        cases.guard(_settings(), target)
    assert cases.guard(_settings(webhook_allow_private=True), target).is_loopback


def test_every_embedded_form_is_judged_by_the_ipv4_it_carries() -> None:
    for text in ("::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::"):
        assert wh.embedded(ipaddress.ip_address(text)) == ipaddress.ip_address("10.0.0.1")
    assert wh.refusal(ipaddress.ip_address("::ffff:8.8.8.8"), allow_private=False) is None
    assert wh.refusal(ipaddress.ip_address("2606:4700::1111"), allow_private=False) is None


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    secret, body, stamp = "whsec_test", b'{"run_id":"r1"}', 1_700_000_000
    header = wh.sign(secret, stamp, body)
    expected = hmac.new(secret.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert wh.verify(secret, header, body, now=stamp + 10)
    # A changed body, another secret, a stale or future timestamp, a forged
    # or missing part: each fails.
    assert not wh.verify(secret, header, body + b" ", now=stamp)
    assert not wh.verify("whsec_other", header, body, now=stamp)
    assert not wh.verify(secret, header, body, now=stamp + wh.TOLERANCE_SECONDS + 1)
    assert not wh.verify(secret, header, body, now=stamp - wh.TOLERANCE_SECONDS - 1)
    assert not wh.verify(secret, f"t={stamp + 1},v1={expected}", body, now=stamp)
    assert not wh.verify(secret, f"t={stamp}", body, now=stamp)
    assert not wh.verify(secret, f"v1={expected}", body, now=stamp)
    assert not wh.verify(secret, f"t={stamp},t={stamp},v1={expected}", body, now=stamp)
    assert not wh.verify(secret, "garbage", body, now=stamp)
    # Several v1 values (a receiver mid-rotation): one match is enough.
    assert wh.verify(secret, f"t={stamp},v1=00,v1={expected}", body, now=stamp)
    assert wh.new_secret() != wh.new_secret()


def test_backoff_doubles_from_the_base_up_to_an_hour() -> None:
    assert [wh.backoff(n, 2.0) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert wh.backoff(40, 2.0) == wh.MAX_BACKOFF_SECONDS
