"""Private files: ``CHAZ_HOME`` and what chaz writes into it are for its owner only.

The home holds the SQLite database (every session's content), the Redis
socket (anyone who can connect can read and change coordination state),
logs and pid files. Directories are created 0700 and files 0600, whatever
the process umask; processes chaz starts there (redis-server, workers) run
under :data:`PRIVATE_UMASK` so that their files are private too.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The umask of the processes chaz starts in its home: no access for group or others.
PRIVATE_UMASK = 0o077


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) if needed; a directory it creates is 0700.

    An existing directory keeps its mode: it may be the user's own (``--home .``).
    """
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # another process made it first; its mode is its creator's
        else:
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask; be exact
    return path


def create_private(path: Path) -> Path:
    """Create ``path`` as an empty 0600 file unless it exists (then leave it alone).

    An existing file is never opened: closing any descriptor of a SQLite
    database drops every POSIX lock this process holds on it, so a second
    engine made in a process whose first engine has the file open would
    leave the first one's connections reading a stale snapshot (sqlite.org,
    "How To Corrupt An SQLite Database File", 2.2).
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return path
    os.close(fd)
    return path
