"""Prepare deepsearchqa: the reference's split of google/deepsearchqa's 900 questions.

Upstream file: `DSQA-full.csv` at the root of the Hugging Face dataset repo google/deepsearchqa (its only split,
"eval"), a CSV with a header and columns problem, problem_category, answer, answer_type. The reference loads it
with `datasets`, shuffles with seed 42 and gives the agent the first 100 questions; we grade on the next 200.

The offline search corpus (train/corpus.sqlite, search.py's `local` backend): Simple English Wikipedia, the
20231101.simple configuration of the Hugging Face dataset wikimedia/wikipedia (about 240,000 articles; its parquet
files are about 150 MB to download), cut into passages of at most PASSAGE_CHARS characters at line breaks and
indexed with SQLite FTS5. With `--source`, a corpus.jsonl there ({"title", "text", "url"} per line) is indexed
instead (how tests and air-gapped sites prepare). The corpus is public data: it sits in train/ next to search.py
(linked into workspaces, not copied: task.yaml's train_links), and the grader searches it.

train/ also gets env.py and react.py (the questions as a text environment, and the grader's ReAct loop) and
trajectories.jsonl: a scripted expert's episode per train question (Search[the question], one more search with its
key terms when the gold answer is not in the results, then Finish[the gold answer]), replayed in the environment so
its observations are the backend's real results.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

import a2rl.tasklib.envs
from a2rl.tasklib.envs import load_module, replay, trajectory_record
from a2rl.tasklib.taskdata import write_jsonl

dsqa = load_module(Path(__file__).with_name("env.py"), "a2rl_task_deepsearchqa_env")
search = dsqa.search

REPO, FILE = "google/deepsearchqa", "DSQA-full.csv"
FIELDS = ("problem", "problem_category", "answer", "answer_type")
SEED, N_TRAIN, N_HELDOUT = 42, 100, 200
WIKI_REPO, WIKI_CONFIG = "wikimedia/wikipedia", "20231101.simple"
PASSAGE_CHARS = 1000
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from give had has have how in is it its of on only "
    "or that the their this to was were what when where which who whom whose why with".split()
)


def split(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(visible, graded): exactly `datasets.Dataset.shuffle(seed=42)`, which permutes with numpy's default_rng."""
    order = np.random.default_rng(SEED).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    return shuffled[:N_TRAIN], shuffled[N_TRAIN : N_TRAIN + N_HELDOUT]


def passages(articles: Iterator[dict[str, str]]) -> Iterator[dict[str, str]]:
    """Each article's lines grouped into passages of at most PASSAGE_CHARS characters (a longer line is one)."""
    for article in articles:
        chunk = ""
        for line in (x.strip() for x in article["text"].split("\n")):
            if chunk and len(chunk) + len(line) + 1 > PASSAGE_CHARS:
                yield {"title": article["title"], "text": chunk, "url": article["url"]}
                chunk = ""
            chunk = f"{chunk}\n{line}" if chunk and line else chunk or line
        if chunk:
            yield {"title": article["title"], "text": chunk, "url": article["url"]}


def wikipedia(tmp: Path) -> Iterator[dict[str, str]]:
    """Simple English Wikipedia's articles, from the dataset's parquet files."""
    import pyarrow.parquet as pq
    from huggingface_hub import snapshot_download

    root = Path(
        snapshot_download(
            WIKI_REPO, repo_type="dataset", allow_patterns=[f"{WIKI_CONFIG}/*.parquet"], local_dir=tmp / "wiki"
        )
    )
    for path in sorted((root / WIKI_CONFIG).glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(columns=["title", "text", "url"]):
            yield from batch.to_pylist()


def build_corpus(train_dir: Path, source: Path | None, tmp: Path) -> None:
    local = Path(source) / "corpus.jsonl" if source is not None else None
    if local is not None and local.is_file():
        docs = (json.loads(line) for line in local.read_text(encoding="utf-8").splitlines() if line.strip())
    else:
        docs = passages(wikipedia(tmp))
    search.build_index(docs, Path(train_dir) / "corpus.sqlite")


def one_line(text: str) -> str:
    """An action's argument on one line (the grader reads an action up to the end of its line)."""
    return " ".join(text.split())


def key_terms(problem: str) -> str:
    """The question's words without stop words and repeats."""
    words = [w for w in re.findall(r"\w+", problem) if w.lower() not in STOPWORDS]
    return " ".join(dict.fromkeys(words))


def expert_actions(env: dsqa.SearchQAEnv) -> list[str]:
    actions = [f"Search[{one_line(env.row['problem'])}]"]
    found = env.step(actions[0])[0]
    if not dsqa.matches(env.row["answer"], env.row["answer_type"], found):
        actions.append(f"Search[{key_terms(env.row['problem'])}]")
    return actions + [f"Finish[{one_line(env.row['answer'])}]"]


def expert_trajectories(train_dir: Path) -> list[dict]:
    records = []
    for episode in dsqa.train_episodes(train_dir):
        env = dsqa.make_env(train_dir, episode)
        env.reset()
        played = replay(dsqa.make_env(train_dir, episode), expert_actions(env))
        records.append(trajectory_record(episode, played, dsqa.prompt_header(train_dir, episode), "scripted_expert"))
    return records


def ship_environment(train_dir: Path) -> None:
    for name in ("search.py", "env.py"):
        shutil.copyfile(Path(__file__).with_name(name), Path(train_dir) / name)
    shutil.copyfile(a2rl.tasklib.envs.__file__, Path(train_dir) / "react.py")
    write_jsonl(Path(train_dir) / "trajectories.jsonl", expert_trajectories(Path(train_dir)))


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if source is None:
            from huggingface_hub import hf_hub_download

            hf_hub_download(REPO, FILE, repo_type="dataset", local_dir=tmp)
        with open(Path(source or tmp) / FILE, newline="", encoding="utf-8") as f:
            rows = [{k: r[k] for k in FIELDS} for r in csv.DictReader(f)]
        if len(rows) < N_TRAIN + N_HELDOUT:
            raise ValueError(f"{FILE} has {len(rows)} questions; the split needs {N_TRAIN + N_HELDOUT}")
        build_corpus(Path(train_dir), source, Path(tmp))
    train, heldout = split(rows)
    write_jsonl(Path(train_dir) / "train.jsonl", train)
    write_jsonl(Path(heldout_dir) / "test.jsonl", heldout)
    ship_environment(Path(train_dir))
