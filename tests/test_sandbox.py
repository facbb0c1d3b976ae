"""The sandbox against a hostile process (tests/sandbox/hostile.py): real bubblewrap, real
namespaces and limits, a fake vault home whose files anyone could read (so only the
sandbox's view stands between them and the process), and a vault stand-in
(tests/sandbox/launcher.py) with a canary in its own environment that launches carelessly.
No database. Without bubblewrap these fail (scripts/components/bubblewrap.sh installs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit_vault import sandbox
from toolkit_vault.sandbox import (
    Bind,
    Confinement,
    ConfinementRefused,
    SandboxUnavailable,
    confine,
    launch,
    sandbox_available,
    why_no_sandbox,
)

HERE = Path(__file__).parent / "sandbox"
PYTHON = "/usr/bin/python3"  # the system's: under /usr, so inside the sandbox's view
HOSTILE = "/opt/hostile/hostile.py"
VAULT_FILES = ("master.key", "vault.db", "vault.db-wal", "witness", "vault.json")
ALLOWED_NAMES = {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PWD", "API_KEY"}


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory every user may pass through (the sandbox runs as nobody when the tests
    run as root) holding a fake vault home, the hostile script and private directories."""
    base = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    os.chmod(base, 0o711)  # noqa: S103
    home = base / "vault-home"
    home.mkdir(mode=0o755)
    for name in VAULT_FILES:
        (home / name).write_text(f"VAULT-FILE-CANARY {name}")
        os.chmod(home / name, 0o644)  # readable by all: only the view may hide it
    scripts = base / "bin"
    scripts.mkdir(mode=0o755)
    shutil.copy(HERE / "hostile.py", scripts / "hostile.py")
    os.chmod(scripts / "hostile.py", 0o644)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def policy(place: Path, name: str, **fields: object) -> Confinement:
    return Confinement(
        private_dir=place / name,
        read_only=(Bind(place / "bin", Path("/opt/hostile")),),
        hidden=(place / "vault-home",),
        **fields,  # type: ignore[arg-type]
    )


def read_line(stream: object, deadline: float) -> str:
    """One line from a pipe within the deadline (a test must not hang on a sandbox)."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no line in time (so far {line!r})"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 1)
            assert chunk, f"pipe closed (so far {line!r})"
            line += chunk
    return line.decode().strip()


def closes_within(stream: object, seconds: float) -> bool:
    """True when every holder of the pipe's write end has gone (EOF) within `seconds`."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0] and not os.read(fd, 65536):
            return True
    return False


