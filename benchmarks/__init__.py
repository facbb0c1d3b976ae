"""Benchmarks of toolkit-vault against what a user would otherwise do, in the same run.

`python -m benchmarks` (or `scripts/bench`) runs every scenario on SQLite and PostgreSQL,
prints the table and, on a full run, regenerates `BENCHMARKS.md`. Each scenario module
exposes `run(ctx) -> list[Result]`; the harness owns databases, timing and reporting.
"""

__all__ = ["ON_DEMAND", "SCENARIOS"]

SCENARIOS = (
    "configure",
    "list",
    "calls",
    "rotation",
    "restart",
    "cli",
    "http",
    "soak",
    "backup",
    "replicas",
    "mcp",
    "stdio",
)
# run only when `--only` names them (they take minutes)
ON_DEMAND = ("capacity", "call-replicas", "history", "verification")
