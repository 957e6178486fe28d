"""A throw-away PostgreSQL cluster's binaries and free local ports."""

from __future__ import annotations

import os
from pathlib import Path


def postgres_bin() -> "Path | None":
    """The folder of PostgreSQL's initdb/pg_ctl: $ATTNSIM_PG_BIN, else the newest /usr/lib/postgresql/*/bin, else PATH."""
    import shutil

    candidates = [os.environ.get("ATTNSIM_PG_BIN", "")]
    candidates += [
        str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    ]
    found = shutil.which("pg_ctl")
    candidates.append(str(Path(found).parent) if found else "")
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
