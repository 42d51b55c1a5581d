"""Upgrade on read: each older version of each record, as the version this a2rl writes (records.py calls it).

Record format 1.0 (a2rl 1.0.0) froze every on-disk record. From 1.0 on a record's `schema_version` is a string
"MAJOR.MINOR", per record class (`Record.SCHEMA`); before, it was an int. JSON's types keep the two apart: an old
int (even 1) is never read as a 1.x string, and a string is never looked up among the ints.

The policy (docs/development.md, "Record formats"): a release reads every version from 1.0 on. A change of a
record's fields bumps its class's SCHEMA (a field added with a default: "1.0" → "1.1"; one removed or changed in
meaning: "2.0") and adds here, to STEPS, the step from the version before: a function from the older fields to the
newer. Steps chain, so a reader goes from any version to its own; `a2rl migrate` rewrites a sweep's older records.
"""

from __future__ import annotations

from typing import Callable

Upgrade = Callable[[dict], dict]


class UpgradeError(ValueError):
    """A record's version cannot be read as this a2rl's: newer than it, or older than any release it reads."""


def same(data: dict) -> dict:
    """The fields as they are: the version's shape is the next one's."""
    return data


def _lease_released(data: dict) -> dict:
    # version 1 had no `released`: its release set expires_at to 0
    return {**data, "released": data.get("expires_at") == 0.0}


# Per record class: the int versions the 0.x releases wrote that a 1.x release reads, each as 1.0. The 1.0 shapes
# are the last 0.x release's (a2rl 0.1.0, commit 328c1b7), so its versions read as they are; earlier ints were
# refused by that release already (PreparedData 1 is a stale preparation, prepared again).
PRE_1_0: dict[str, dict[int, Upgrade]] = {
    "AuditRecord": {1: same},
    "BaselineRecord": {4: same},
    "CodeSnapshot": {2: same},
    "DriverEndpoint": {1: same},
    "FrozenSweep": {1: same},
    "FrozenScan": {},  # new in 1.0: no 0.x version
    "FsVerdict": {1: same},
    "GraderBeat": {2: same},
    "Inspection": {1: same},
    "Lease": {1: _lease_released, 2: same},
    "LedgerEntry": {10: same},
    "NoiseRecord": {1: same},
    "Overrides": {1: same},
    "PreparedData": {2: same},
    "ProbeReport": {1: same},
    "QueueEntry": {5: same},
    "ReadRetries": {1: same},
    "RunEnvironment": {1: same},
    "RunIndex": {1: same},
    "RunMeta": {1: same},
    "RunMetrics": {6: same},
    "RunResult": {7: same},
    "RunSpec": {1: same},
    "RunStatus": {3: same},
    "ServiceJobs": {1: same},
    "SplitRecord": {1: same},
    "StageLog": {1: same},
    "SubmissionRow": {4: same},
    "WorkspaceArchive": {2: same},
}
FIRST = "1.0"  # the version every PRE_1_0 step reads as

# Per record class: from a 1.x version, (the next version, the step to it). None yet: every record is at 1.0.
STEPS: dict[str, dict[str, tuple[str, Upgrade]]] = {}


def parse(version: object) -> tuple[int, int] | None:
    """A 1.0+ version's (major, minor); None for anything else (an int of the 0.x releases, a malformed string)."""
    if not isinstance(version, str):
        return None
    major, dot, minor = version.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def upgrade(kind: str, data: dict, target: str) -> dict:
    """`data`, a record of class `kind` at its own `schema_version`, as version `target` (stamped);
    UpgradeError when there is no way there."""
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool):
        step = PRE_1_0.get(kind, {}).get(version)
        if step is None:
            known = ", ".join(map(str, PRE_1_0.get(kind, {}))) or "none"
            raise UpgradeError(
                f"{kind} version {version} is older than any a2rl 1.x reads (0.x versions read: {known});"
                " rerun what wrote it with a2rl 1.x"
            )
        data, version = {**step(data), "schema_version": FIRST}, FIRST
    if parse(version) is None:
        raise UpgradeError(f"{kind} schema_version {version!r} is not a record version (an int, or 'MAJOR.MINOR')")
    steps = STEPS.get(kind, {})
    while version != target:
        if parse(version) > (parse(target) or (0, 0)):
            raise UpgradeError(
                f"{kind} version {version} is newer than this a2rl reads ({target}): upgrade a2rl to read it"
            )
        if version not in steps:
            raise UpgradeError(f"{kind} version {version} has no upgrade step to {target} (a2rl/upgrades.py STEPS)")
        version, step = steps[version]
        data = {**step(data), "schema_version": version}
    return data
