#!/usr/bin/env python3
"""The PyTorch peer's per-image training cost on one thread, beside forestall's
`cargo bench --bench cnn_cost`: thread CPU time of one optimiser step (forward,
backward and Adam) and of forward and backward alone (what forestall's
gradient call does), per image, by batch size.

    taskset -c 0 python3 pipelines/peers/cnn_torch_cost.py --data data/pneumoniamnist.npz

Thread CPU time, not wall time, so other processes on the core do not bias it;
torch runs on the calling thread (torch.set_num_threads(1)). The sizes are
interleaved: every round runs each size once over --images consecutive
training images (after one warm-up step per size). Prints one JSON line per
size: {"event": "cost", "batch", "steps", "step_ms_per_image",
"grad_ms_per_image", "step_ms_per_step"} (medians), then
{"event": "done", "torch", "threads"}.
"""

import argparse
import statistics
import time

import cnn_common as cc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="MedMNIST .npz (train_* and test_* arrays)")
    p.add_argument("--sizes", default="8,32", help="comma-separated batch sizes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--images", type=int, default=128, help="images per size and round")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    a = p.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        cc.fail(f"--sizes must be comma-separated integers (got {a.sizes!r})")
    if any(s < 1 for s in sizes) or a.rounds < 1 or a.images < 1 or a.threads < 1:
        cc.fail("--sizes, --rounds, --images and --threads must be at least 1")
    try:
        train = cc.load_split(a.data, "train")
    except cc.PeerError as e:
        cc.fail(str(e))

    import torch

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    x, y = cc.images_tensor(torch, train)
    weights = cc.class_weights(train["labels"], "balanced")
    w = torch.tensor(weights, dtype=torch.float32)[y.long()]
    net = cc.make_net(torch)
    opt = cc.adam(torch, net, 1e-3, 0.0)
    n = x.shape[0]

    def step(lo, m, with_adam):
        idx = torch.arange(lo, lo + m)
        started = time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss = cc.weighted_bce(torch, net(x[idx]), y[idx], w[idx])
        loss.backward()
        if with_adam:
            opt.step()
        return (time.thread_time() - started) * 1e3

    for m in sizes:
        step(0, m, True)
    full = {m: [] for m in sizes}
    grad = {m: [] for m in sizes}
    for r in range(a.rounds):
        for k in range(len(sizes)):
            m = sizes[(k + r) % len(sizes)]
            lo = (r * a.images) % n
            for i in range(max(1, a.images // m)):
                if lo + m > n:
                    lo = 0
                full[m].append(step(lo, m, True) / m)
                grad[m].append(step(lo, m, False) / m)
                lo += m
    for m in sizes:
        cc.emit("cost", batch=m, steps=len(full[m]),
                step_ms_per_image=statistics.median(full[m]),
                grad_ms_per_image=statistics.median(grad[m]),
                step_ms_per_step=statistics.median(full[m]) * m)
    cc.emit("done", torch=torch.__version__, threads=a.threads,
            num_threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
