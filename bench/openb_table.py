#!/usr/bin/env python3
"""openb_table.py: the fgd protocol on every openb pod list, one table of unallocated GPU capacity at 130%.

Usage: bench/openb_table.py --data DIR [--gpupack build-rel/gpupack] [--strategy S]... [--seeds 42..51]
                            [--lists default,cpu050,...] [--jobs 2] [--out DIR] [--label NAME]

DIR holds openb_node_list_gpu_node.csv and the seventeen openb_pod_list_<list>.csv of the trace
(alibaba/clusterdata, cluster-trace-gpu-v2023/csv). For each list it runs
  gpupack plan NODES PODS --strategy S... --seeds SEEDS --jobs N --quiet --format json
(one list at a time; the planner spreads the runs over N threads), keeps each list's JSON in --out (a list whose
JSON is there is not run again: delete it to rerun), and prints a Markdown table: per list the published FGD and
BestFit (the planner's own `published` block: the paper's figures, the list recognised by content) and every
strategy's unallocated share at 130% with its difference to its own reference (fgd: FGD, bestfit: BestFit,
random: Random, every other: FGD), then how many lists each strategy leaves less than the published FGD on, and
its mean difference to it. Environment variables pass through to gpupack.
"""
import argparse
import json
import os
import subprocess
import sys
import time

LISTS = ["default", "cpu050", "cpu100", "cpu200", "cpu250", "gpushare40", "gpushare60", "gpushare80",
         "gpushare100", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "multigpu20", "multigpu30",
         "multigpu40", "multigpu50"]


def run_list(args, name):
    out = os.path.join(args.out, f"{args.label}{name}.json")
    if os.path.exists(out):
        with open(out) as f:
            return json.load(f), 0.0
    cmd = [args.gpupack, "plan", os.path.join(args.data, "openb_node_list_gpu_node.csv"),
           os.path.join(args.data, f"openb_pod_list_{name}.csv"), "--seeds", args.seeds, "--jobs", str(args.jobs),
           "--quiet", "--format", "json"]
    for s in args.strategy:
        cmd += ["--strategy", s]
    start = time.time()
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    took = time.time() - start
    with open(out, "w") as f:
        f.write(text)
    return json.loads(text), took


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--gpupack", default="build-rel/gpupack")
    p.add_argument("--strategy", action="append", default=[])
    p.add_argument("--seeds", default="42..51")
    p.add_argument("--lists", default=",".join(LISTS))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="/tmp/openb_table")
    p.add_argument("--label", default="", help="prefix of the kept JSON files (one per variant)")
    args = p.parse_args()
    if not args.strategy:
        args.strategy = ["fgd", "bestfit", "binpack:fragmentation"]
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.lists.split(",") if n]
    rows, wins, diffs = [], {s: 0 for s in args.strategy}, {s: [] for s in args.strategy}
    header = "| list | published FGD | published BestFit | " + " | ".join(f"`{s}`" for s in args.strategy) + " |"
    print(header)
    print("|" + "---|" * (3 + len(args.strategy)))
    for name in names:
        report, took = run_list(args, name)
        pub = report.get("published", {}).get("paper", {})
        fgd, best = pub.get("FGD"), pub.get("BestFit")
        cells = []
        for s in args.strategy:
            st = next(x for x in report["strategies"] if x["name"] == s)
            v = st["unallocatedPctAt"][str(report["demandPct"])]
            ref = report.get("published", {}).get("strategies", {}).get(s)
            if fgd is not None:
                diffs[s].append(v - fgd)
                wins[s] += v < fgd
            # The difference to the strategy's own reference (fgd: FGD, bestfit: BestFit, others: FGD).
            cells.append(f"{v:.2f} ({v - ref['published']:+.2f})" if ref else f"{v:.2f}")
        print(f"| {name} | {fgd if fgd is not None else '-'} | {best if best is not None else '-'} | "
              + " | ".join(cells) + " |", flush=True)
        if took:
            print(f"  ({name}: {took:.1f} s)", file=sys.stderr, flush=True)
    for s in args.strategy:
        if diffs[s]:
            print(f"\n`{s}`: below the published FGD on {wins[s]} of {len(diffs[s])} lists; mean difference "
                  f"{sum(diffs[s]) / len(diffs[s]):+.3f}, worst {max(diffs[s]):+.2f}", end="")
    print()


if __name__ == "__main__":
    main()
