"""`drivers/<name>/endpoint.json`: where a local driver's server listens (written by its job, see server.py),
and how a run waits for it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal
from urllib.error import URLError
from urllib.request import Request

from a2rl.errors import InfraError
from a2rl.records import Record
from a2rl.siteproxy import urlopen
from a2rl.spec.sweep import local_driver_name
from a2rl.store.freshness import heartbeat_stale
from a2rl.store.sweepdir import STALE_S, SweepDir


class DriverEndpoint(Record):
    """`drivers/<name>/endpoint.json`, written by the server job."""

    name: str
    base_url: str  # http://HOST:PORT/v1
    api_key: str
    model: str  # the served name agents ask for
    backend: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    state: Literal["serving", "exited"]
    note: str = ""

    def live(self) -> bool:
        """Serving, and heart-beating as this reader's clock sees it (store/freshness.py)."""
        silent = heartbeat_stale(("driver", self.name), self.heartbeat_at, self.host, STALE_S)
        return self.state == "serving" and not silent


def endpoint_path(sweep: SweepDir, name: str) -> Path:
    return sweep.drivers / name / "endpoint.json"


def jobs_path(sweep: SweepDir, name: str) -> Path:
    return sweep.drivers / name / "jobs.json"


def drivers_used(runs) -> list[str]:
    """The local drivers that `runs` use, in a stable order."""
    return sorted({n for r in runs if (n := local_driver_name(r.driver)) is not None})


def answers(endpoint: DriverEndpoint, timeout_s: float = 10.0) -> bool:
    """Whether the endpoint lists its model to a client holding the key."""
    req = Request(endpoint.base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {endpoint.api_key}"})
    try:
        with urlopen(req, timeout=timeout_s, direct=True) as r:
            return any(m.get("id") == endpoint.model for m in json.loads(r.read()).get("data", []))
    except (URLError, OSError, ValueError):
        return False


def wait_for_endpoint(sweep: SweepDir, name: str, timeout_s: float, poll_s: float = 1.0) -> DriverEndpoint:
    """A live endpoint of the driver that answers; InfraError after `timeout_s` (the run fails as an infra
    failure, not the agent's)."""
    deadline = time.monotonic() + timeout_s
    path = endpoint_path(sweep, name)
    while True:
        endpoint = DriverEndpoint.load_or_none(path)
        if endpoint is not None and endpoint.live() and answers(endpoint):
            return endpoint
        if time.monotonic() >= deadline:
            note = f": {endpoint.note}" if endpoint is not None and endpoint.note else ""
            seen = (
                "no endpoint was written"
                if endpoint is None
                else f"last endpoint {endpoint.base_url} ({endpoint.state}{note})"
            )
            raise InfraError(
                f"local driver {name!r}: no live server after {timeout_s:.0f} s ({seen}); see the driver "
                f"job's log under {sweep.jobs} and relaunch the sweep to start a server"
            )
        time.sleep(poll_s)
