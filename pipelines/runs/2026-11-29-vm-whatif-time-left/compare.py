"""Compares two grid.sh outputs: mean vs-bound over the seeds per setting,
the ratio, and the geometric mean of the per-replay ratios.
Usage: python3 compare.py BEFORE.tsv AFTER.tsv"""
import collections, math, sys


def load(path):
    rows = {}
    for line in open(path):
        w, units, pattern, mb, seed, vs, msgs = line.rstrip("\n").split("\t")
        rows[(int(w), int(units), pattern, int(mb), int(seed))] = float(vs)
    return rows


a, b = load(sys.argv[1]), load(sys.argv[2])
groups = collections.defaultdict(list)
for k in a:
    if k in b:
        groups[k[:4]].append((a[k], b[k]))
print("| workers | units | pattern | micro-batches | before | after | change |")
print("|---|---|---|---|---|---|---|")
ratios = []
for k in sorted(groups):
    pairs = groups[k]
    x = sum(p[0] for p in pairs) / len(pairs)
    y = sum(p[1] for p in pairs) / len(pairs)
    ratios += [p[1] / p[0] for p in pairs]
    print(f"| {k[0]:,} | {k[1]} | {k[2]} | {k[3]} | {x:.3f}× | {y:.3f}× | {100 * (y / x - 1):+.1f} % |")
g = math.exp(sum(map(math.log, ratios)) / len(ratios))
print(f"\n{len(ratios)} replays: geometric mean of after/before {100 * (g - 1):+.2f} %, "
      f"worst {100 * (max(ratios) - 1):+.1f} %, best {100 * (min(ratios) - 1):+.1f} %")
