#!/usr/bin/env python3
"""The single-process PyTorch peer of forestall's CNN: the same net, loss, class
weights, Adam and train/test split (cnn_common.py), one optimiser step per batch.

    python3 pipelines/peers/cnn_torch.py --data data/pneumoniamnist.npz --threads 2

Prints JSON lines on stdout: one per evaluation on the whole test set
({"event": "eval", "elapsed_s", "step", "images", "test_accuracy", "test_loss"}),
then {"event": "done", ...}: seconds per step, images per second, the time to
the target accuracy by the rule "the first of two consecutive evaluations at or
above it" and which evaluation that was.

The clock counts training only: it stops while the test set is evaluated (forestall
evaluates on its sink's thread beside the workers, so evaluation never lengthens
an iteration there either). An evaluation after step s carries the training time
up to the end of step s, as forestall's carries the start of the iteration that
begins from those parameters. Evaluations happen at step 0 and every
--eval-every steps.

--dry-run reads and checks the data, prints {"event": "plan", ...} and exits
without importing torch.
"""

import argparse
import random
import time

import cnn_common as cc


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="MedMNIST .npz (train_* and test_* arrays)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--batch", type=int, default=32, help="images per optimiser step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--l2", type=float, default=0.0)
    p.add_argument("--class-weighting", choices=["balanced", "none"], default="balanced")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--eval-every", type=int, default=16, help="steps between evaluations")
    p.add_argument("--target", type=float, default=0.85, help="test accuracy to time")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    for name in ("threads", "batch", "steps", "eval_every"):
        if getattr(a, name) < 1:
            cc.fail(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(a, name)})")
    if not (a.lr > 0):
        cc.fail(f"--lr must be positive (got {a.lr})")
    if not (a.l2 >= 0):
        cc.fail(f"--l2 must be at least 0 (got {a.l2})")
    if not (0 < a.target <= 1):
        cc.fail(f"--target must be in (0, 1] (got {a.target})")
    return a


def main():
    a = parse_args()
    try:
        train = cc.load_split(a.data, "train")
        test = cc.load_split(a.data, "test")
    except cc.PeerError as e:
        cc.fail(str(e))
    weights = cc.class_weights(train["labels"], a.class_weighting)
    if a.dry_run:
        cc.emit("plan", peer="single", train=train["n"], test=test["n"],
                train_positives=sum(train["labels"]), test_positives=sum(test["labels"]),
                class_weights=weights, steps=a.steps, batch=a.batch, threads=a.threads,
                eval_every=a.eval_every, evaluations=len(range(0, a.steps + 1, a.eval_every)),
                seed=a.seed)
        return

    import torch

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    x, y = cc.images_tensor(torch, train)
    tx, ty = cc.images_tensor(torch, test)
    w = torch.tensor(weights, dtype=torch.float32)[y.long()]
    net = cc.make_net(torch)
    opt = cc.adam(torch, net, a.lr, a.l2)
    rng = random.Random(a.seed)
    order = []
    accuracies = []
    times = []
    trained = 0.0

    def evaluation(step):
        acc, loss = cc.evaluate(torch, net, tx, ty)
        accuracies.append(acc)
        times.append(trained)
        cc.emit("eval", elapsed_s=trained, step=step, images=step * a.batch,
                test_accuracy=acc, test_loss=loss)

    evaluation(0)
    for step in range(1, a.steps + 1):
        started = time.perf_counter()
        if len(order) < a.batch:
            # a fresh shuffle of the training images each epoch
            more = list(range(train["n"]))
            rng.shuffle(more)
            order.extend(more)
        idx = torch.tensor(order[:a.batch])
        del order[:a.batch]
        opt.zero_grad(set_to_none=True)
        loss = cc.weighted_bce(torch, net(x[idx]), y[idx], w[idx])
        loss.backward()
        opt.step()
        trained += time.perf_counter() - started
        if step % a.eval_every == 0 or step == a.steps:
            evaluation(step)
    reached = cc.first_reached(accuracies, a.target)
    cc.emit("done", peer="single", steps=a.steps, batch=a.batch, threads=a.threads,
            seconds_per_step=trained / a.steps, images_per_s=a.steps * a.batch / trained,
            train_s=trained, target=a.target,
            time_to_target_s=None if reached is None else times[reached],
            reached_at_eval=reached, final_test_accuracy=accuracies[-1],
            torch=torch.__version__)


if __name__ == "__main__":
    main()
