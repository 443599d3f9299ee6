"""A throwaway PostgreSQL cluster (initdb + pg_ctl) for tests, benchmarks and local runs.

initdb refuses to run as root, so as root the server runs as the ``postgres`` system user via runuser.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def _bin_dir() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if not candidates:
        raise PostgresUnavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: install them (Debian: apt-get install postgresql)"
        )
    return Path(candidates[0]).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalPostgres:
    data_dir: Path
    port: int
    _as_user: list[str]
    _bin: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        subprocess.run(
            [*self._as_user, str(self._bin / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def restart(self) -> None:
        """Stop the server, ending every session as a restart or a failover does, and start it again with the
        options it was started with (a server shut down is only started)."""
        self._pg_ctl("restart", "-l", str(self.data_dir.parent / "log"))

    def shut_down(self) -> None:
        """Stop the server, keeping its data: an outage, until restart."""
        self._pg_ctl("stop")

    def _pg_ctl(self, action: str, *options: str) -> None:
        command = [str(self._bin / "pg_ctl"), "-D", str(self.data_dir), *options, "-m", "fast", "-w", action]
        subprocess.run([*self._as_user, *command], check=True, capture_output=True)


def start_postgres(port: int | None = None) -> LocalPostgres:
    bindir = _bin_dir()
    root = Path(tempfile.mkdtemp(prefix="lakepurge-pg-"))
    data = root / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        root.chmod(0o700)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = port or free_port()
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    # Durability is pointless for a throwaway cluster, and the stock memory settings (128 MB of shared buffers,
    # 1 GB of WAL between checkpoints) are sized for a small VM, not an index of millions of rows: set them the way
    # an operator would for this workload, so benchmark figures stay comparable to a tuned server.
    settings = {
        "listen_addresses": "127.0.0.1",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "shared_buffers": "1GB",
        "work_mem": "64MB",
        "maintenance_work_mem": "512MB",
        "max_wal_size": "8GB",
        "checkpoint_timeout": "30min",
        "wal_level": "minimal",
        "max_wal_senders": "0",
    }
    options = f"-p {port} -k {root} " + " ".join(f"-c {name}={value}" for name, value in settings.items())
    result = subprocess.run(
        [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "start"],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else result.stderr
        raise PostgresUnavailable(f"PostgreSQL did not start on port {port}: {log[-2000:]}")
    server = LocalPostgres(data, port, as_user, bindir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.1)
    server.stop()
    raise PostgresUnavailable(f"PostgreSQL did not accept connections on port {port}")
