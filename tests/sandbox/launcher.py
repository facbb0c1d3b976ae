"""A stand-in for the vault in tests/test_sandbox.py: started with a canary in its own
environment (so `/proc/<this pid>/environ` holds one), it confines a command and runs it
the way a careless launcher would, merging its whole environment into the launch's (the
sandbox must unset what it did not ask for). It prints its pid, then the child's output
passes straight through (the child inherits stdout); it exits with the child.

    launcher.py SPEC_JSON   {"argv": [...], "env": {...}, "policy": {...}}

"LAUNCHER_PID" in an argument becomes this process's pid (the pid a hostile process aims at).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from toolkit_vault.sandbox import Bind, Confinement, confine

spec = json.loads(sys.argv[1])
policy = spec["policy"]
confinement = Confinement(
    private_dir=Path(policy["private_dir"]),
    read_only=tuple(Bind(Path(s), Path(t)) for s, t in policy.get("read_only", [])),
    network=policy.get("network", True),
    processes=policy.get("processes", 256),
    open_files=policy.get("open_files", 1024),
    memory_bytes=policy.get("memory_bytes", 2**31),
)
argv = [arg.replace("LAUNCHER_PID", str(os.getpid())) for arg in spec["argv"]]
launch = confine(argv, spec["env"], confinement)
kwargs = launch.popen_kwargs()
kwargs["env"] = {**os.environ, **launch.env}  # a careless launcher
print(os.getpid(), flush=True)
child = subprocess.Popen(launch.argv, **kwargs)
sys.exit(child.wait())
