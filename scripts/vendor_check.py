#!/usr/bin/env python3
"""A calibrated profile's MoE expert against the vendor's own GEMMs on the same shape.

`expertsim-calibrate` measures `expert_ffn`, one whole MoE layer (grouping, gather, the gate/up
GEMM, SwiGLU, the down GEMM, combine) with every token routed to one expert, and the expert's
two GEMMs alone (`expert_gemm/w13`, `expert_gemm/w2`), which split the layer by mechanism
(the profile's `expert_ffn[0].split`): its fixed part, launched once per layer, and each
active expert's GEMM pair, which is what one more expert costs a layer. That per-expert price
is set against the reference: at every reference token count in --tokens (a range,
inclusive) this prints the profile's expert GEMM pair (interpolated linearly between its
samples, as the simulator reads it), the sum of the reference's w13 and w2 medians, their
ratio, and beside them the whole one-expert layer and what the layer adds around its GEMMs;
it exits 1 when a ratio of the expert GEMM pair lies outside [1 / --max-ratio, --max-ratio].
A profile without the split (an older one) is judged on its whole layer. A profile of another
device than the reference's is compared all the same but cannot fail (the ratios are then
informative only). Standard library only; run by scripts/gpu_validate.sh.
"""

import argparse
import csv
import json
import sys


def curve_at(samples, x):
    """The curve's value at x: linear between samples, clamped to the ends (as sim's CostCurve)."""
    if x <= samples[0][0]:
        return samples[0][1]
    for (x0, y0), (x1, y1) in zip(samples, samples[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return samples[-1][1]


def reference_sums(path, prefix, timing):
    """tokens -> (w13 + w2 median us, device note) from the reference CSV."""
    per = {}
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["timing"] != timing or not row["shape"].startswith(prefix):
                continue
            per.setdefault(int(row["tokens"]), {})[row["shape"]] = float(row["median_us"])
    return {t: sum(v.values()) for t, v in per.items() if len(v) == 2}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", help="a measured profile JSON (expertsim-calibrate)")
    parser.add_argument("reference", help="the vendor reference CSV (profiles/reference/)")
    parser.add_argument("--shape", default="qwenmoe_", help="reference shape prefix (w13 and w2)")
    parser.add_argument("--reference-device", default="NVIDIA H200")
    parser.add_argument("--timing", default="graph")
    parser.add_argument("--tokens", default="64-2048", help="inclusive range of token counts")
    parser.add_argument("--max-ratio", type=float, default=1.5)
    args = parser.parse_args()

    try:
        with open(args.profile, encoding="utf-8") as f:
            profile = json.load(f)
        samples = profile["expert_ffn"][0]["curve"]["samples"]
        device = profile.get("gpu", "?")
        model = profile.get("model", {}).get("name", "?")
        sums = reference_sums(args.reference, args.shape, args.timing)
        lo, hi = (int(v) for v in args.tokens.split("-"))
    except (OSError, KeyError, IndexError, ValueError, json.JSONDecodeError) as e:
        print(f"vendor_check: cannot read the inputs: {e}", file=sys.stderr)
        return 2
    points = sorted(t for t in sums if lo <= t <= hi)
    if not points:
        print(f"vendor_check: no reference token count in {lo}-{hi}", file=sys.stderr)
        return 2
    same_device = device == args.reference_device
    split = profile["expert_ffn"][0].get("split")
    expert = split["expert_gemms"]["samples"] if split else samples
    judged = "the expert's GEMM pair (the profile's split)" if split else "the whole layer"
    print(f"{judged} of {model} on {device} ({args.profile}) against cuBLAS's w13 + w2 on "
          f"{args.reference_device} ({args.reference}, {args.timing} timing)")
    print("| tokens | profile expert (us) | cuBLAS w13 + w2 (us) | ratio | whole layer (us) "
          "| layer - expert (us) |")
    print("|---|---|---|---|---|---|")
    worst = 1.0
    for t in points:
        ours = curve_at(expert, t) / 1e3
        layer = curve_at(samples, t) / 1e3
        ratio = ours / sums[t]
        worst = max(worst, ratio, 1.0 / ratio)
        print(f"| {t} | {ours:.1f} | {sums[t]:.1f} | {ratio:.2f}x | {layer:.1f} | "
              f"{layer - ours:.1f} |")
    within = worst <= args.max_ratio
    verdict = "within" if within else "NOT within"
    print(f"worst ratio {worst:.2f}x: {verdict} {args.max_ratio}x at {lo}-{hi} tokens")
    if not same_device:
        print(f"(the profile's device is {device}, not {args.reference_device}: informative only)")
        return 0
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
