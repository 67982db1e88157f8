#!/usr/bin/env python3
"""openb_variants.py: variants of an openb pod list, to check a placement strategy beyond the two published lists.

Usage: bench/openb_variants.py POD_LIST.csv NODE_LIST.csv OUT_DIR

Writes OUT_DIR/openb_pod_list_<variant>.csv, each the input list with some pods repeated or changed
(deterministic: seeded with 42):
  sharing   every GPU-sharing pod (num_gpu 1, gpu_milli < 1000) twice: more sharing
  multigpu  every pod of 2 or more GPUs four times: more multi-GPU tasks
  cpuonly   every pod without a GPU three times: more CPU-only tasks
  typed     40% of the GPU pods without a gpu_spec get one: the GPU model of a random node of the node list
            (weighted by the GPUs each model has), sometimes with a second model (a|b): GPU-type constraints
Repeated rows get a suffix on their name (-r1, -r2, ...); the planner samples rows, so a row twice is twice as
likely. docs/planning.md gives the figures of the strategies on each.
"""
import csv
import os
import random
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    pods_path, nodes_path, out_dir = sys.argv[1:]
    with open(pods_path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames
        pods = list(reader)
    with open(nodes_path, newline="") as f:
        nodes = list(csv.DictReader(f))
    models = sorted({n["model"] for n in nodes})
    gpus_by_model = {m: sum(int(n["gpu"]) for n in nodes if n["model"] == m) for m in models}
    os.makedirs(out_dir, exist_ok=True)

    def repeat(pred, times):
        out = []
        for p in pods:
            out.append(p)
            if pred(p):
                for k in range(1, times):
                    q = dict(p)
                    q["name"] = f'{p["name"]}-r{k}'
                    out.append(q)
        return out

    def sharing(p):
        return p["num_gpu"] == "1" and int(p["gpu_milli"]) < 1000

    variants = {
        "sharing": repeat(sharing, 2),
        "multigpu": repeat(lambda p: int(p["num_gpu"]) >= 2, 4),
        "cpuonly": repeat(lambda p: p["num_gpu"] == "0", 3),
    }
    rng = random.Random(42)
    typed = []
    for p in pods:
        q = dict(p)
        if int(p["num_gpu"]) > 0 and not p["gpu_spec"] and rng.random() < 0.4:
            pick = rng.choices(models, weights=[gpus_by_model[m] for m in models], k=2)
            q["gpu_spec"] = pick[0] if rng.random() < 0.7 or pick[0] == pick[1] else f"{pick[0]}|{pick[1]}"
        typed.append(q)
    variants["typed"] = typed

    for name, rows in variants.items():
        path = os.path.join(out_dir, f"openb_pod_list_{name}.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"{path}: {len(rows)} pods")


if __name__ == "__main__":
    main()
