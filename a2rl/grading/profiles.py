"""The base model's lineage profile (grading/onepass.py): its content hash and each tensor's sample, read from the
base once per sweep and cached beside the baselines, so lineage never reads the base's 15 GB again.

baselines/profiles/<weights hash>.safetensors holds the samples (float32) with their shapes in the metadata;
<weights hash>.hmac signs its bytes with the sweep's key (store/integrity.py): a file that does not verify, or
that another SAMPLE or version wrote, is made again, never trusted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import Timeout

from a2rl.grading.onepass import PROFILE_VERSION, SAMPLE, Scanned, TensorSample, one_pass_lineage, stream
from a2rl.store.ledger import Lineage
from a2rl.store.locks import sweep_lock

log = logging.getLogger("a2rl.profiles")


@dataclass
class BaseProfile:
    digest: str
    samples: dict[str, TensorSample]


def base_profile(base_dir: Path) -> BaseProfile:
    scanned = stream(Path(base_dir))
    return BaseProfile(scanned.digest, scanned.samples)


def _sign(key: bytes, raw: bytes) -> str:
    return hmac.new(key, raw, hashlib.sha256).hexdigest()


def _meta(profile: BaseProfile) -> dict[str, str]:
    shapes = {name: s.shape for name, s in profile.samples.items()}
    return {
        "version": str(PROFILE_VERSION),
        "sample": str(SAMPLE),
        "digest": profile.digest,
        "shapes": json.dumps(shapes),
    }


def load_profile(directory: Path, digest: str, key: bytes) -> BaseProfile | None:
    """The cached profile of the base whose weights hash is `digest`, if present, signed and current."""
    from safetensors.numpy import load

    path = Path(directory) / f"{digest}.safetensors"
    try:
        raw, sig = path.read_bytes(), (path.with_suffix(".hmac")).read_text().strip()
    except OSError:
        return None
    if not hmac.compare_digest(sig, _sign(key, raw)):
        log.warning("%s does not verify with the sweep's key: made again", path)
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata() or {}
    if (meta.get("version"), meta.get("sample"), meta.get("digest")) != (str(PROFILE_VERSION), str(SAMPLE), digest):
        return None
    shapes, values = json.loads(meta["shapes"]), load(raw)
    return BaseProfile(digest, {name: TensorSample(shape, values[name]) for name, shape in shapes.items()})


def save_profile(directory: Path, profile: BaseProfile, key: bytes) -> None:
    from safetensors.numpy import save

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    raw = save({name: np.ascontiguousarray(s.values) for name, s in profile.samples.items()}, metadata=_meta(profile))
    for suffix, data in ((".safetensors", raw), (".hmac", _sign(key, raw).encode())):
        path = directory / f"{profile.digest}{suffix}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def cached_profile(directory: Path, digest: str, base_dir: Path, key: bytes, lock_timeout_s: float) -> BaseProfile:
    """The base's profile: from the cache, else read from `base_dir` (once: graders racing for it wait on a lock)
    and cached. `digest` is the base's weights hash, as its baseline record holds it."""
    if (found := load_profile(directory, digest, key)) is not None:
        return found
    Path(directory).mkdir(parents=True, exist_ok=True)
    try:
        with sweep_lock(Path(directory) / f"{digest}.lock", timeout=lock_timeout_s):
            return load_profile(directory, digest, key) or _make(directory, digest, base_dir, key)
    except Timeout:  # another grader is still reading the base: read it too (the files are replaced atomically)
        log.warning(
            "waited %.0f s for another grader's profile of %s; reading the base here too", lock_timeout_s, base_dir
        )
        return _make(directory, digest, base_dir, key)


def _make(directory: Path, digest: str, base_dir: Path, key: bytes) -> BaseProfile:
    made = base_profile(base_dir)
    if made.digest != digest:
        raise ValueError(f"the base model in {base_dir} changed since its baseline (weights hash {made.digest[:16]})")
    save_profile(directory, made, key)
    return made


def submission_lineage(frozen: Path, scanned: Scanned, base, sweep, lock_timeout_s: float) -> Lineage:
    """The grader's lineage of a frozen submission: from the samples its hash's read took (`scanned`), against
    the profile of the base its baseline record names (cached in the sweep's baselines/profiles/)."""
    profile = cached_profile(
        sweep.baselines / "profiles", base.weights_hash, Path(base.model_path), sweep.key, lock_timeout_s
    )
    return one_pass_lineage(frozen, Path(base.model_path), scanned, profile.samples)
