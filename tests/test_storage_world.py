"""Storage, `a2rl migrate` and the one-read freeze in a user's world: as an ordinary user (not root), and with the
sweep directory seen by two "nodes" through FUSE views of one directory (bindfs, with an NFS client's 30-s
attribute and entry caching: /work/shared/cluster-realism.md, tests/test_shared_fs.py), as on a cluster.

- `a2rl migrate` on the release-before fixture sweep owned by a user and shared with their group (0750, records
  0640): run by that user it leaves only their files, the backups and rewritten records with their modes; run by
  root (an admin) it is refused, as it would leave root-owned 0600 records the user's a2rl cannot read.
  (A rewritten record used to become 0600, a temporary file's mode: a group sharing the sweep lost it.)
- retention deleting copies through one view: gone in the other at once (a fresh open fails, the listing no
  longer shows it), never half there; a grader on the other node that still has a file of the copy open reads it
  whole to the end (what it computes then is for a submission already recorded: the first record stands).
- the freeze and its signed FrozenScan written by the user through one view, verified and taken by the grader (the
  same user) through the other: the scan's fingerprints (size, inode, mtime, ctime, mode) must read the same.

Fast: the user's processes run this checkout with the test venv's packages; nothing is installed."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.cli.main import main
from a2rl.grading import retention
from a2rl.recording import frozencopies as FC
from a2rl.recording.diskuse import frozen_copies
from a2rl.scheduling.migrate import BACKUP_DIR, record_files
from a2rl.store.sweepdir import SweepDir
from conftest import REPO, unprivileged_user
from test_frozencopies import copy, scored

if os.geteuid() != 0 or shutil.which("useradd") is None:
    pytest.skip("creating a user and mounting FUSE views takes root", allow_module_level=True)

USER = "a2rl-store"
PRE = REPO / "tests/fixtures/sweeps/pre-1.0"
CACHING = "attr_timeout=30,entry_timeout=30,negative_timeout=30"  # as tests/test_shared_fs.py's nodes


def interpreter(user) -> list[str]:
    """A Python the user can run with this checkout and the test venv's packages first on its path: this one, or
    (where it lies under root's 0700 home, as pyenv's here) the system's of the same version."""
    site = sysconfig.get_paths()["purelib"]
    for python in (sys.executable, f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        env = {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir, "PYTHONPATH": f"{REPO}:{site}"}
        probe = [python, "-c", "import a2rl.records, safetensors, numpy"]
        try:
            if as_user(user, probe, env).returncode == 0:
                return [python]
        except OSError:  # not the user's to run (under root's 0700 home), or not there
            continue
    pytest.skip("no Python the test user can run with the test venv's packages")


def as_user(user, argv: list[str], env: dict | None = None, cwd: Path = Path("/")) -> subprocess.CompletedProcess:
    env = env or {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir, "PYTHONPATH": user.pythonpath, "USER": user.pw_name}
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
        user=user.pw_uid, group=user.pw_gid, extra_groups=[],
    )  # fmt: skip


@pytest.fixture(scope="module")
def user():
    with unprivileged_user(USER) as u:
        site = sysconfig.get_paths()["purelib"]
        found = SimpleNamespace(**{k: getattr(u, k) for k in ("pw_name", "pw_uid", "pw_gid", "pw_dir")})
        found.pythonpath = f"{REPO}:{site}"
        found.python = interpreter(found)
        yield found


@pytest.fixture
def base():
    """A directory under /tmp the test user can reach (pytest's tmp_path is root's, 0700)."""
    d = Path("/tmp") / f"a2rl-store-{secrets.token_hex(4)}"
    d.mkdir(mode=0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def owned_by(user, root: Path) -> list[str]:
    """Paths under `root` (itself included) not owned by `user`."""
    return [str(p) for p in [root, *root.rglob("*")] if p.lstat().st_uid != user.pw_uid]


def test_migrate_as_the_sweeps_owner_leaves_only_their_files_and_an_admin_is_refused(user, base, capsys):
    sweep = base / "sweep"
    shutil.copytree(PRE, sweep)
    for p in [sweep, *sweep.rglob("*")]:  # a group project's sweep: its records made readable to the group
        p.chmod(0o750 if p.is_dir() else 0o640)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(sweep)], check=True)
    before = {p: p.read_bytes() for p, _ in record_files(sweep)}
    assert main(["migrate", str(sweep)]) == 2  # root, on the user's sweep
    err = capsys.readouterr().err
    assert err.startswith(f"error: {sweep} belongs to {USER}: run `a2rl migrate` as {USER}"), err
    assert err.count("\n") == 1 and not (sweep / BACKUP_DIR).exists()
    assert {p: p.read_bytes() for p, _ in record_files(sweep)} == before and not owned_by(user, sweep)

    proc = as_user(user, [*user.python, "-m", "a2rl", "migrate", str(sweep)])
    assert proc.returncode == 0 and proc.stdout.startswith("migrated "), proc.stdout + proc.stderr
    assert not owned_by(user, sweep)  # the backup, the rewritten records, their directories: all the user's
    (backup,) = (sweep / BACKUP_DIR).iterdir()
    changed = [p for p, b in before.items() if p.read_bytes() != b]
    assert len(changed) > 10
    for path in changed:
        kept = backup / path.relative_to(sweep)
        assert kept.read_bytes() == before[path]
        assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(kept.stat().st_mode) == 0o640, path
    assert stat.S_IMODE(sweep.stat().st_mode) == 0o750  # the backup lies inside: no one outside the group reads it
    status = as_user(user, [*user.python, "-m", "a2rl", "status", str(sweep)])
    assert status.returncode == 0 and "arith__submitter" in status.stdout, status.stdout + status.stderr
    assert not owned_by(user, sweep)


