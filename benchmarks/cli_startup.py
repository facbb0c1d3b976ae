"""cli start-up: wall time of `toolkit-vault version` and `toolkit-vault --help`, each a
cold process of the installed console script, against `python -c "import click"` on the
same interpreter, the floor of any click command line. Neither command opens a vault, so
what they add to the floor is the command line's own imports; a command that runs (and its
own `-h`) imports its module then, which the other scenarios' figures include.

The runs alternate between the three commands, so the machine's drift hits them alike;
the figure is the median. No database: the rows say `-`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .harness import Context, Result, median

__all__ = ["bound", "run"]

RUNS = {"full": 15, "quick": 9, "tiny": 3}  # each command's, after one warm-up run
TARGET = 3.0  # the issue's: within 3x of importing click


def _console_script() -> list[str]:
    """The console script beside this interpreter (its shebang is this interpreter), else
    the same `main` run by this interpreter."""
    script = Path(sys.executable).parent / "toolkit-vault"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from toolkit_vault.cli import main; main()"]


def _commands() -> dict[str, list[str]]:
    cli = _console_script()
    return {
        "baseline": [sys.executable, "-c", "import click"],
        "toolkit-vault version": [*cli, "version"],
        "toolkit-vault --help": [*cli, "--help"],
    }


def _wall_ms(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, timeout=60, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def run(ctx: Context) -> list[Result]:
    runs = RUNS.get(ctx.scale.name, RUNS["quick"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["TOOLKIT_VAULT_HOME"] = str(ctx.work / "cli-no-home")  # never created: neither opens it
    commands = _commands()
    for command in commands.values():
        _wall_ms(command, env)  # the first start also fills the OS file cache
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(_wall_ms(command, env))
    if (ctx.work / "cli-no-home").exists():
        raise RuntimeError("`version` or `--help` created the vault home")
    baseline = median(times.pop("baseline"))
    results = []
    for name, measured in times.items():
        ours = median(measured)
        results.append(
            Result(
                "cli",
                "-",
                f"{name} ({runs} runs)",
                "ms",
                ours,
                "python -c 'import click'",
                baseline,
                ours / baseline,
                f"<= {TARGET:g}x",
                ours / baseline <= TARGET,
                {"runs": measured},
            )
        )
    return results


def bound(results: list[Result]) -> str:
    """What bounds a missed start-up target, with this run's figures."""
    figures = "; ".join(f"{r.case}: {r.ours:.0f} ms ({r.ratio:.2f}x)" for r in results)
    floor = results[0].baseline if results else float("nan")
    return (
        f"In this run, `python -c 'import click'` took {floor:.0f} ms; {figures}. What a "
        "command adds to the floor is what `toolkit_vault.cli` imports before it runs: "
        "`python -X importtime -c 'import toolkit_vault.cli'` lists it, and "
        "tests/test_cli_startup.py names the heavy packages that must not be among it."
    )
