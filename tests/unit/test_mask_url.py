"""Masking secrets in URLs: every spelling of a password is hidden, the rest is kept."""

from __future__ import annotations

import pytest

from chaz.settings import Settings, mask_url

CASES = [
    ("postgresql+psycopg://u:pw-s3cr3t@h/db", "postgresql+psycopg://u:****@h/db"),
    ("redis://:hunter2@h:6379/0", "redis://:****@h:6379/0"),
    # Raw @ / : ; in a password: the credentials end at the last @.
    ("redis://:p@ss@w0rd@h:6379/0", "redis://:****@h:6379/0"),
    ("redis://user:pa/ss:wo;rd@h:6379/0", "redis://user:****@h:6379/0"),
    # A password as a query parameter, alone or among others.
    ("postgresql://u@h/db?password=s3cr3t", "postgresql://u@h/db?password=****"),
    (
        "postgresql://u@h/db?sslmode=require&password=s3@cr/3t&application_name=x",
        "postgresql://u@h/db?sslmode=require&password=****&application_name=x",
    ),
    (
        "unix:///tmp/h/redis.sock?db=0&password=s3cr3t",
        "unix:///tmp/h/redis.sock?db=0&password=****",
    ),
    ("postgresql://u:pw@h/db?PASSWORD=other", "postgresql://u:****@h/db?PASSWORD=****"),
    # Nothing secret: unchanged.
    ("sqlite:////tmp/home/chaz.db", "sqlite:////tmp/home/chaz.db"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
    (".chaz", ".chaz"),
]


@pytest.mark.parametrize(("url", "masked"), CASES)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


@pytest.mark.parametrize("secret", ["s3cr3t", "p@ss/w:rd;x", "a@b@c"])
def test_no_setting_prints_a_password(secret: str) -> None:
    settings = Settings(
        _env_file=None,
        database_url=f"postgresql://u:{secret}@h/db?password={secret}",
        redis_url=f"redis://:{secret}@h:6379/0?password={secret}",
        openai_api_key=secret,
    )
    assert secret not in repr(settings.masked())


@pytest.mark.parametrize("secret", ["s3cr3t", "p@ss/w:rd;x"])
def test_the_settings_repr_and_str_mask_passwords(secret: str) -> None:
    # A Settings object ends up in logs and tracebacks (repr of a local).
    settings = Settings(
        _env_file=None,
        database_url=f"postgresql://u:{secret}@h/db?password={secret}",
        redis_url=f"redis://:{secret}@h:6379/0",
        openai_api_key=secret,
        api_key=secret,
    )
    for shown in (repr(settings), str(settings)):
        assert secret not in shown
        assert "database_url='postgresql://u:****@" in shown
