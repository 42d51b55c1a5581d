"""An ordinary account on the two-node test cluster: a new user without root sets up a copy of the checkout in
their home, launches a Slurm sweep from it with `--wait` (the reference agent on arith on a short schedule, its
grader a Slurm job beside the run) and gets the table. The only step as root is the admin's: adding the user to
Slurm's accounting (`sacctmgr add user`; the cluster enforces associations, as most sites do).

One sweep proves: the jobs ran as that user (sacct's User of the run's and the grader's jobs), everything the
sweep wrote (its directory, the data, the model cache, the workspace on the node) is theirs, and a second user
of the same cluster cannot read the first one's held-out data, sweep key, ledger, submissions or workspace."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from a2rl.store.services import ServiceJobs
from a2rl.store.sweepdir import SweepDir
from conftest import copy_checkout, demo_spec, slurm_available, unprivileged_user, user_env
from test_user_world import SHORT

OWNER, OTHER = "a2rl-cluster", "a2rl-other"
PATH = "/usr/bin:/bin:/usr/sbin:/sbin"  # a login's: Debian's python3, Slurm's commands, the system's bwrap
NODES = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/slurm-local")) / "nodes"  # tools/slurm/up.sh: node-local TMPDIRs

# As the other user: try to read each path; "denied" where the kernel refuses (EACCES), else what happened.
PEEK = r"""
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        out[path] = "read"
    except PermissionError:
        out[path] = "denied"
    except OSError as e:
        out[path] = f"error: {e}"
print(json.dumps(out))
"""


def _as(user: str, env: dict[str, str], *argv: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.sidebyside
@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(os.getuid() != 0 or shutil.which("useradd") is None, reason="creating a user takes root")
def test_an_ordinary_account_runs_a_slurm_sweep_that_only_it_can_read():
    if not slurm_available():
        pytest.skip("no Slurm cluster")
    with unprivileged_user(OWNER) as owner, unprivileged_user(OTHER) as other:
        # the admin's step: an association for the new user (AccountingStorageEnforce=associations)
        subprocess.run(["sacctmgr", "-i", "add", "user", OWNER, "account=root"], check=True, capture_output=True)
        try:
            _sweep_as(owner, other)
        finally:
            subprocess.run(["scancel", "-u", OWNER], capture_output=True)  # a grader still waiting out its idle time
            subprocess.run(["sacctmgr", "-i", "delete", "user", OWNER], capture_output=True)
            for scratch in NODES.glob(f"*/tmp/a2rl-scratch-{OWNER}"):
                shutil.rmtree(scratch, ignore_errors=True)


def _sweep_as(owner, other) -> None:
    home = Path(owner.pw_dir)
    checkout = home / "a2rl"
    copy_checkout(checkout)
    demo_spec(
        checkout,
        agents=[{"name": "pipeline", "args": SHORT}],
        seeds=[0],
        executor="slurm",
        cluster="local",
        resources={"cpus": 1, "mem_gb": 4},
    )
    subprocess.run(["chown", "-R", f"{OWNER}:", str(checkout)], check=True)
    env = user_env(owner, PATH)
    setup = _as(OWNER, env, "bash", "tools/setup-env.sh", cwd=checkout, timeout=3600)
    assert setup.returncode == 0, (setup.stdout + setup.stderr)[-6000:]
    proc = _as(
        OWNER, env, ".venv/bin/python", "-m", "a2rl", "launch", "demo.yaml", "--wait", cwd=checkout, timeout=1800
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "1/1 done" in proc.stdout and "Traceback" not in out, out[-6000:]
    assert re.search(r"^arith +pipeline +none .* 1 +0$", proc.stdout, re.M), proc.stdout[-3000:]

    sweep = checkout / "a2rl-sweeps" / "demo"
    (run,) = SweepDir(sweep).runs()
    for job in [SweepDir(sweep).status(run.run_id).job_id, *ServiceJobs.load(SweepDir(sweep).grader_jobs).job_ids]:
        acct = subprocess.run(
            ["sacct", "-a", "-X", "-n", "-P", "-j", job.split("_")[0], "-o", "JobID,User"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert acct and all(line.split("|")[1] == OWNER for line in acct), (job, acct)

    workspaces = list(NODES.glob(f"*/tmp/a2rl-scratch-{OWNER}/*/{run.run_id}"))
    assert len(workspaces) == 1, workspaces
    cache = home / ".cache" / "a2rl"
    for root in (sweep, cache, workspaces[0].parent.parent):
        for dirpath, dirs, files in os.walk(root):
            for name in [dirpath, *(os.path.join(dirpath, f) for f in dirs + files)]:
                assert os.lstat(name).st_uid == owner.pw_uid, f"{name} is not {OWNER}'s"

    data_root = Path(SweepDir(sweep).spec.data_root.replace("~", str(home), 1))  # the demo's own, under its home
    secret = {
        "held-out data": data_root / "arith" / "heldout" / "test.jsonl",
        "sweep key": sweep / ".a2rl-key",
        "ledger": next((sweep / "ledger").rglob("*.json")),
        "submissions": sweep / "submissions",
        "workspace": workspaces[0],
    }
    for what, path in secret.items():
        assert path.exists(), f"{what}: {path}"
    peek = _as(
        OTHER, user_env(other, PATH), "python3", "-c", PEEK, *map(str, secret.values()), cwd=Path("/"), timeout=60
    )
    seen = json.loads(peek.stdout)
    assert {what: seen[str(path)] for what, path in secret.items()} == {what: "denied" for what in secret}
