"""`a2rl fetch-model REPO_ID --to DIR`: download a model from the Hugging Face hub onto the cluster's shared file
system, on a login node (jobs run offline). Safetensors weights, config and tokenizer files only (never pickles);
an interrupted download resumes where it stopped when run again (huggingface_hub keeps partial files in DIR/.cache).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# weights as safetensors only: a2rl never loads pickle checkpoints
ALLOW = [
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "vocab.*",
    "merges.txt",
    "special_tokens_map.json",
    "*.model",
    "chat_template.*",
    "LICENSE*",
    "README*",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo_id", help="e.g. Qwen/Qwen2.5-7B-Instruct")
    p.add_argument("--to", type=Path, required=True, dest="to", help="the model directory to create or complete")
    p.add_argument("--revision", help="a branch, tag or commit (default: main)")
    p.add_argument("--token-env", default="HF_TOKEN", help="variable holding a hub token for gated models")


def run(args: argparse.Namespace) -> int:
    import os

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    from a2rl.store.modeldirs import describe

    try:
        path = Path(
            snapshot_download(
                args.repo_id,
                revision=args.revision,
                local_dir=args.to,
                allow_patterns=ALLOW,
                token=os.environ.get(args.token_env) or None,
            )
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(
            f"error: cannot download {args.repo_id} from the Hugging Face hub ({reason}); run fetch-model on a "
            f"node with internet access (a login node); run it again to resume",
            file=sys.stderr,
        )
        return 2
    if not any(path.glob("*.safetensors")):
        print(f"error: {args.repo_id} has no safetensors weights (a2rl loads no pickle checkpoints)", file=sys.stderr)
        return 2
    print(f"{path}: {describe(path)}")
    return 0
