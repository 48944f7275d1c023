#!/usr/bin/env python3
"""The cost model's dense GEMMs against this project's own cuBLAS runs of an expert's GEMM pair.

`expertsim-calibrate --backend cuda` times one MoE expert's two GEMMs alone (gate+up, then
down: `expert_ffn[0].split.expert_gemms` of a profile, CUDA-graph timed, weights rotated past
the L2). This writes, for every sample of every profile given, the two rows `expertsim price`
takes for the same GEMMs (`expert_up` and `expert_down` at that token count, on the catalogue
GPU named with the profile), prices them with the simulator's own entry point and prints, per
profile and per token range (1-64, then above), the distribution of model / measured: median
|error|, the share within +-20 %, and the ratio's range and median. The priced CSV is kept
(--out), so every number can be checked row by row. Standard library only.

    python3 scripts/expert_pair_check.py --expertsim target/release/expertsim \
        H100-SXM:mixtral-8x7b:profiles/measured/nvidia-h100-80gb-hbm3_mixtral-8x7b-to4096.json ...
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile


def pairs(spec):
    """GPU:MODEL:PROFILE -> (gpu, model, [(tokens, measured us)])."""
    try:
        gpu, model, path = spec.split(":", 2)
    except ValueError:
        sys.exit(f"expert_pair_check: {spec!r}: expected GPU:MODEL:PROFILE")
    with open(path, encoding="utf-8") as f:
        profile = json.load(f)
    try:
        samples = profile["expert_ffn"][0]["split"]["expert_gemms"]["samples"]
    except (KeyError, IndexError):
        sys.exit(f"expert_pair_check: {path}: no expert_ffn[0].split.expert_gemms (an older profile)")
    return gpu, model, [(int(t), ns / 1000.0) for t, ns in samples]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profiles", nargs="+", help="GPU:MODEL:PROFILE (catalogue GPU and model names)")
    parser.add_argument("--expertsim", default="target/release/expertsim")
    parser.add_argument("--out", help="keep the priced CSV here")
    args = parser.parse_args()

    cases = [pairs(spec) for spec in args.profiles]
    with tempfile.TemporaryDirectory() as tmp:
        ops = os.path.join(tmp, "ops.csv")
        priced = args.out or os.path.join(tmp, "priced.csv")
        with open(ops, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["gpu", "model", "op", "tokens", "measured_pair_us"])
            for gpu, model, samples in cases:
                for tokens, us in samples:
                    for op in ("expert_up", "expert_down"):
                        w.writerow([gpu, model, op, tokens, f"{us:.3f}"])
        subprocess.run([args.expertsim, "price", ops, "--out", priced], check=True)
        model_us = {}
        with open(priced, encoding="utf-8") as f:
            for row in csv.DictReader(f):
                key = (row["gpu"], row["model"], int(row["tokens"]))
                model_us[key] = model_us.get(key, 0.0) + float(row["predicted_us"])

    print("| GPU | model | tokens | points | median abs error | within +-20 % | model / measured (range, median) |")
    print("|---|---|---|---|---|---|---|")
    for gpu, model, samples in cases:
        for lo, hi in ((1, 64), (65, None)):
            ratios = [model_us[(gpu, model, t)] / us for t, us in samples if t >= lo and (hi is None or t <= hi)]
            if not ratios:
                continue
            errors = [abs(r - 1.0) for r in ratios]
            top = hi if hi is not None else max(t for t, _ in samples)
            print(
                f"| {gpu} | {model} | {lo}-{top} | {len(ratios)} | {100 * statistics.median(errors):.1f} % "
                f"| {100 * sum(e <= 0.2 for e in errors) / len(errors):.0f} % "
                f"| {min(ratios):.2f}-{max(ratios):.2f}, {statistics.median(ratios):.2f} |"
            )


if __name__ == "__main__":
    main()
