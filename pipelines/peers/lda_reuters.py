#!/usr/bin/env python3
"""The `lda` package's collapsed Gibbs sampler on its own Reuters corpus: the
peer of forestall's `pipelines/reuters-lda.toml` (same corpus, K, alpha,
beta/eta and number of sweeps).

    pip install lda==3.0.2
    python3 pipelines/peers/lda_reuters.py --iterations 100 --seeds 1,2,3

Prints one JSON line per seed, {"type": "result", "data": {...}}, with the
joint log-likelihood log p(w, z) as `LDA.loglikelihood()` reports it, per
token too, and the seconds the fit took.
"""

import argparse
import json
import time

import lda
import lda.datasets


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topics", type=int, default=20)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--eta", type=float, default=0.01)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--seeds", default="1")
    args = p.parse_args()
    corpus = lda.datasets.load_reuters()
    tokens = int(corpus.sum())
    for seed in [int(s) for s in args.seeds.split(",")]:
        model = lda.LDA(
            n_topics=args.topics,
            n_iter=args.iterations,
            alpha=args.alpha,
            eta=args.eta,
            random_state=seed,
            refresh=10**9,
        )
        started = time.perf_counter()
        model.fit(corpus)
        seconds = time.perf_counter() - started
        ll = float(model.loglikelihood())
        print(
            json.dumps(
                {
                    "type": "result",
                    "data": {
                        "seed": seed,
                        "topics": args.topics,
                        "iterations": args.iterations,
                        "documents": int(corpus.shape[0]),
                        "tokens": tokens,
                        "loglik": ll,
                        "loglik_per_token": ll / tokens,
                        "seconds": seconds,
                    },
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
