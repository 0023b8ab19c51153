"""The HTTP twin of the producer API (chaz/client/remote/) matches the
in-process one: the same method signatures, every error class back from its
JSON answer, and no SQLAlchemy or Redis loaded on its path (docs/http.md#producer)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import chaz
from chaz import errors
from chaz.client.agents import Agents
from chaz.client.approvals import Approvals
from chaz.client.deliveries import Deliveries
from chaz.client.events import Events
from chaz.client.jobs import Jobs
from chaz.client.remote import NOT_YET
from chaz.client.remote.agents import RemoteAgents
from chaz.client.remote.approvals import RemoteApprovals
from chaz.client.remote.deliveries import RemoteDeliveries
from chaz.client.remote.errors import classes, error_of
from chaz.client.remote.events import RemoteEvents
from chaz.client.remote.jobs import RemoteJobs
from chaz.client.remote.namespaces import Unavailable, segment
from chaz.client.remote.schedules import RemoteSchedules
from chaz.client.remote.sessions import RemoteSessions
from chaz.client.remote.transport import KEY_HEADER, PREFIX, _parsed
from chaz.client.schedules import Schedules
from chaz.client.sessions import Sessions
from chaz.server import producer, state
from chaz.server.errors import body_of, status_of

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    (Sessions, RemoteSessions),
    (Jobs, RemoteJobs),
    (Agents, RemoteAgents),
    (Deliveries, RemoteDeliveries),
    (Events, RemoteEvents),
    (Schedules, RemoteSchedules),
    (Approvals, RemoteApprovals),
]


def public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def shape(fn: object) -> list[tuple[str, object, object]]:
    params = list(inspect.signature(fn).parameters.values())  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in params]


@pytest.mark.parametrize(("local", "remote"), PAIRS, ids=lambda c: c.__name__)
def test_every_method_has_its_twin_with_the_same_signature(local: type, remote: type) -> None:
    later = set(getattr(remote, "_later"))  # noqa: B009
    assert public(local) == public(remote) | later
    assert not public(remote) & later
    for name in public(remote):
        assert shape(getattr(local, name)) == shape(getattr(remote, name)), name
        ret = inspect.signature(getattr(local, name)).return_annotation
        assert ret == inspect.signature(getattr(remote, name)).return_annotation, name


def test_every_producer_method_is_carried_and_only_the_operators_are_not() -> None:
    for _, remote in PAIRS:
        assert not getattr(remote, "_later"), remote.__name__  # noqa: B009
    with pytest.raises(AttributeError):
        RemoteSessions(None).no_such_method  # type: ignore[arg-type]  # noqa: B018
    assert set(NOT_YET) == {"keys", "projects"}


def test_a_namespace_not_carried_is_refused_naming_the_method() -> None:
    with pytest.raises(errors.Unsupported) as refused:
        Unavailable("keys").create("user:x", "p", [])
    assert refused.value.field == "keys.create"


def test_the_client_and_the_server_agree_on_the_prefix_and_the_header() -> None:
    assert PREFIX == producer.PREFIX
    assert KEY_HEADER == state.KEY_HEADER


def every_error_class() -> list[type[errors.ChazError]]:
    return sorted(classes().values(), key=lambda c: c.code)


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.code)
def test_every_error_comes_back_as_its_class(cls: type[errors.ChazError]) -> None:
    sent = cls("it went wrong", field="content", limit=3)
    sent.details["message"] = "a detail named like an argument"
    back = error_of(status_of(sent), json.dumps(body_of(sent)).encode())
    assert type(back) is cls
    assert (back.code, back.message, back.details) == (sent.code, sent.message, sent.details)


def test_an_error_without_a_chaz_body_is_its_status_class() -> None:
    assert type(error_of(404, b"<html>nope</html>")) is errors.NotFound
    assert type(error_of(503, b"")) is errors.BackendUnavailable
    unknown = error_of(409, json.dumps({"code": "conflict.future", "message": "m"}).encode())
    assert type(unknown) is errors.Conflict and unknown.details == {"code": "conflict.future"}
    assert type(error_of(418, b"teapot")) is errors.ChazError


def test_refs_that_cannot_travel_in_a_path_are_refused() -> None:
    assert segment("session", "my name?") == "my%20name%3F"
    for bad in ("", "a/b", "..", ".", 3):
        with pytest.raises(errors.ValidationError) as refused:
            segment("session", bad)
        assert refused.value.field == "session"


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",  # an unclosed IPv6 host
        "http://h:notaport",
        "http://h:70000",
        "http://h:0",
        "http:///no-host",
        "http://h\x00/",
        "http://a b/",
        "ftp://h",
    ],
)
def test_a_url_that_cannot_be_parsed_is_request_invalid_naming_url(url: str) -> None:
    # httpx's own InvalidURL reached the caller for the first four.
    with pytest.raises(errors.ValidationError) as refused:
        chaz.Client(url=url, api_key="chz_x_y")
    assert (refused.value.code, refused.value.field) == ("request.invalid", "url")


def test_an_unreachable_servers_error_masks_its_urls_password() -> None:
    with pytest.raises(errors.BackendUnavailable) as caught:
        chaz.Client(url="http://proxy:s3cret@127.0.0.1:9", api_key="chz_x_y")
    said = json.dumps(caught.value.to_dict())
    assert "s3cret" not in said and "proxy:****@127.0.0.1:9" in said, said


def test_server_sent_events_are_parsed_with_comments_as_pings() -> None:
    lines = [": ping", "event: entry", 'data: {"a":', "data: 1}", "", "event: end", "data: {}"]
    assert list(_parsed(iter(lines))) == [("ping", None), ("entry", {"a": 1}), ("end", {})]


def test_a_url_client_loads_neither_sqlalchemy_nor_redis() -> None:
    """Its construction fails (nothing listens) after the imports it needs."""
    code = (
        "import sys, chaz\n"
        "try:\n"
        "    chaz.Client(url='http://127.0.0.1:9', api_key='chz_x')\n"
        "except chaz.errors.BackendUnavailable:\n"
        "    pass\n"
        "loaded = [m for m in ('sqlalchemy', 'redis', 'celery', 'alembic') if m in sys.modules]\n"
        "print(loaded)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_import_chaz_does_not_load_httpx() -> None:
    code = "import sys, chaz, chaz.client; print('httpx' in sys.modules)"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
