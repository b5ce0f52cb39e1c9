"""Per-step training losses of one precision, to compare bf16's loss curve with float32's.

The model starts from seed 0 every time. `--order-seed` shuffles the batches, so two float32
runs of two orders show how far curves drift apart by data order alone. Steps as
`benchmarks.bench_train` takes them: Adam 1e-3 (the trainer's), clip 10, dropout 0.1.

Usage (from the repository root):

    python -m benchmarks.bench_train_curve --precision bf16 --order-seed 0 --steps 500 --out bf16_s0.txt
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.common import DEFAULT_DATA, load_sentences, make_step, shape_options
from elmo_core.apps.cli.process import reserve_kernel_cache
from elmo_core.apps.training.config import TrainConfig
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel
from elmo_core.apps.training.optimizer import make_optimizer
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.runtime.batching import batches_by_token_budget


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="wide")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--order-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-tokens", type=int, default=512)
    parser.add_argument("--sentences", type=int, default=13000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    reserve_kernel_cache()
    torch.set_num_threads(args.threads)
    sentences, _ = load_sentences(DEFAULT_DATA, args.sentences)
    counts = Counter(w for s in sentences for w in s)
    vocab = Vocabulary(["<S>", "</S>", "<UNK>"] + [w for w, _ in counts.most_common(49_997)])
    groups = batches_by_token_budget([len(s) for s in sentences], args.batch_tokens)
    data = [make_batch([sentences[i] for i in group], vocab) for group in groups]
    random.Random(args.order_seed).shuffle(data)
    torch.manual_seed(0)
    lm = BiLMLanguageModel(shape_options(args.shape), len(vocab), dropout=0.1).train()
    optimizer = make_optimizer(list(lm.parameters()), TrainConfig(max_steps=1, lr=1e-3))
    step = make_step(lm, optimizer, args.precision, torch.device("cpu"))
    start = time.time()
    with args.out.open("w") as f:
        f.write(
            f"# {args.shape} shape, {args.precision}, data order seed {args.order_seed}, init seed 0, batches <= "
            f"{args.batch_tokens} positions, Adam 1e-3, clip 10, dropout 0.1, {args.threads} thread(s); "
            f"{len(data)} batches, vocab {len(vocab)}\n"
        )
        for k in range(args.steps):
            batch = data[k % len(data)]
            f.write(f"{k} {step(batch)!r} {batch.num_words}\n")
            f.flush()
        f.write(f"# {time.time() - start:.0f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
