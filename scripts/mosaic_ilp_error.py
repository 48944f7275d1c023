#!/usr/bin/env python3
"""MOSAIC's ILP prediction error, taken apart (docs/unified-model-changes/mosaic-preset.md,
"The ILP's prediction error, i35dead").

Reads a results folder of a MOSAIC placement run with two cells, round robin first and the ILP
second (`placement.policy.kind = ["round_robin", "ilp"]`), over the same seeds, and splits each
seed's `prediction_error_pct` of the ILP cell (makespan against the plan's predicted makespan)
into parts that add up to it exactly, on the worker whose wall is the makespan:

- `load`: its sessions' load times against the plan's `load_s`;
- `slicing`: each session's generation time against the same share of its model's whole
  session (`calls / P` of the round-robin cell's session of all `P` calls, same seed, same
  calls): what a slice pays beyond its share, the longest call of the slice decoding at a small
  batch included;
- `per_call`: `calls x (W / P - tau)`, the whole session's measured cost a call against the
  calibrated `tau = predicted_session_s / P` (equation 3);
- `not_critical`: that worker's prediction against the plan's largest.

With the per-request CSV (`--per-request-csv`, under `requests/`), the regression's own terms at
each slice too: `T(x) = b0 + b1 x O_mean + b2 O_max` with the slice's own outputs against
`x tau`: `intercept` b0 (1 - x/P), `mean_out` b1 x (slice mean - subset mean), `tail`
b2 (slice max - x/P subset max), and `misfit` (the measured generation time against T(x)).

Prints per folder the means over seeds, in % of the predicted makespan, and per reasoning model
(a name with `Distill`) tau, the whole session's cost a call W/P and the calibration's error on
the whole session.

    python3 scripts/mosaic_ilp_error.py DIR [DIR ...]
"""
import collections
import csv
import json
import os
import sys


def short(model):
    return model.split("/")[-1]


def analyse(folder):
    results = json.load(open(os.path.join(folder, "results.json")))
    rr, ilp = results["cells"][0], results["cells"][1]
    if "round_robin" not in rr["id"] or "ilp" not in ilp["id"]:
        sys.exit(f"{folder}: the cells must be round_robin then ilp, not {rr['id']}, {ilp['id']}")
    parts = collections.Counter()
    per_model = collections.defaultdict(collections.Counter)
    two_reasoning = 0
    seeds = 0
    for rr_run, run in zip(rr["runs"], ilp["runs"]):
        seed = run["seed"]
        assert rr_run["seed"] == seed
        whole = {}
        for worker in rr_run["details"]["sessions"]["workers"]:
            for s in worker:
                assert s["model"] not in whole, "round robin runs a model in one session"
                whole[s["model"]] = (s["calls"], s["end_s"] - s["generate_start_s"])
        placement = run["details"]["placement"]
        sessions = run["details"]["sessions"]
        models = {m["name"]: m for m in placement["models"]}
        calibration = {c["model"]: c for c in placement.get("calibration", [])}
        outputs = None
        csv_path = os.path.join(folder, "requests", f"0001_seed{seed}.csv")
        if os.path.exists(csv_path):
            outputs = collections.defaultdict(list)
            for row in csv.DictReader(open(csv_path)):
                outputs[int(row["replica"])].append(int(row["output_tokens"]))
        predicted, terms = [], []
        for worker in sessions["workers"]:
            t = collections.Counter()
            p = 0.0
            for s in worker:
                m = models[s["model"]]
                calls, wall = whole[s["model"]]
                assert calls == m["prompts"]
                x = s["calls"]
                generate = s["end_s"] - s["generate_start_s"]
                p += m["load_s"] + x * m["per_prompt_s"]
                t["load"] += s["generate_start_s"] - s["load_start_s"] - m["load_s"]
                t["slicing"] += generate - x * wall / calls
                t["per_call"] += x * (wall / calls - m["per_prompt_s"])
                c = calibration.get(s["model"])
                if outputs is not None and c is not None:
                    out = outputs[s["replica"]]
                    assert len(out) == x
                    b0, b1, b2 = c["coefficients"]
                    share = x / calls
                    mean, longest = sum(out) / x, max(out)
                    t["r:intercept"] += b0 * (1 - share)
                    t["r:mean_out"] += b1 * x * (mean - c["mean_output"])
                    t["r:tail"] += b2 * (longest - share * c["max_output"])
                    t["r:misfit"] += generate - (b0 + b1 * x * mean + b2 * longest)
            predicted.append(p)
            terms.append(t)
        makespan = sessions["makespan_s"]
        plan = max(predicted)
        assert abs(plan - run["scalars"]["predicted_makespan_s"]) < 1e-6
        critical = max(range(len(predicted)), key=lambda w: sessions["worker_walls_s"][w])
        t = terms[critical]
        t["not_critical"] = predicted[critical] - plan
        model_free = t["load"] + t["slicing"] + t["per_call"] + t["not_critical"]
        assert abs(model_free - (makespan - plan)) < 1e-6
        for k, v in t.items():
            parts[k] += 100 * v / plan
        parts["error"] += 100 * (makespan - plan) / plan
        parts["predicted_s"] += plan
        parts["makespan_s"] += makespan
        reasoning = [s for s in sessions["workers"][critical] if "Distill" in s["model"]]
        two_reasoning += len(reasoning) >= 2
        for name, (calls, wall) in whole.items():
            if "Distill" in name and name in models:
                m = models[name]
                per_model[short(name)]["P"] += calls
                per_model[short(name)]["tau"] += m["per_prompt_s"]
                per_model[short(name)]["W/P"] += wall / calls
                per_model[short(name)]["whole_error_pct"] += (
                    100 * (wall - m["predicted_session_s"]) / m["predicted_session_s"]
                )
        seeds += 1
    print(f"{folder} ({seeds} seeds)")
    order = ["error", "load", "slicing", "per_call", "not_critical"]
    print("  % of the predicted makespan: " + ", ".join(f"{k} {parts[k] / seeds:+.1f}" for k in order))
    regression = [k for k in sorted(parts) if k.startswith("r:")]
    if regression:
        print("  the regression's terms: " + ", ".join(f"{k[2:]} {parts[k] / seeds:+.1f}" for k in regression))
    print(
        f"  predicted {parts['predicted_s'] / seeds:.2f} s, run {parts['makespan_s'] / seeds:.2f} s; "
        f"critical workers with two reasoning sessions: {two_reasoning} of {seeds}"
    )
    for name, c in sorted(per_model.items()):
        print(
            f"  {name}: P {c['P'] / seeds:.0f}, tau {c['tau'] / seeds:.3f} s, W/P {c['W/P'] / seeds:.3f} s, "
            f"whole session against its prediction {c['whole_error_pct'] / seeds:+.1f} %"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for folder in sys.argv[1:]:
        analyse(folder)
