#!/usr/bin/env python3
"""The PyTorch DDP peer of forestall's CNN under injected stragglers: W ranks on
this machine (gloo, CPU, one thread each), each computing U units of B images per
iteration, then one allreduce and one Adam step (the net, loss, class weights and
Adam of cnn_common.py).

    python3 pipelines/peers/cnn_ddp.py --data data/pneumoniamnist.npz \\
        --ranks 8 --units 2 --iterations 20 --pace-ns-per-row 20000000 \\
        --schedule slowdowns.json --also-no-stragglers

Paced as forestall's paced mode (src/run/worker/compute.rs): a unit of n images
on a rank slowed by f lasts pace · n · f — its real gradient first, then a sleep
to that deadline — and its gradient is not sent before the deadline: the units
but the last accumulate under DDP's no_sync; the last one's backward hands DDP's
buckets to a communication hook that waits for the deadline, then allreduces
(gloo) and averages. --pace-ns-per-row 0 runs at native speed (no sleep;
no schedule).

--schedule is the slowdown of every (iteration, rank), written by forestall
(`forestall bench` writes it from the same straggler schedule its own runs use):
{"workers": W, "iterations": N, "slowdown": [[f_rank0, ...], ...]}. Without it
no rank is slowed. --also-no-stragglers runs the same job again without the
schedule and reports its time too.

Prints JSON lines: {"event": "run", "stragglers": bool, "time_per_iteration_ms",
"median_iteration_ms", "iteration_ms": [...]} per run, then {"event": "done",
... "excess": time / no-straggler time when both ran}. --dry-run checks the data
and the schedule, prints {"event": "plan", ...} and exits without torch.
"""

import argparse
import json
import math
import os
import queue
import random
import socket
import statistics
import threading
import time

