"""`python -m benchmarks.ab [--base REV]`: this working tree against a revision, paired.

This VM's speed drifts by 15-65% from one hour to the next, so two separate bench runs
cannot show a 5% change. Here both builds serve at once (each its own `serve` process and
SQLite home, the base build exported with `git archive`), and short runs alternate between
them: each pair sees the same machine, and the median of the per-pair ratios is the change.
Cases are those of the `http` scenario at 16 connections (`--connections`), on SQLite or
PostgreSQL (`--database`; each build its own scratch database), and `soak`
(`scripts/soak.py` against each build in turn). `--env NAME=VALUE` sets a variable for the
candidate only, `--base-env` for the base only, to compare a setting: run it both ways
round, as the two slots are not alike (an A/A run is not 1.0x on this VM), and the square
root of the ratio of the two medians is the setting's effect. The base must share the
working tree's schema.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from pathlib import Path

from .harness import SCALES, Context, median, postgres_admin_url
from .loadgen import build_wsload
from .network import CASES, Case, Setup, _drive, _serving
from .servers import ROOT

SOAK = "soak"


def _export(rev: str, into: Path) -> Path:
    """The revision's `service/` tree (and the migrations beside it), as `git archive`
    has them."""
    archive = into / "base.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "service", "migrations"],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "service"


def _soak(source: Path | None, env: dict[str, str], seconds: float) -> tuple[float, float]:
    """One `scripts/soak.py` run on a build: its throughput and server CPU ms a request."""
    paths = [str(source)] if source else []
    run_env = os.environ | env | {"PYTHONPATH": os.pathsep.join([*paths, str(ROOT / "service")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), "--json", "--duration", str(seconds)],
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the soak failed: {done.stdout}{done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    return float(summary["throughput"]), float(summary["server_cpu_ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("--base", default="HEAD", help="git revision to compare with")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE, candidate only")
    parser.add_argument("--base-env", action="append", default=[], help="NAME=VALUE, base only")
    names = [c.name for c in CASES] + [SOAK]
    parser.add_argument("--cases", default="WebSocket list,HTTP configure", help=",".join(names))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    chosen = [n.strip() for n in args.cases.split(",")]
    if unknown := set(chosen) - set(names):
        parser.error(f"unknown cases {sorted(unknown)}")
    env = dict(item.split("=", 1) for item in args.env)
    base_env = dict(item.split("=", 1) for item in args.base_env)
    with tempfile.TemporaryDirectory(prefix="tkv-ab-") as tmp:
        work = Path(tmp)
        base_source = _export(args.base, work)
        ctx = Context(SCALES["quick"], work, (args.database,), postgres_admin_url(), log=print)
        wsload = build_wsload(work)
        cases = [c for c in CASES if c.name in chosen]
        with ExitStack() as stack:
            builds = {}
            if cases:
                builds = {
                    "base": stack.enter_context(
                        _serving(ctx, args.database, "base", base_source, base_env)
                    ),
                    "this": stack.enter_context(_serving(ctx, args.database, "this", None, env)),
                }
            for case in cases:
                _pairs(case, builds, wsload, args.pairs, args.seconds, args.connections)
        if SOAK in chosen:
            rates = []
            for n in range(args.pairs):
                base = _soak(base_source, base_env, args.seconds)
                this = _soak(None, env, args.seconds)
                rates.append(this[0] / base[0])
                print(
                    f"soak pair {n}: base {base[0]:.0f} req/s {base[1]:.2f} ms CPU, "
                    f"this {this[0]:.0f} req/s {this[1]:.2f} ms CPU, {rates[-1]:.3f}x"
                )
            print(f"soak: median {median(rates):.3f}x over {len(rates)} pairs")
    return 0


def _pairs(
    case: Case, builds: dict[str, Setup], wsload: Path, pairs: int, seconds: float, conns: int
) -> None:
    rates, cpus = [], []
    for n in range(pairs):
        order = ("base", "this") if n % 2 == 0 else ("this", "base")
        got = {}
        for name in order:
            setup = builds[name]
            got[name] = _drive(case, setup, setup.server, True, wsload, conns, seconds)
        (base, base_cpu), (this, this_cpu) = got["base"], got["this"]
        rates.append(this.rate / base.rate)
        cpus.append(this_cpu / base_cpu)
        print(
            f"{case.name} pair {n}: base {base.rate:.0f} req/s p99 {base.p99_ms:.1f} ms "
            f"{base_cpu * 1000:.3f} ms CPU, this {this.rate:.0f} req/s p99 {this.p99_ms:.1f} "
            f"ms {this_cpu * 1000:.3f} ms CPU, {rates[-1]:.3f}x"
        )
    print(
        f"{case.name}: median {median(rates):.3f}x req/s, {median(cpus):.3f}x CPU a request "
        f"over {pairs} pairs (min {min(rates):.3f}, max {max(rates):.3f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
