"""``chaz keys``: API keys for clients that are not operators (docs/security.md#api-keys)."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.keys import ApiKey

#: Said with every new key: its plaintext exists nowhere else.
NOT_SHOWN_AGAIN = "store this key now: it is not shown again (only its SHA-256 is kept)"


def _grants(k: ApiKey) -> str:
    return "all" if k.grants is None else ",".join(k.grants) or "none"


def cmd_keys_create(ctx: Context) -> int:
    """Create a key and print its plaintext, once."""
    a = ctx.args
    key, plaintext = ctx.client.keys.create(a.principal_of_key, a.project_of_key, a.grants, a.label)
    if ctx.out.json_mode:
        ctx.out.json({**key.model_dump(mode="json"), "key": plaintext, "warning": NOT_SHOWN_AGAIN})
        return EXIT_OK
    ctx.out.line(plaintext)
    ctx.out.note(
        f"key {key.id} for {key.principal} in project {key.project} ({_grants(key)}); "
        + NOT_SHOWN_AGAIN
    )
    return EXIT_OK


def cmd_keys_revoke(ctx: Context) -> int:
    """Revoke a key: it authenticates nobody from now on."""
    key = ctx.client.keys.revoke(ctx.args.key_id)
    if ctx.out.json_mode:
        ctx.out.json(key.model_dump(mode="json"))
    else:
        ctx.out.line(f"key {key.id} revoked")
    return EXIT_OK


def cmd_keys_ls(ctx: Context) -> int:
    """List keys (of one project), oldest first; never their secrets."""
    found = ctx.client.keys.list(ctx.args.project_of_key)
    if ctx.out.json_mode:
        ctx.out.json([k.model_dump(mode="json") for k in found])
        return EXIT_OK
    rows = [
        [
            k.id,
            k.principal,
            k.project,
            _grants(k),
            k.label or "",
            k.created_at,
            k.revoked_at if k.revoked else "",
        ]
        for k in found
    ]
    ctx.out.table(
        "keys", ["ID", "PRINCIPAL", "PROJECT", "GRANTS", "LABEL", "CREATED", "REVOKED"], rows
    )
    return EXIT_OK
