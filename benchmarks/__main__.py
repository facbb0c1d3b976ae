"""`python -m benchmarks [--quick] [--only S,...] [--databases sqlite,postgres]`.

Prints the table; a full run (or `--write PATH`) also regenerates BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from rich.console import Console

from . import ON_DEMAND, SCENARIOS
from .harness import DATABASES, SCALES, Context, Result, postgres_admin_url, reachable, safe_url
from .machine import describe
from .network_report import plot
from .report import markdown, print_table, write

MODULES = {
    "configure": "configure",
    "list": "listing",
    "calls": "calls",
    "rotation": "rotation",
    "restart": "restart",
    "cli": "cli_startup",
    "http": "network",
    "soak": "soak",
    "backup": "backup",
    "replicas": "replicas",
    "capacity": "capacity",
    "call-replicas": "call_replicas",
    "mcp": "mcp",
    "stdio": "stdio_servers",
    "history": "history",
    "verification": "verify_scale",
}
NO_DATABASE = {"cli"}  # scenarios that open no database: they alone need no PostgreSQL
ROOT = Path(__file__).resolve().parents[1]


def _names(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {allowed}")
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about 5 minutes")
    parser.add_argument("--scale", choices=sorted(SCALES), help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        type=lambda v: _names(v, SCENARIOS + ON_DEMAND, "scenario"),
        default=SCENARIOS,
        help=f"comma-separated scenarios ({','.join(SCENARIOS)}; on demand only: "
        f"{','.join(ON_DEMAND) or 'none'})",
    )
    parser.add_argument(
        "--databases",
        type=lambda v: _names(v, DATABASES, "database"),
        default=DATABASES,
        help="comma-separated: sqlite,postgres",
    )
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        help="write the Markdown report here (default: BENCHMARKS.md on a full run of all "
        "scenarios on both databases, nothing otherwise)",
    )
    parser.add_argument("--no-write", action="store_true", help="never write the report")
    parser.add_argument(
        "--no-profile", action="store_true", help="skip profiling scenarios that miss a target"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    scale = SCALES[args.scale or ("quick" if args.quick else "full")]
    complete = args.only == SCENARIOS and args.databases == DATABASES
    target = args.write or (ROOT / "BENCHMARKS.md" if scale.name == "full" and complete else None)
    if args.no_write:
        target = None
    console = Console(stderr=True)
    needs_postgres = "postgres" in args.databases and not NO_DATABASE.issuperset(args.only)
    postgres = postgres_admin_url() if needs_postgres else ""
    if postgres and not reachable(postgres):
        print(
            f"scripts/bench: PostgreSQL is unreachable at {safe_url(postgres)}; start it, set "
            "TOOLKIT_VAULT_BENCH_POSTGRES_URL, or run with --databases sqlite",
            file=sys.stderr,
        )
        return 1
    started = time.perf_counter()
    machine = describe(postgres or None)
    results: list[Result] = []
    profiles: dict[str, list[str]] = {}
    headers: dict[str, str] = {}
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tkv-bench-") as work:
        ctx = Context(scale, Path(work), args.databases, postgres, log=console.log)
        modules: dict[str, ModuleType] = {}
        for name in args.only:
            console.log(f"{name}: {scale.name} scale on {', '.join(args.databases)}")
            module = importlib.import_module(f".{MODULES[name]}", __package__)
            modules[name] = module
            results += module.run(ctx)
        for name, module in modules.items():
            own = [r for r in results if r.scenario.startswith(name)]
            missed = [r for r in own if r.holds is False]
            for result in missed:
                notes.setdefault(result.scenario, getattr(module, "bound", lambda _: "")(own))
            profile = getattr(module, "profile", None)
            if profile is None or args.no_profile:
                continue
            if hasattr(module, "PROFILE_HEADER"):
                headers[name] = module.PROFILE_HEADER
            for database in dict.fromkeys(r.database for r in missed if r.scenario == name):
                console.log(f"{name}: a target is missed on {database}, profiling")
                profiles.setdefault(name, []).extend(["", *profile(ctx, database)])
    elapsed = time.perf_counter() - started
    title = f"toolkit-vault benchmarks ({scale.name}, {elapsed / 60:.1f} min)"
    print_table(results, title, Console(width=None if sys.stdout.isatty() else 180))
    if target is not None:
        image = plot(results, target.with_name(target.stem + "-http.png"))
        figures = []  # a scenario module with `plot(results, path) -> caption` gets a PNG
        for name, module in modules.items():
            module_plot = getattr(module, "plot", None)
            if module_plot is not None:
                path = target.parent / "benchmarks" / f"{name}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                own = [r for r in results if r.scenario.startswith(name)]
                figures.append((module_plot(own, path), path.relative_to(target.parent).as_posix()))
        text = markdown(
            results,
            scale,
            machine,
            elapsed,
            notes,
            profiles,
            headers,
            image.name if image else None,
            figures,
        )
        write(target, text)
        console.log(f"wrote {target}" + (f" and {image}" if image else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
