"""verify-pair: old against new code on one large vault, each step in its own process.

`verify_scale` fills a fresh vault per run, so two code versions never meet the same rows
and a loaded machine's noise swamps the difference. Here the vault is filled once into a
directory (`fill`), and each step (`verify`, `check`, `create`, `backup-verify`) runs in a
child process with the code tree given (`--code`: a `service` directory), alternating old
and new (`pair`); each reports its CPU seconds (the child's, with its workers; `own_cpu_s`
without them) and wall seconds, and the load average when it ended. The floor
(`verify_scale._floor`) runs on the new code. On demand only:
python -m benchmarks.verify_pair fill DIR --principals 10000 --versions 100000 --events 100000
python -m benchmarks.verify_pair pair DIR --old OLD/service --new service --steps verify check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["main"]

STEPS = ("verify", "check", "create", "backup-verify", "floor")


def _settings(directory: Path) -> Any:
    from toolkit_vault.settings import VaultSettings

    saved = json.loads((directory / "vault.json").read_text())
    return VaultSettings(
        directory / "home", saved["url"], "file", saved["vault_id"], initialized=True
    )


def _fill(directory: Path, principals: int, versions: int, events: int) -> None:
    from toolkit_vault.bootstrap import init_vault, open_vault
    from toolkit_vault.settings import VaultSettings

    from .capacity import Fill, fill
    from .toolkit import bench_registry
    from .verify_scale import fill_events

    directory.mkdir(parents=True, exist_ok=False)
    url = f"sqlite:///{directory / 'vault.db'}"
    vault_id = str(uuid.uuid4())
    settings = VaultSettings(directory / "home", url, "file", vault_id, initialized=False)
    init_vault(settings)
    vault = open_vault(dataclasses.replace(settings, initialized=True), bench_registry(1))
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        fill(vault, Fill(principals, versions), log)
        fill_events(vault, events, log)
        # as a server following the chain writes one every 10,000 events: without it, the
        # first command to follow the chain (`toolkits list`) would walk all of it
        vault.store.write_checkpoint()
        if vault.store.witness is not None:
            vault.store.witness.flush()
    finally:
        vault.store.engine.dispose()
    (directory / "vault.json").write_text(json.dumps({"url": url, "vault_id": vault_id}))


def _step(directory: Path, step: str) -> dict[str, Any]:
    """One step, timed in this process (run as a child: `run`)."""
    from toolkit_vault.backup import create_backup, verify_backup
    from toolkit_vault.bootstrap import open_vault

    from .toolkit import bench_registry
    from .verify_scale import _cpu, _floor

    settings = _settings(directory)
    out = directory / "backup.tkvb"
    if step == "create":
        started, cpu = time.perf_counter(), _cpu()
        create_backup(settings, out)
        return {"wall_s": time.perf_counter() - started, "cpu_s": _cpu() - cpu}
    if step == "backup-verify":
        started, cpu, own = time.perf_counter(), _cpu(), _own_cpu()
        report = verify_backup(out, settings)
        assert report.ok, report.audit
        return {
            "wall_s": time.perf_counter() - started,
            "cpu_s": _cpu() - cpu,
            "own_cpu_s": _own_cpu() - own,
        }
    vault = open_vault(settings, bench_registry(1))
    try:
        if step == "floor":
            return _floor(vault)
        started, cpu = time.perf_counter(), _cpu()
        own = _own_cpu()
        if step == "verify":
            audit = vault.verify_audit(full=True)
            assert audit.ok, audit.message
            found: dict[str, Any] = {"events": audit.events}
        else:
            checked = vault.check(full=True)
            assert checked["ok"], checked["audit"]
            found = {"versions": checked["versions"]}
        return {
            "wall_s": time.perf_counter() - started,
            "cpu_s": _cpu() - cpu,
            "own_cpu_s": _own_cpu() - own,
            **found,
        }
    finally:
        vault.store.engine.dispose()


def _own_cpu() -> float:
    """This process's CPU seconds alone (`cpu_s` adds its workers'): the verifying
    process's share, which sets the wall time when the workers keep pace."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _child(directory: Path, step: str, code: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=f"{code.resolve()}{os.pathsep}{Path.cwd()}")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.verify_pair", "run", str(directory), step],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{step} with {code} failed:\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**found, "load": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verify_pair", description=__doc__)
    parser.add_argument("what", choices=("fill", "run", "pair"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("step", nargs="?", choices=STEPS)
    parser.add_argument("--principals", type=int, default=10_000)
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--old", type=Path)
    parser.add_argument("--new", type=Path, default=Path("service"))
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=["verify", "check"])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    if args.what == "fill":
        _fill(args.directory, args.principals, args.versions, args.events)
        return 0
    if args.what == "run":
        print(json.dumps(_step(args.directory, args.step)))
        return 0
    for n in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        if n % 2:
            order.reverse()
        for step in args.steps:
            for name, code in order:
                if code is None:
                    continue
                found = _child(args.directory, step, code)
                print(json.dumps({"round": n, "step": step, "code": name, **found}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
