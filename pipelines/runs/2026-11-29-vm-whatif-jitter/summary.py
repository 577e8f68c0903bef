"""Mean vs-bound over the seeds of results.tsv, as a Markdown table."""
import collections, sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1] if len(sys.argv) > 1 else "results.tsv"):
    w, jitter, seed, policy, mb, vs, vs_unit, msgs = line.split("\t")
    rows[(int(w), policy, int(mb), float(jitter))].append((float(vs), float(vs_unit)))
jitters = sorted({k[3] for k in rows})
print("| workers | policy | micro-batches | " + " | ".join(f"jitter {j:g}" for j in jitters) + " |")
print("|---|---|---|" + "---|" * len(jitters))
for w, policy, mb in sorted({k[:3] for k in rows}, key=lambda k: (k[0], k[1] != "forestall", k[1], k[2])):
    if policy != "forestall" and mb != 1:
        continue  # the others compute units whole either way
    cells = []
    for j in jitters:
        v = rows[(w, policy, mb, j)]
        cells.append("%.3f× (%.3f×)" % (sum(x[0] for x in v) / len(v), sum(x[1] for x in v) / len(v)))
    print(f"| {w:,} | `{policy}` | {mb} | " + " | ".join(cells) + " |")
