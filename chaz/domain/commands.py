"""The idempotency key of a control command (``execution.cancel``, a session
Stop): what ``commands`` stores a command under (docs/contracts.md#cancel).

A caller's command id names a command within its own project. Stored under
the bare id, one project's ids would collide with another's, and a retry's
``conflict.idempotency_mismatch`` would tell a key holder that some other
project had used that id. The key is a digest of the project and the id:
fixed in length (the column holds 100 characters; a project name and an id
together may not fit), and no caller can pick an id that lands on another
project's key.
"""

from __future__ import annotations

import hashlib


def command_key(project: str, command_id: str) -> str:
    """The key ``command_id`` of ``project`` is stored under."""
    digest = hashlib.sha256(f"{project}\0{command_id}".encode()).hexdigest()
    return f"cmd:{digest}"
