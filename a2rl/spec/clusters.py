"""Cluster profiles (configs/clusters/<name>.yaml): site defaults for Slurm jobs, which a sweep's own
`resources` override field by field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from a2rl.spec.registry import HOME, Registry

if TYPE_CHECKING:
    from a2rl.spec.sweep import SweepSpec

# Slurm sends USR2 this long before the time limit: time to wrap up, auto-submit and report (submitit's local
# executor sends it 30 s before).
SIGNAL_DELAY_S = 120


class ClusterProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup: list[str] = []  # shell lines run before each job (module loads, venv activation)
    scratch_root: str | None = None  # e.g. "$TMPDIR" (node-local) or /scratch/$USER; default: the sweep's
    gres_gpu: str | None = None  # GPUs as gres (gpu, gpu:a100 ...): --gres=gpu:a100:N; None: --gpus-per-node=N
    max_array_size: int | None = None  # None: read MaxArraySize from `scontrol show config`
    sbatch: dict[str, Any] = {}  # further sbatch options for every job (a sweep's resources.sbatch adds to them)


def cluster_registry() -> Registry[ClusterProfile]:
    return Registry(ClusterProfile, "cluster profile", HOME / "configs" / "clusters", "A2RL_CLUSTERS_PATH")


def profile_of(spec: "SweepSpec") -> ClusterProfile:
    return cluster_registry().get(spec.cluster) if spec.cluster else ClusterProfile(name="default")
