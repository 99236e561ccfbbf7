"""Two processes learning views in one store at once lose no view and tear no file.

Each worker confirms dim views of its own functions and both confirm views of shared
functions (the same view files written by both, last writer wins). Afterwards a fresh
registry must see every view confirmed, every view file must parse, and every view must
still be served.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dslog_dagster.core import ReusePolicy, ViewRegistry

OWN = {0: ["sin", "cos", "exp"], 1: ["tanh", "square", "negative"]}
SHARED = ["add", "multiply"]
SHAPE = (5, 7)

WORKER = """
import sys, time
from pathlib import Path
import numpy as np
from dslog_dagster.core import ViewRegistry, ReusePolicy, capture

root, worker, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
names = sys.argv[4].split(",")
reg = ViewRegistry(root, ReusePolicy(pure=True, seed=worker))
rng = np.random.default_rng(worker)
Path(f"{go}.ready-{worker}").touch()
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
for _ in range(4):
    for name in names:
        f = getattr(np, name)
        arity = 2 if name in ("add", "multiply") else 1
        reg.capture(f, *[rng.uniform(0.1, 2, (5, 7)) for _ in range(arity)])
reg.flush()
"""


@pytest.mark.integration
def test_two_processes_lose_no_view(tmp_path: Path) -> None:
    root = tmp_path / "store"
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), str(w), str(go), ",".join(OWN[w] + SHARED)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in (0, 1)
    ]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.ready-{w}").exists() for w in (0, 1)):
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.stderr]
        time.sleep(0.01)
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]

    for path in (root / "views").glob("*.json"):
        json.loads(path.read_bytes())  # no torn file
    reg = ViewRegistry(root, ReusePolicy(pure=True))
    confirmed = {v.op for v in reg.views() if v.kind == "dim" and v.status == "confirmed"}
    expected = {f"numpy.{n}" for n in OWN[0] + OWN[1] + SHARED}
    assert expected <= confirmed
    rng = np.random.default_rng(99)
    for name in OWN[0] + OWN[1] + SHARED:
        arity = 2 if name in SHARED else 1
        got = reg.capture(getattr(np, name), *[rng.uniform(0.1, 2, SHAPE)] * arity)
        assert got.obtained == "dim", name