class Views:
    """Two bindfs views ("nodes") of one directory, each caching attributes and entries for 30 s."""

    def __init__(self, base: Path):
        self.common, self.a, self.b = base / "common", base / "node-a", base / "node-b"
        for d in (self.common, self.a, self.b):
            d.mkdir()
        for view in (self.a, self.b):  # allow_other: the test user goes through root's mounts
            subprocess.run(["bindfs", "-o", f"{CACHING},allow_other", str(self.common), str(view)], check=True)

    def down(self) -> None:
        for view in (self.a, self.b):
            subprocess.run(["umount", "-l", str(view)], timeout=60)  # lazily: a failed test may hold a file open


@pytest.fixture
def views(base):
    if shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs FUSE (/dev/fuse) and bindfs (tools/test.sh installs bindfs, fuse3)")
    v = Views(base)
    yield v
    v.down()


def test_retention_through_one_view_is_seen_whole_in_the_other(views, monkeypatch):
    """Node A's grader prunes a copy while node B's grader, re-grading it after a lost lease, has a file of it open."""
    on_a = SweepDir(views.a / "sd")
    for seq in (1, 2):
        copy(on_a.submissions, f"r.{seq}")
        copy(on_a.submissions, f"r.{seq}.scan")
    on_b = SweepDir(views.b / "sd")  # looked up through B only once they exist (B caches a miss for 30 s too)
    gone = on_b.submissions / "r.1"
    assert (gone / "config.json").read_text() == "{}"  # node B has it cached: looked up, attributes held 30 s
    entries = scored(0.2, 0.9)
    monkeypatch.setattr(SweepDir, "ledger", SimpleNamespace(entries=lambda run_id: entries))
    with open(gone / "model.safetensors", "rb") as reading:
        first = reading.read(10)
        assert retention.prune(on_a, "r", "best-feedback") == ["r.1"]
        # node B: the listing no longer shows it, a fresh open fails; never a copy with some files gone
        assert sorted(os.listdir(on_b.submissions)) == ["r.2", "r.2.scan"]
        with pytest.raises(FileNotFoundError):
            open(gone / "config.json")
        assert sorted(p.name for p in frozen_copies(on_b, "r", beside=True)) == ["r.2", "r.2.scan"]
        # what it had open it reads to the end, whole (the file lives on until closed, as on a local disk)
        assert first + reading.read() == b"x" * 100
    # node B deleting it too (its own grader's record stage) finds nothing to do, and leaves no trash
    assert FC.remove_frozen(gone, on_b.submissions) == []
    assert sorted(os.listdir(views.common / "sd" / "submissions")) == ["r.2", "r.2.scan"]


FREEZE = r"""
import json, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import save_file
from a2rl.run.artifacts import Limits, check_artifact, freeze
out, dest, key, canary = Path(sys.argv[1]), Path(sys.argv[2]), bytes.fromhex(sys.argv[3]), sys.argv[4]
m = out / "m"
m.mkdir(parents=True)
(m / "config.json").write_text(json.dumps({"model_type": "llama"}))
save_file({"w": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)}, str(m / "model.safetensors"))
with check_artifact(m, out, Limits(64, 1 << 30, 1 << 31)) as artifact:
    freeze(artifact, dest, key, canary)
"""
TAKE = r"""
import json, sys
from pathlib import Path
from a2rl.grading.frozenscan import take_scan
from a2rl.recording.frozencopies import scan_path
from a2rl.weights import weights_hash
dest, key, canary = Path(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3]
got = take_scan(dest, key, canary)
print(json.dumps({"taken": got is not None, "digest": got and got[1].digest, "hash": weights_hash(dest),
                  "scan_left": scan_path(dest).exists()}))
"""


def test_the_freeze_and_its_signed_scan_written_by_the_user_on_one_node_are_taken_on_the_other(user, views):
    key, canary = secrets.token_bytes(32), "a2rl-canary-" + secrets.token_hex(16)
    sd = views.common / "sd"
    (sd / "submissions").mkdir(parents=True)
    ws = views.common / "ws" / "output"
    ws.mkdir(parents=True)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(sd), str(ws.parent)], check=True)
    sd.chmod(0o700)
    dest = "submissions/r.0001"
    froze = as_user(user, [*user.python, "-c", FREEZE, str(views.a / "ws/output"), str(views.a / "sd" / dest),
                           key.hex(), canary])  # fmt: skip
    assert froze.returncode == 0, froze.stderr
    assert not owned_by(user, sd) and (sd / "submissions/r.0001.scan/scan.json").is_file()
    took = as_user(user, [*user.python, "-c", TAKE, str(views.b / "sd" / dest), key.hex(), canary])
    assert took.returncode == 0, took.stderr
    found = json.loads(took.stdout)
    assert found["taken"], took.stderr  # verified on node B: signature, canary and fingerprints hold
    assert found["digest"] == found["hash"] and not found["scan_left"]
    assert sorted(os.listdir(sd / "submissions")) == ["r.0001"]
