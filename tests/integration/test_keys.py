"""API keys (issue 11 item 1): stored hashed, shown once, refused alike when
unknown, malformed or revoked; and who a ``chaz.Client`` acts as.

On both stacks; no workers (nothing here runs a turn).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from sqlalchemy import text

import chaz
from chaz.domain.keys import PLAINTEXT
from chaz.domain.principals import ALL_GRANTS, Grant
from chaz.errors import ChazError
from chaz.settings import Settings
from tests.support.stack import Stack


def _error(call: Any) -> dict[str, Any]:
    with pytest.raises(ChazError) as caught:
        call()
    return caught.value.to_dict()


def _rows(stack: Stack) -> list[dict[str, Any]]:
    with stack.client.services.store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(text("SELECT * FROM api_keys")).mappings()]


def test_a_key_is_shown_once_and_stored_only_as_its_hash(stack: Stack) -> None:
    client = stack.client
    key, plaintext = client.keys.create(
        "user:alice", "acme", ["session.write", "history.read"], label="ci"
    )
    found = PLAINTEXT.fullmatch(plaintext)
    assert found is not None and found["id"] == key.id
    assert key.principal == "user:alice" and key.project == "acme" and key.label == "ci"
    assert key.grants == ["history.read", "session.write"] and key.revoked_at is None
    [row] = _rows(stack)
    assert row["key_hash"] == hashlib.sha256(plaintext.encode()).hexdigest()
    secret = plaintext.rsplit("_", 1)[1]
    # Neither the key nor its secret is anywhere in the row.
    assert not any(secret in str(v) or plaintext in str(v) for v in row.values())
    # Listings never carry a hash.
    [listed] = client.keys.list()
    assert "key_hash" not in listed.model_dump() and listed == key
    # Two keys of one principal are two keys.
    other, again = client.keys.create("user:alice", "acme", None)
    assert other.id != key.id and again != plaintext and other.grants is None


def test_a_key_authenticates_as_its_principal_never_an_operator(stack: Stack) -> None:
    _, plaintext = stack.client.keys.create("user:alice", "acme", "history.read,session.write")
    with chaz.Client(stack.settings, api_key=plaintext) as alice:
        who = alice.principal
        assert (who.name, who.project, who.operator) == ("user:alice", "acme", False)
        assert who.grants == {Grant.HISTORY_READ, Grant.SESSION_WRITE}
        # Install-wide configuration and key management need an operator.
        for call in (
            lambda: alice.keys.create("user:mallory", "acme", None),
            lambda: alice.keys.list(),
            lambda: alice.keys.revoke("0" * 16),
        ):
            assert _error(call)["code"] == "auth.forbidden"
    # CHAZ_API_KEY: a client given no principal or project uses it.
    keyed = stack.settings.model_copy(update={"api_key": plaintext})
    with chaz.Client(keyed, migrate=False) as env_client:
        assert env_client.principal == who
    # Naming a principal or project makes an operator's client instead.
    with chaz.Client(keyed, migrate=False, project="acme") as operator:
        assert operator.principal.operator and operator.principal.name == "user:local"


def test_unknown_malformed_and_revoked_keys_are_refused_alike(stack: Stack) -> None:
    client = stack.client
    key, plaintext = client.keys.create("user:alice", "acme", ["history.read"])
    other, other_text = client.keys.create("user:bob", "acme", ["history.read"])
    assert client.keys.revoke(key.id).revoked_at is not None
    first = client.keys.list()[0].revoked_at
    # Revoking again changes nothing; an unknown id is key.not_found.
    assert client.keys.revoke(key.id).revoked_at == first
    assert _error(lambda: client.keys.revoke("ffffffffffffffff"))["code"] == "key.not_found"
    # The other key still works.
    assert chaz.Client(stack.settings, migrate=False, api_key=other_text).principal.name == (
        "user:bob"
    )

    secret = other_text.rsplit("_", 1)[1]
    presented: list[object] = [
        plaintext,  # revoked
        f"chz_{'0' * 16}_{secret}",  # unknown id, a real secret
        f"chz_{other.id}_{'A' * 43}",  # a real id, a wrong secret
        "chz_" + "x" * 60,  # malformed
        other_text + "x",
        other_text.upper(),
        "",
        " " + other_text,
        "chz_\x00",
    ]
    errors = [
        _error(lambda k=k: chaz.Client(stack.settings, migrate=False, api_key=k)) for k in presented
    ]
    assert errors == [
        {"code": "auth.unauthenticated", "message": "the API key is not valid", "retryable": False}
    ] * len(presented)
    # The refusal in settings is the same.
    bad = stack.settings.model_copy(update={"api_key": plaintext})
    assert _error(lambda: chaz.Client(bad, migrate=False)) == errors[0]


def test_bad_principals_projects_and_grants_are_request_invalid(stack: Stack) -> None:
    client = stack.client
    cases: list[tuple[Any, str]] = [
        (lambda: chaz.Client(stack.settings, migrate=False, principal="alice"), "principal"),
        (lambda: chaz.Client(stack.settings, migrate=False, principal="user:"), "principal"),
        (lambda: chaz.Client(stack.settings, migrate=False, project="Acme"), "project"),
        (lambda: chaz.Client(stack.settings, migrate=False, project=""), "project"),
        (lambda: chaz.Client(stack.settings, migrate=False, grants=["root"]), "grants"),
        (
            lambda: chaz.Client(stack.settings, migrate=False, api_key="k", project="acme"),
            "api_key",
        ),
        (lambda: client.keys.create("alice", "acme", None), "principal"),
        (lambda: client.keys.create("user:alice", "a b", None), "project"),
        (lambda: client.keys.create("user:alice", "acme", "history.read,root"), "grants"),
        (lambda: client.keys.create("user:alice", "acme", None, label="x" * 256), "label"),
    ]
    for call, field in cases:
        err = _error(call)
        assert (err["code"], err["details"]["field"]) == ("request.invalid", field), err
    assert client.keys.list() == []


def test_the_default_client_is_an_operator_with_every_grant(stack: Stack) -> None:
    who = stack.client.principal
    assert (who.name, who.project, who.operator, who.grants) == (
        "user:local",
        "default",
        True,
        ALL_GRANTS,
    )
    named = stack.settings.model_copy(update={"principal": "user:carol", "project": "acme"})
    with chaz.Client(named, migrate=False, grants="history.read") as carol:
        assert (carol.principal.name, carol.principal.project) == ("user:carol", "acme")
        assert carol.principal.grants == {Grant.HISTORY_READ}


def test_settings_never_show_the_key() -> None:
    settings = Settings(_env_file=None, api_key="chz_0123456789abcdef_" + "s" * 43)
    assert settings.masked()["api_key"] == "****"
    assert "sss" not in repr(settings) and "sss" not in str(settings.model_dump())