import cnn_common as cc


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="MedMNIST .npz (train_* arrays)")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--units", type=int, default=2, help="units per rank per iteration")
    p.add_argument("--batch", type=int, default=32, help="images per unit")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--pace-ns-per-row", type=int, default=20_000_000)
    p.add_argument("--schedule", help="slowdown per (iteration, rank), JSON")
    p.add_argument("--also-no-stragglers", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--l2", type=float, default=0.0)
    p.add_argument("--class-weighting", choices=["balanced", "none"], default="balanced")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    for name in ("ranks", "units", "batch", "iterations"):
        if getattr(a, name) < 1:
            cc.fail(f"--{name} must be at least 1 (got {getattr(a, name)})")
    if a.pace_ns_per_row < 0:
        cc.fail(f"--pace-ns-per-row must be at least 0 (got {a.pace_ns_per_row})")
    if not (a.lr > 0):
        cc.fail(f"--lr must be positive (got {a.lr})")
    if a.schedule and a.pace_ns_per_row == 0:
        cc.fail("--schedule needs --pace-ns-per-row above 0: slowdowns stretch paced units")
    return a


def read_schedule(path, ranks, iterations):
    """The slowdowns [iteration][rank], checked against --ranks and --iterations."""
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        raise cc.PeerError(f"--schedule {path}: cannot read: {e}") from e
    rows = s.get("slowdown") if isinstance(s, dict) else None
    if s.get("workers") != ranks or not isinstance(rows, list):
        raise cc.PeerError(f"--schedule {path}: a schedule of {s.get('workers')} workers; --ranks is {ranks}")
    if len(rows) < iterations:
        raise cc.PeerError(f"--schedule {path}: {len(rows)} iterations; --iterations is {iterations}")
    for t, row in enumerate(rows[:iterations]):
        if not (isinstance(row, list) and len(row) == ranks
                and all(isinstance(f, (int, float)) and math.isfinite(f) and f >= 1 for f in row)):
            raise cc.PeerError(f"--schedule {path}: iteration {t} is not {ranks} slowdowns ≥ 1")
    return [list(map(float, r)) for r in rows[:iterations]]


class PacedAllreduce:
    """A DDP communication hook that holds each bucket until the rank's unit
    deadline, then allreduces it (sum / world) on one thread, in the order the
    buckets became ready (the same on every rank)."""

    def __init__(self, dist, world):
        self.dist = dist
        self.world = world
        self.deadline = 0.0
        self.overslept = 0.0
        self.jobs = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def hook(self, _state, bucket):
        import torch

        fut = torch.futures.Future()
        self.jobs.put((bucket.buffer(), fut, self.deadline))
        return fut

    def _run(self):
        while True:
            buf, fut, deadline = self.jobs.get()
            try:
                now = time.perf_counter()
                if deadline > now:
                    time.sleep(deadline - now)
                    self.overslept = time.perf_counter() - deadline
                self.dist.all_reduce(buf)
                buf.div_(self.world)
                fut.set_result(buf)
            except Exception as e:  # handed to the rank's backward
                fut.set_exception(e)


def rank_main(rank, a, port, slowdowns, out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    train = cc.load_split(a.data, "train")
    x, y = cc.images_tensor(torch, train)
    w = torch.tensor(cc.class_weights(train["labels"], a.class_weighting), dtype=torch.float32)[y.long()]
    torch.manual_seed(a.seed)
    net = cc.make_net(torch)
    model = DDP(net)
    paced = PacedAllreduce(dist, a.ranks)
    model.register_comm_hook(None, paced.hook)
    opt = cc.adam(torch, net, a.lr, a.l2)
    # the rank's shard of the training images, drawn from in a fresh order each pass
    everything = list(range(train["n"]))
    random.Random(a.seed).shuffle(everything)
    shard = everything[rank::a.ranks]
    rng = random.Random(a.seed * 1_000_003 + rank)
    order = []
    overslept = 0.0
    ends = []
    dist.barrier()
    begin = time.perf_counter()
    for t in range(a.iterations):
        opt.zero_grad(set_to_none=True)
        for u in range(a.units):
            if len(order) < a.batch:
                more = shard[:]
                rng.shuffle(more)
                order.extend(more)
            idx = torch.tensor(order[:a.batch])
            del order[:a.batch]
            started = time.perf_counter()
            f = slowdowns[t][rank] if slowdowns else 1.0
            nominal = a.pace_ns_per_row * a.batch * 1e-9
            target = nominal * f if a.pace_ns_per_row else None
            last = u + 1 == a.units
            if last:
                # the hook holds the gradient until the unit's deadline
                paced.deadline = started + max(target - overslept, 0.0) if target else 0.0
                loss = cc.weighted_bce(torch, model(x[idx]), y[idx], w[idx]) / a.units
                loss.backward()
                overslept = paced.overslept if target else 0.0
                paced.overslept = 0.0
            else:
                with model.no_sync():
                    loss = cc.weighted_bce(torch, model(x[idx]), y[idx], w[idx]) / a.units
                    loss.backward()
                if target:
                    deadline = started + target - overslept
                    now = time.perf_counter()
                    overslept = 0.0
                    if deadline > now:
                        time.sleep(deadline - now)
                        overslept = time.perf_counter() - deadline
        opt.step()
        ends.append(time.perf_counter() - begin)
    dist.barrier()
    if rank == 0:
        out.put(ends)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(a, slowdowns):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(rank_main, args=(a, free_port(), slowdowns, out), nprocs=a.ranks, join=True)
    ends = out.get()
    iteration_ms = [1000 * (e - b) for b, e in zip([0.0] + ends[:-1], ends)]
    return {
        "stragglers": slowdowns is not None,
        "time_per_iteration_ms": 1000 * ends[-1] / len(ends),
        "median_iteration_ms": statistics.median(iteration_ms),
        "iteration_ms": iteration_ms,
    }


def main():
    a = parse_args()
    try:
        train = cc.load_split(a.data, "train")
        slowdowns = read_schedule(a.schedule, a.ranks, a.iterations) if a.schedule else None
    except cc.PeerError as e:
        cc.fail(str(e))
    if a.units * a.batch > train["n"] // a.ranks:
        cc.fail(f"--units {a.units} × --batch {a.batch} exceeds a rank's shard of {train['n'] // a.ranks} images")
    if a.dry_run:
        cc.emit("plan", peer="ddp", train=train["n"], ranks=a.ranks, units=a.units, batch=a.batch,
                iterations=a.iterations, pace_ns_per_row=a.pace_ns_per_row,
                class_weights=cc.class_weights(train["labels"], a.class_weighting),
                slowed=0 if slowdowns is None else sum(f > 1 for r in slowdowns for f in r),
                mean_slowdown=1.0 if slowdowns is None else
                sum(map(sum, slowdowns)) / (a.ranks * a.iterations),
                seed=a.seed)
        return
    import torch

    runs = [run(a, slowdowns)]
    cc.emit("run", **runs[0])
    if a.also_no_stragglers and slowdowns is not None:
        runs.append(run(a, None))
        cc.emit("run", **runs[1])
    done = {"peer": "ddp", "ranks": a.ranks, "units": a.units, "batch": a.batch,
            "iterations": a.iterations, "time_per_iteration_ms": runs[0]["time_per_iteration_ms"],
            "torch": torch.__version__}
    if len(runs) == 2:
        done["no_straggler_ms"] = runs[1]["time_per_iteration_ms"]
        done["excess"] = runs[0]["time_per_iteration_ms"] / runs[1]["time_per_iteration_ms"]
    cc.emit("done", **done)


if __name__ == "__main__":
    main()
