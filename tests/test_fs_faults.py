"""What a cluster's shared file system does to the sweep directory, injected on local disk: locks that are not
real (ENOSYS, ENOLCK from flock), torn, stale and vanished reads, a half-written key, clocks hours apart."""

from __future__ import annotations

import errno
import fcntl

import pytest

from a2rl.store.locks import LocksUnsupported, sweep_lock
from a2rl.store.queue import SubmissionQueue


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK])
def test_no_flock_refuses_in_one_line_never_a_soft_lock(tmp_path, monkeypatch, code):
    queue = SubmissionQueue(tmp_path / "queue", key=b"k" * 32)

    def no_flock(fd, op):
        raise OSError(code, "flock not supported")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(LocksUnsupported) as e:
        queue.submit("r1", "/m", lambda sid: None, error="x")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "queue") in msg and errno.errorcode[code] in msg
    assert "`flock`" in msg and "nolock" in msg and "a2rl doctor" in msg
    assert not list((tmp_path / "queue" / "pending").iterdir())  # nothing enqueued on a lock it could not take
    assert queue.count("r1") == 0
    with pytest.raises(LocksUnsupported):  # every sweep lock, not only the queue's
        with sweep_lock(tmp_path / "other.lock", timeout=0.1):
            pass


def test_sweep_lock_excludes_and_times_out(tmp_path):
    from filelock import Timeout

    with sweep_lock(tmp_path / "x.lock", timeout=0.1):
        with pytest.raises(Timeout):
            with sweep_lock(tmp_path / "x.lock", timeout=0.1):
                pass
    with sweep_lock(tmp_path / "x.lock", timeout=0.1):  # released: free again
        pass
