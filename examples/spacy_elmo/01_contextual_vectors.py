"""Contextual vectors in spaCy: "bank" of a river against "bank" that lends money.

    python examples/spacy_elmo/01_contextual_vectors.py               # the default model
    python examples/spacy_elmo/01_contextual_vectors.py --model DIR   # a model folder
    python examples/spacy_elmo/01_contextual_vectors.py --options options.json --weights weights.hdf5

A static word vector gives every "bank" the same vector, and so does ELMo's layer 0
(the char CNN, which sees only the word). The LSTM layers read the whole sentence, so
each "bank" gets its own vector: with a trained model, two river banks are closer to
each other than a river bank is to a bank that lends money. The last table uses
`token.similarity`, i.e. the mixed vectors in `doc.tensor` that the `elmo` component
writes (with random weights the numbers mean nothing, but the script still runs).

The top LSTM layer is not always the one that separates senses. It is trained to predict
the next (and previous) word, and in a small biLM such as the shipped one (2.7M
parameters) it holds mostly that: "bank to ask" and "bank raised" predict different
words, so two money banks can be the least similar pair there. Peters et al. (2018)
found the top layer best for word senses with a far larger biLM. With the shipped model,
layer 1 separates these senses: both same-sense pairs score above every other pair.
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations

import numpy as np
import spacy

SENTENCES = {
    "river 1": "We sat on the bank of the river and watched the boats .",
    "river 2": "The flood washed away the muddy bank of the stream .",
    "money 1": "She went to the bank to ask for a loan .",
    "money 2": "The bank raised its interest rates on savings accounts .",
}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="a model folder (default: the shipped model)")
    parser.add_argument("--options", default="", help="bilm-tf options.json (with --weights)")
    parser.add_argument("--weights", default="", help="bilm-tf hdf5 weights (with --options)")
    args = parser.parse_args(argv)

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": args.model, "options": args.options, "weights": args.weights}})
    try:
        docs = dict(zip(SENTENCES, nlp.pipe(SENTENCES.values())))
    except (OSError, ValueError) as err:  # e.g. no default model installed, or a bad path
        print(f"error: {err}", file=sys.stderr)
        return 2
    banks = {name: next(t for t in doc if t.lower_ == "bank") for name, doc in docs.items()}
    n_outputs = next(iter(docs.values()))._.elmo_layers.shape[0]

    print("cosine similarity of the 'bank' vectors, per biLM layer (0 = char CNN)\n")
    header = f"{'pair':<20}" + "".join(f"{f'layer {k}':>10}" for k in range(n_outputs)) + f"{'mix':>10}"
    print(header)
    for a, b in combinations(banks, 2):
        layer_a, layer_b = docs[a]._.elmo_layers, docs[b]._.elmo_layers
        row = [cosine(layer_a[k, banks[a].i], layer_b[k, banks[b].i]) for k in range(n_outputs)]
        row.append(banks[a].similarity(banks[b]))  # the mixed vectors (doc.tensor)
        same = "same sense" if a.split()[0] == b.split()[0] else "different"
        print(f"{a + ' / ' + b:<20}" + "".join(f"{v:>10.3f}" for v in row) + f"   {same}")

    top = {
        pair: cosine(*(docs[name]._.elmo_layers[-1, banks[name].i] for name in pair)) for pair in combinations(banks, 2)
    }
    least = min(top, key=top.__getitem__)
    if least[0][:5] == least[1][:5]:
        print(
            f"\nthe least similar pair at the top layer is a same-sense pair ({least[0]} and {least[1]}): "
            "a small biLM's top layer holds mostly what predicts the next and previous words (see the docstring)"
        )
    within = np.mean([banks[a].similarity(banks[b]) for a, b in combinations(banks, 2) if a[:5] == b[:5]])
    across = np.mean([banks[a].similarity(banks[b]) for a, b in combinations(banks, 2) if a[:5] != b[:5]])
    print(f"\nmixed vectors: same sense {within:.3f}, different senses {across:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
