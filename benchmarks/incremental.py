"""incremental: the whole `toolkit-vault audit verify` and `check` commands after N new
events on a large vault, old code against new, each run on a fresh copy (issue 53).

Each run of `audit verify` or `check` leaves a mark in the vault home, so a run is measured
on a copy of a prepared directory (`prepare`: the vault as `verify_pair fill` made it,
verified and checked once so both marks stand, then N tokens made through the store). A
run is the installed console script with a code tree first on `PYTHONPATH` (`--old`,
`--new`: `service` directories), alternating old and new; it reports wall seconds, the
child's CPU seconds (with its workers) and the load average when it ended. `tokens list`
and `toolkits list` run the same way (`once`, on the large vault and on an empty one that
`init` made, in turn).
On demand only:
python -m benchmarks.incremental prepare /work/notes/vault1m /tmp/inc/prepared --tokens 1000
python -m benchmarks.incremental pair /tmp/inc/prepared --old OLD/service --new service
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

COMMANDS = {
    "verify": ["audit", "verify"],
    "check": ["check"],
    "tokens": ["tokens", "list"],
    "toolkits": ["toolkits", "list"],
}
SCRIPT = Path(sys.executable).with_name("toolkit-vault")


def _env(directory: Path, code: Path) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=str(code.resolve()),
        TOOLKIT_VAULT_HOME=str(directory / "home"),
        TOOLKIT_VAULT_DATABASE_URL=f"sqlite:///{directory / 'vault.db'}",
    )


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(directory: Path, command: str, code: Path) -> dict[str, Any]:
    """One command on `directory` with `code`, timed from outside (the whole process)."""
    started, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [str(SCRIPT), *COMMANDS[command]],
        env=_env(directory, code),
        capture_output=True,
        text=True,
        check=False,
    )
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if done.returncode != 0:
        said = done.stdout[-2000:] + done.stderr[-2000:]
        raise SystemExit(f"{command} with {code} failed:\n{said}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "load": round(os.getloadavg()[0], 2),
        "said": done.stdout.strip().splitlines()[-1][:160] if done.stdout.strip() else "",
    }


def _add_tokens(directory: Path, tokens: int) -> None:
    """`tokens` principals made through the store's write path, as `tokens create` does."""
    from toolkit_vault.access.principals import create_token
    from toolkit_vault.bootstrap import open_vault
    from toolkit_vault.settings import load_settings

    os.environ.update(
        TOOLKIT_VAULT_HOME=str(directory / "home"),
        TOOLKIT_VAULT_DATABASE_URL=f"sqlite:///{directory / 'vault.db'}",
    )
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    vault = open_vault(load_settings(), ToolkitRegistry(), current=False, launches=False)
    stamp = int(time.time())
    try:
        for n in range(tokens):
            create_token(vault.store, "agent", f"inc-{stamp}-{n}", actor="bench")
    finally:
        vault.store.close()


def prepare(base: Path, target: Path, tokens: int, code: Path) -> None:
    """A copy of `base`, verified and checked (the marks), then `tokens` new events."""
    shutil.copytree(base, target, symlinks=True)
    for command in ("verify", "check"):
        print(command, run(target, command, code), file=sys.stderr)
    env = _env(target, code)
    subprocess.run(
        [sys.executable, "-m", "benchmarks.incremental", "tokens", str(target), str(tokens)],
        env={**env, "PYTHONPATH": f"{code.resolve()}{os.pathsep}{Path.cwd()}"},
        check=True,
    )


def pair(
    prepared: Path, old: Path, new: Path, commands: list[str], rounds: int, scratch: Path
) -> None:
    for n in range(rounds):
        order = [("old", old), ("new", new)]
        if n % 2:
            order.reverse()
        for command in commands:
            for name, code in order:
                copy = scratch / f"run-{name}"
                if copy.exists():
                    shutil.rmtree(copy)
                shutil.copytree(prepared, copy, symlinks=True)
                found = run(copy, command, code)
                shutil.rmtree(copy)
                line = {"round": n, "command": command, "code": name, **found}
                print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.incremental", description=__doc__)
    parser.add_argument("what", choices=("prepare", "tokens", "pair", "once"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("target", nargs="?")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--old", type=Path)
    parser.add_argument("--new", type=Path, default=Path("service"))
    parser.add_argument(
        "--commands", nargs="+", choices=tuple(COMMANDS), default=["verify", "check"]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scratch", type=Path, default=Path(tempfile.gettempdir()) / "incremental-runs"
    )
    args = parser.parse_args(argv)
    if args.what == "prepare":
        prepare(args.directory, Path(args.target), args.tokens, args.new)
    elif args.what == "tokens":
        _add_tokens(args.directory, int(args.target))
    elif args.what == "once":
        for command in args.commands:
            print(json.dumps({"command": command, **run(args.directory, command, args.new)}))
    else:
        args.scratch.mkdir(parents=True, exist_ok=True)
        pair(args.directory, args.old, args.new, args.commands, args.rounds, args.scratch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
