#!/usr/bin/env python3
"""Lines of the successors of `sim` (core, cost, serving, scenario), by crate, module and origin.

Issue 28 asks where the lines come from. Each `.rs` file's lines are split into code and tests:
a whole file is tests when it is a test module (`tests.rs`, `*_tests.rs`, `*_checks.rs`,
`fixtures.rs`, `test_support.rs`, `serving_family_files.rs`, `shipped_scenarios.rs`, or under
`tests/` or `benches/`); otherwise a `#[cfg(test)]` item is tests, a block counted from its
attribute to the closing brace at the item's indent (rustfmt's layout). A module is
`<crate>/src/<name>`, one level deeper under `serving_family`, `serving`, `policies` and
`recorder`. Each module then has one origin (`ORIGIN`): the paper whose capability it is (it
came out of that paper's family folder, or was built for that paper's preset), the cost model
(issue 27's), or the base every preset shares. At a commit before the crate split (6623201)
the five family folders and `sim/src/cost` are told apart too. The folder `sim/` (renamed
`scenario/` in issue 28's step 7) is counted as `scenario/` at every revision.

    python3 scripts/lines_by_module.py [REV] [--modules]

REV: a commit (default: the work tree). --modules: print every module's row too.
"""
import collections
import re
import subprocess
import sys

WHOLE_TEST = re.compile(
    r"(^|/)(tests|fixtures|test_support|serving_family_files|shipped_scenarios|[a-z_]*_tests"
    r"|[a-z_]*_checks)\.rs$|/tests/|/benches/"
)

# The modules that are one paper's capability, shared by every preset now.
ORIGIN = {
    "CAPS": [
        "serving/src/policies/batch", "serving/src/serving/topic_affinity",
        "serving/src/serving_family/batch_former", "serving/src/serving_family/execution",
        "serving/src/serving_family/predictions", "serving/src/serving_family/selector_former",
        "serving/src/serving_family/static_pricing",
    ],
    "GEM": [
        "serving/src/policies/mapping", "serving/src/serving/datasets",
        "serving/src/serving/expert_trace", "serving/src/serving/profiling",
        "serving/src/serving/variability", "serving/src/serving_family/curve_pricing",
        "serving/src/serving_family/experiment", "serving/src/serving_family/expert_routing",
        "serving/src/serving_family/mapping",
    ],
    "ExpertWeave": [
        "serving/src/policies/memory", "serving/src/serving_family/adapters",
        "serving/src/serving_family/popularity", "serving/src/serving_family/rerouting",
    ],
    "Chimera": [
        "serving/src/serving/agent_workflows", "serving/src/serving/policy",
        "serving/src/serving/predictors", "serving/src/serving/prefix",
        "serving/src/serving_family/dense_profile", "serving/src/serving_family/swap",
        "serving/src/serving_family/workflows", "serving/src/serving_family/live_scale",
    ],
    "MOSAIC": [
        "serving/src/policies/gate", "serving/src/policies/placement",
        "serving/src/recorder/sessions", "serving/src/recorder/timeline",
        "serving/src/serving/questions", "serving/src/serving/session_regression",
        "serving/src/serving_family/load", "serving/src/serving_family/placement",
        "serving/src/serving_family/questions", "serving/src/serving_family/session_calibration",
        "serving/src/serving_family/sessions",
    ],
}
PAPER = {module: paper for paper, modules in ORIGIN.items() for module in modules}


def origin(module):
    # Before the crate split the serving modules were `sim`'s.
    for before in ("scenario/src/serving/", "scenario/src/serving_family/"):
        if module.startswith(before):
            module = "serving/src/" + module.removeprefix("scenario/src/")
    if module in PAPER:
        return f"capability a paper needed, now shared: {PAPER[module]}"
    family = module.removeprefix("scenario/src/")
    if family in ("caps", "gem", "expertweave", "chimera", "mosaic"):
        return f"a family's own folder (deleted since): {family}"
    if module.startswith(("cost/", "scenario/src/cost")):
        return "the cost model (issue 27's kernel model, timings, fits)"
    if module.startswith("core/"):
        return "base: core (engine, arrivals, metrics, validation)"
    if module.startswith(("serving/", "scenario/src/serving/", "scenario/src/serving_family/")):
        return "base: serving (replica loop, serving family's server, config, metrics)"
    return "base: scenario (scenario files, runner, claims, results)"


def split(lines, path):
    """(lines, test lines) of one file."""
    n = len(lines)
    if WHOLE_TEST.search(path):
        return n, n
    test, i = 0, 0
    while i < n:
        if lines[i].strip() == "#[cfg(test)]":
            j = i + 1
            if lines[j].rstrip().endswith(";"):
                test += 2
                i = j + 1
                continue
            indent = len(lines[j]) - len(lines[j].lstrip())
            k = j + 1
            while k < n and not (
                lines[k].startswith(" " * indent + "}")
                and len(lines[k]) - len(lines[k].lstrip()) == indent
            ):
                k += 1
            test += k - i + 1
            i = k + 1
            continue
        i += 1
    return n, test


def module_of(path):
    if path.startswith("sim/"):
        path = "scenario/" + path.removeprefix("sim/")
    parts = path.split("/")
    deeper = ("serving_family", "serving", "policies", "recorder")
    if len(parts) > 3 and parts[1] == "src" and parts[2] in deeper:
        return "/".join(parts[:4]).removesuffix(".rs")
    if len(parts) > 2 and parts[1] == "src":
        return "/".join(parts[:3]).removesuffix(".rs")
    return "/".join(parts[:2])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rev = args[0] if args else None
    folders = ["core", "cost", "serving", "scenario", "sim"]
    if rev:
        listing = ["git", "ls-tree", "-r", "--name-only", rev, *folders]
    else:
        listing = ["git", "ls-files", *folders]
    files = [f for f in subprocess.check_output(listing, text=True).split() if f.endswith(".rs")]
    modules = collections.OrderedDict()
    for path in sorted(files):
        if rev:
            text = subprocess.check_output(["git", "show", f"{rev}:{path}"], text=True)
        else:
            text = open(path).read()
        n, t = split(text.splitlines(), path)
        row = modules.setdefault(module_of(path), [0, 0])
        row[0] += n
        row[1] += t
    if "--modules" in sys.argv:
        print("| module | origin | lines | code | tests |\n|---|---|---|---|---|")
        for m, (n, t) in modules.items():
            print(f"| `{m}` | {origin(m)} | {n:,} | {n - t:,} | {t:,} |")
        print()
    for title, key in (("crate", lambda m: m.split("/")[0] + "/"), ("origin", origin)):
        sums = collections.OrderedDict()
        for m, (n, t) in modules.items():
            row = sums.setdefault(key(m), [0, 0])
            row[0] += n
            row[1] += t
        print(f"| {title} | lines | code | tests |\n|---|---|---|---|")
        for k in sorted(sums):
            n, t = sums[k]
            print(f"| {k} | {n:,} | {n - t:,} | {t:,} |")
        n = sum(r[0] for r in sums.values())
        t = sum(r[1] for r in sums.values())
        print(f"| total | {n:,} | {n - t:,} | {t:,} |\n")


if __name__ == "__main__":
    main()
