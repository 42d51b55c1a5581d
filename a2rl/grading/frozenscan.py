"""The content hash, lineage samples and canary search the freeze's copy computed (run/onecopy.py), kept beside the
frozen copy for its grader, who takes them instead of reading the copy twice more.

Trust: the freeze runs in the run's job, a2rl's own code outside the agent's sandbox, which already decides what
the frozen copy holds and signs the queue entry naming it with the sweep's key; its scan is signed with the same
key (store/integrity.py), so it is exactly as trustworthy as that entry and the copy itself. What the signature
cannot cover is a write into the frozen copy after the scan: the sweep directory (0700) is not bound into any
sandbox, so only the sweep's own user outside a sandbox (or root) can write it. The scan therefore records each
frozen file's size, inode, mtime and ctime after the freeze (a write or a replaced file changes them; ctime cannot
be set back without changing the clock), and the grader compares them: on any difference, an unsigned or missing
scan, or a scan for another canary (the held-out split prepared again), it reads the frozen copy itself, as before.
The canary is read by the job from the data root (the same user's, never bound into a sandbox), so it is no more
known to the agent than before; under `isolation: none` the agent can read both the key and the canary (such
sweeps are marked untrusted).

submissions/<id>.scan/ holds scan.json (FrozenScan) and <digest>.safetensors + .hmac (the samples, as the base's
profile is stored: grading/profiles.py). The grader removes it once read: a grading claimed again reads the copy.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from a2rl.grading.onepass import Scanned
from a2rl.grading.profiles import BaseProfile, load_profile, save_profile
from a2rl.recording.frozencopies import remove_entry, scan_path
from a2rl.records import RecordError
from a2rl.store.integrity import SignedRecord

log = logging.getLogger("a2rl.grader")


class FrozenScan(SignedRecord):
    submission_id: str  # the frozen copy's directory name
    weights_hash: str  # weights.weights_hash of the frozen copy
    nbytes: int
    unsampled: list[str]
    canary: str | None  # SHA-256 of the canary searched for (None: the split has none)
    canary_in: list[str]  # the frozen files holding it
    files: dict[str, list[int]]  # name -> [size, inode, mtime_ns, ctime_ns, mode], taken after the freeze


def fingerprints(frozen: Path) -> dict[str, list[int]]:
    out = {}
    for name in sorted(os.listdir(frozen)):
        st = os.lstat(frozen / name)
        out[name] = [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]
    return out


def canary_id(canary: str | None) -> str | None:
    return hashlib.sha256(canary.encode()).hexdigest() if canary else None


def save_scan(frozen: Path, scanned: Scanned, canary_in: list[str], canary: str | None, key: bytes) -> None:
    """Written by the job right after the freeze renamed the frozen copy into place."""
    d = scan_path(frozen)
    save_profile(d, BaseProfile(scanned.digest, scanned.samples), key)
    FrozenScan(
        submission_id=frozen.name,
        weights_hash=scanned.digest,
        nbytes=scanned.nbytes,
        unsampled=scanned.unsampled,
        canary=canary_id(canary),
        canary_in=canary_in,
        files=fingerprints(frozen),
    ).sign(key).dump(d / "scan.json")


def take_scan(frozen: Path, key: bytes, canary: str | None) -> tuple[FrozenScan, Scanned] | None:
    """The job's scan of `frozen` with its samples, if it verifies (see the module's note), removed once read;
    None where there is none or it cannot be used (said in the log): the grader then reads the copy."""
    d = scan_path(frozen)
    if not d.is_dir():
        return None
    try:
        scan = FrozenScan.load_verified(d / "scan.json", key)
        why = (
            "it names another submission"
            if scan.submission_id != frozen.name
            else "the split's canary changed since"
            if scan.canary != canary_id(canary)
            else "the frozen copy changed since"
            if scan.files != fingerprints(frozen)
            else None
        )
        profile = load_profile(d, scan.weights_hash, key) if why is None else None
        if why is None and profile is None:
            why = "its samples do not verify"
    except (RecordError, OSError) as e:
        scan, profile, why = None, None, str(e)
    finally:
        try:
            remove_entry(d, frozen.parent)
        except OSError as e:  # not renamed: the next grading of it finds it, and its fingerprints still decide
            log.warning("the freeze's scan of %s could not be removed: %s", frozen.name, e)
    if why is not None:
        log.warning("the freeze's scan of %s is not used (%s): the frozen copy is read again", frozen.name, why)
        return None
    return scan, Scanned(
        scan.weights_hash, profile.samples, scan.nbytes, 0.0, scan.unsampled
    )  # read: not by the grader
