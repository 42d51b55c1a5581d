"""Speed of leak detection (tasklib/leaks.py) on a transcript-like text: --mb MiB of JSON tool output built from
--items distinct held-out-like items' words (none of them whole), scanned as the run report scans agent.log

    verbatim   the items and their JSON-escaped forms, substring search (what a2rl did before normalisation)
    find       HeldoutMarkers.find: verbatim, normalised, base64/hex runs decoded and searched

both timed in this process on the same text and printed side by side, with MiB/s. The load average is printed
first: the machine may be shared.

    python tools/bench/leaks.py [--mb 32] [--items 1319]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import tempfile
import time
from pathlib import Path

from a2rl.tasklib import leaks

WORDS = (
    "tom anna has apples buys more how many does have left basket friend gives takes there are box holds "
    "picks morning afternoon cookies marbles books pencils stickers cards coins shells question answer"
).split()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=32)
    p.add_argument("--items", type=int, default=1319)  # gsm8k's test split
    a = p.parse_args()
    rng = random.Random(0)
    sentence = lambda n: " ".join(rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(n))  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        heldout = Path(tmp)
        (heldout / "CANARY").write_text("a2rl-canary-" + "0" * 32 + "\n")
        (heldout / "test.jsonl").write_text(
            "".join(json.dumps({"question": sentence(14)}) + "\n" for _ in range(a.items))
        )
        found_in = leaks.markers(heldout)
        lines, size = [], 0
        while size < a.mb * 2**20:
            content = sentence(40) + (
                "\n" + base64.b64encode(sentence(12).encode()).decode() if rng.random() < 0.05 else ""
            )
            lines.append(json.dumps({"type": "tool_result", "content": content}))
            size += len(lines[-1]) + 1
        text = "\n".join(lines)
        print(f"load average {os.getloadavg()[0]:.2f}; {len(text) / 2**20:.1f} MiB of text, {a.items} items")
        needles = [n for forms in found_in.verbatim.values() for n in forms]
        t0 = time.perf_counter()
        old = [n for n in needles if n in text]
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        new = found_in.find(text)
        t_new = time.perf_counter() - t0
        mb = len(text) / 2**20
        print(f"verbatim only   {t_old:7.2f} s  {mb / t_old:7.1f} MiB/s  found {len(old)}")
        print(f"find            {t_new:7.2f} s  {mb / t_new:7.1f} MiB/s  found {len(new)}")


if __name__ == "__main__":
    main()
