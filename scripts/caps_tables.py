#!/usr/bin/env python3
"""Prints the CAPS reproduction tables (markdown) from expertsim result documents.

Usage: scripts/caps_tables.py LABEL=results/<name>/results.json [LABEL=... ...]

For each result document: per strategy, the range over arrival rates of the bursty P99
improvement, throughput gain and imbalance reduction against fcfs (the layout of caps.txt's first
table); and per rate, greedy_variance's bursty and Poisson P99 improvement (caps.txt's second
table). Every number comes from the result files; nothing is typed in.
"""
import json
import sys

ORDER = ["greedy_dot_product", "norm_minimizing", "best_fit", "greedy_variance", "power_of_d",
         "lpt_balanced", "random", "karmarkar_karp", "lpt", "power_of_d_dot", "differencing"]


def cells_by(doc):
    out = {}
    for cell in doc["cells"]:
        coords = {k: v for k, v in cell["coords"]}
        out[(coords["arrival.pattern"], coords["arrival.rate_per_s"], coords["scheduler.selector.kind"])] = cell
    return out


def rng(values):
    lo, hi = min(values), max(values)
    return f"{lo:+.1f}% to {hi:+.1f}%"


def main():
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        doc = json.load(open(path))
        cells = cells_by(doc)
        rates = sorted({r for (_, r, _) in cells})
        print(f"#### {label}\n")
        print("| strategy | bursty P99 improvement | throughput gain | imbalance reduction |")
        print("|---|---|---|---|")
        for kind in ORDER:
            imps = [cells[("bursty", r, kind)]["improvement"] for r in rates]
            print(f"| {kind} | {rng([i['pct']['latency_p99_ms'] for i in imps])} | "
                  f"{rng([i['pct']['throughput_rps'] for i in imps])} | "
                  f"{rng([i['pct']['imbalance'] for i in imps])} |")
        print()
        print("| rate (req/s) | bursty P99 improvement (greedy_variance) | Poisson P99 improvement (greedy_variance) | FCFS throughput bursty / Poisson (req/s) | FCFS P99 bursty / Poisson (ms) |")
        print("|---|---|---|---|---|")
        for r in rates:
            b = cells[("bursty", r, "greedy_variance")]["improvement"]["pct"]["latency_p99_ms"]
            p = cells[("poisson", r, "greedy_variance")]["improvement"]["pct"]["latency_p99_ms"]
            fb, fp = cells[("bursty", r, "fcfs")]["summary"], cells[("poisson", r, "fcfs")]["summary"]
            print(f"| {r} | {b:+.1f}% | {p:+.1f}% | {fb['throughput_rps']['mean']:.1f} / {fp['throughput_rps']['mean']:.1f} | "
                  f"{fb['latency_p99_ms']['mean']:.0f} / {fp['latency_p99_ms']['mean']:.0f} |")
        print()
        print("| strategy | Poisson P99 improvement, 200-300 req/s |")
        print("|---|---|")
        for kind in ["greedy_dot_product", "best_fit", "greedy_variance", "power_of_d"]:
            vals = [cells[("poisson", r, kind)]["improvement"]["pct"]["latency_p99_ms"] for r in rates if r >= 200]
            print(f"| {kind} | {rng(vals)} |")
        print()


if __name__ == "__main__":
    main()