def start_launcher(spec: dict[str, object], vault_canary: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VAULT_CANARY": vault_canary}
    return subprocess.Popen(
        [sys.executable, str(HERE / "launcher.py"), json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def other_sandbox(place: Path) -> Iterator[str]:
    """Another confined process, its secret in its environment; yields the secret."""
    secret = f"OTHER-SANDBOX-CANARY-{uuid.uuid4().hex}"
    other = confine([PYTHON, HOSTILE, "linger"], {"OTHER_SECRET": secret}, policy(place, "other"))
    proc = subprocess.Popen(other.argv, stdout=subprocess.PIPE, **other.popen_kwargs())
    assert read_line(proc.stdout, time.monotonic() + 15) == "ready"
    yield f"{secret} {proc.pid}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_a_hostile_process_reaches_nothing_of_the_vaults(
    place: Path, listener: int, other_sandbox: str, network: bool
) -> None:
    assert sandbox_available()
    other_secret, other_pid = other_sandbox.split()
    vault_canary = f"VAULT-ENV-CANARY-{uuid.uuid4().hex}"
    limits = {"processes": 16, "open_files": 64, "memory_bytes": 256 * 1024 * 1024}
    vault_home = place / "vault-home"
    attack = {
        "vault_canary": vault_canary,
        "launcher_pid": "LAUNCHER_PID",
        "other_canary": other_secret,
        "port": listener,
        **limits,
        "read": [
            *(str(vault_home / name) for name in VAULT_FILES),
            "/proc/LAUNCHER_PID/environ",
            f"/proc/{other_pid}/environ",
            f"/proc/{os.getpid()}/environ",
            f"{os.getcwd()}/pyproject.toml",
        ],
        "write": [
            "/evil",
            "/usr/evil",
            "/etc/evil",
            "/dev/evil",
            "/opt/hostile/evil",
            str(vault_home / "evil"),
            "/home/sandbox/ok",
            "/tmp/ok",
        ],
    }
    spec = {
        "argv": [PYTHON, HOSTILE, "attack", json.dumps(attack)],
        "env": {"API_KEY": "the-one-given-value"},
        "policy": {
            "private_dir": str(place / "server"),
            "read_only": [[str(place / "bin"), "/opt/hostile"]],
            "network": network,
            **limits,
        },
    }
    launcher = start_launcher(spec, vault_canary)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0
    _launcher_pid, report_line = out.decode().splitlines()
    report = json.loads(report_line)

    assert report["uid"] != 0
    for name in VAULT_FILES:
        assert report[f"read {vault_home / name}"].startswith("blocked"), name
    for key, value in report.items():
        assert "VAULT-FILE-CANARY" not in str(value), key
        assert vault_canary not in str(value), key
        assert other_secret not in str(value), key
    assert report["sees_the_vault_environment"] is False
    assert report["sees_another_sandbox_environment"] is False
    # its own PID namespace: only bwrap (PID 1) and itself, and no process of the machine
    assert report["processes in view"] == [1, 2]
    assert report["sees the launcher"] is False
    assert report[f"read {os.getcwd()}/pyproject.toml"].startswith("blocked")
    assert set(report["environment"]) <= ALLOWED_NAMES
    assert report["environment"]["API_KEY"] == "the-one-given-value"
    assert report["environment"]["HOME"] == "/home/sandbox" == report["cwd"]
    tops = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
    links = {top for top in tops if Path("/", top).exists()}
    assert set(report["listdir /"]) == {"dev", "etc", "home", "opt", "proc", "tmp", "usr", *links}

    for path in attack["write"][:-2]:
        assert report[f"write {path}"].startswith("blocked"), path
    assert not (vault_home / "evil").exists()
    assert report["write /home/sandbox/ok"] == report["write /tmp/ok"] == "ok: written"
    assert (place / "server" / "home" / "ok").read_text() == "hostile"
    assert (place / "server" / "tmp" / "ok").read_text() == "hostile"

    forked = report["fork"]
    assert forked.startswith("refused after") and int(forked.split()[2].rstrip(":")) < 16
    opened = report["open"]
    assert opened.startswith("refused after") and int(opened.split()[2].rstrip(":")) < 64
    assert report["allocate small"].startswith("ok")
    assert report["allocate past the limit"].startswith("blocked: MemoryError")
    assert report["connect"].startswith("ok" if network else "blocked")
    assert report["unshare user"].startswith("blocked")


def test_the_sandbox_dies_with_the_process_that_launched_it(place: Path) -> None:
    spec = {
        "argv": [PYTHON, HOSTILE, "linger", "3"],
        "env": {},
        "policy": {
            "private_dir": str(place / "server"),
            "read_only": [[str(place / "bin"), "/opt/hostile"]],
        },
    }
    launcher = start_launcher(spec, "unused")
    deadline = time.monotonic() + 15
    read_line(launcher.stdout, deadline)  # the launcher's pid
    assert read_line(launcher.stdout, deadline) == "ready"
    launcher.kill()
    launcher.wait()
    try:
        assert closes_within(launcher.stdout, 10), "a sandboxed process outlived its launcher"
    finally:  # when it fails, leave no orphan behind
        for pid in [pid for pid in all_pids() if str(place).encode() in cmdline(pid)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_sandbox_is_its_own_process_group_and_session(place: Path) -> None:
    started = confine([PYTHON, HOSTILE, "linger", "3"], {}, policy(place, "server"))
    proc = subprocess.Popen(started.argv, stdout=subprocess.PIPE, **started.popen_kwargs())
    try:
        assert read_line(proc.stdout, time.monotonic() + 15) == "ready"
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        inside = [pid for pid in descendants(proc.pid) if cmdline(pid).startswith(PYTHON.encode())]
        assert len(inside) == 4  # the server and its three children
        # --new-session: the server cannot reach the terminal of the process that ran bwrap
        assert all(os.getsid(pid) != os.getsid(proc.pid) for pid in inside)
        os.killpg(proc.pid, signal.SIGKILL)
        assert closes_within(proc.stdout, 10), "killing the group left a sandboxed process"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_bind_that_would_show_a_hidden_path_is_refused(place: Path) -> None:
    vault_home = place / "vault-home"
    link = place / "innocent"
    link.symlink_to(vault_home)
    for shown in (place, vault_home, vault_home / "witness", link):
        with pytest.raises(ConfinementRefused, match="keeps hidden"):
            confine(["true"], {}, policy(place, "server", read_write=(Bind(shown, Path("/data")),)))
    with pytest.raises(ConfinementRefused, match="keeps hidden"):
        confine(["true"], {}, Confinement(private_dir=vault_home / "servers", hidden=(vault_home,)))


def test_a_private_directory_that_is_a_link_is_refused(place: Path) -> None:
    (place / "server").mkdir()
    (place / "server" / "home").symlink_to(place / "vault-home")
    with pytest.raises(ConfinementRefused, match="not a link"):
        confine(["true"], {}, policy(place, "server"))


def test_bad_input_is_refused_without_its_value(place: Path) -> None:
    with pytest.raises(ConfinementRefused) as refused:
        confine(["true"], {"BAD NAME": "s3cret-value"}, policy(place, "server"))
    assert "s3cret-value" not in str(refused.value)
    with pytest.raises(ConfinementRefused) as refused:
        confine(["true"], {"TOKEN": "s3cret\0value"}, policy(place, "server"))
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ConfinementRefused, match="absolute"):
        Confinement(private_dir=Path("relative"))
    with pytest.raises(ConfinementRefused):
        confine([], {}, policy(place, "server"))
    with pytest.raises(ConfinementRefused):
        launch(["true"], {"BAD NAME": "s3cret-value"}, policy(place, "server"), sandbox=False)
    assert not (place / "server").exists()  # refused before anything was made


def test_a_launch_keeps_its_credentials_out_of_argv_and_repr(place: Path) -> None:
    given = {"API_KEY": "s3cret-value", "HOME": "/vault-home", "TMPDIR": "/vault-home"}
    started = confine(["true"], given, policy(place, "server"))
    assert started.confined
    assert started.env["HOME"] == "/home/sandbox" and started.env["TMPDIR"] == "/tmp"
    assert "s3cret-value" not in repr(started)
    assert all("s3cret-value" not in arg for arg in started.argv)
    assert started.env["API_KEY"] == "s3cret-value"


def test_without_a_sandbox_local_launches_are_refused_unless_turned_off(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = place / "no-programs"
    empty.mkdir()
    # a machine without bubblewrap: the system directories hold no bwrap
    monkeypatch.setattr(sandbox.bubblewrap, "_SYSTEM_PATH", str(empty))
    why_no_sandbox.cache_clear()
    try:
        assert not sandbox_available()
        with pytest.raises(SandboxUnavailable) as refused:
            launch(["true"], {}, policy(place, "server"))
        assert "(bwrap, " in str(refused.value)  # what is missing, for the operator
        assert str(refused.value).endswith("install bubblewrap, or turn the sandbox off")
    finally:
        monkeypatch.undo()
        why_no_sandbox.cache_clear()
    assert sandbox_available()


def test_turned_off_it_still_starts_clean_in_its_private_home(place: Path) -> None:
    os.environ["VAULT_INHERITED_CANARY"] = "inherited"
    try:
        started = launch(
            [PYTHON, "-c", "import json, os; print(json.dumps([dict(os.environ), os.getcwd()]))"],
            {"API_KEY": "given"},
            Confinement(private_dir=place / "server"),
            sandbox=False,
        )
    finally:
        del os.environ["VAULT_INHERITED_CANARY"]
    assert not started.confined
    out = subprocess.run(started.argv, capture_output=True, check=True, **started.popen_kwargs())
    environment, cwd = json.loads(out.stdout)
    assert set(environment) <= ALLOWED_NAMES
    assert environment["HOME"] == cwd == str(place / "server" / "home")
    assert environment["TMPDIR"] == str(place / "server" / "tmp")


def test_the_runtimes_servers_need_start_confined(place: Path) -> None:
    """The limits and the small /etc must not break what servers run on: Node with
    WebAssembly (its engine reserves guard regions of address space a limit on RLIMIT_AS
    refuses; Node's own fetch parses HTTP in WebAssembly), Python with TLS roots, and
    name resolution."""
    wasm = "new WebAssembly.Memory({initial: 1}); console.log(process.version)"
    node = confine(["node", "-e", wasm], {}, policy(place, "node"))
    out = subprocess.run(node.argv, capture_output=True, timeout=60, **node.popen_kwargs())
    assert out.returncode == 0 and out.stdout.startswith(b"v"), out.stderr
    check = (
        "import socket, ssl; "
        "assert ssl.create_default_context().cert_store_stats()['x509_ca'] > 0; "
        "print(socket.getaddrinfo('localhost', 80)[0][4][0])"
    )
    python = confine([PYTHON, "-c", check], {}, policy(place, "python", network=False))
    out = subprocess.run(python.argv, capture_output=True, timeout=60, **python.popen_kwargs())
    assert out.returncode == 0 and out.stdout.strip() in (b"127.0.0.1", b"::1"), out.stderr
