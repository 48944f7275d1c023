//! Grep-level checks that the cost model is one: every Rust source of the workspace (and every
//! scenario file) is read as text and held to one GPU table, one model-shape table and one
//! roofline. A reviewer runs them with `cargo test -p expertsim-scenario --lib one_model_checks`.

use std::path::{Path, PathBuf};

/// The workspace's source folders, relative to its root.
const SOURCE_DIRS: &[&str] = &[
    "src",
    "core/src",
    "cost/src",
    "serving/src",
    "scenario/src",
    "scenario/examples",
    "scenario/benches",
    "strategies/src",
    "strategies/examples",
    "strategies/benches",
    "kernels/src",
    "live/src",
    "calibrate/src",
    "figures/src",
    "tests",
];

/// This file, which names what it looks for.
const THIS_FILE: &str = "scenario/src/one_model_checks.rs";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files_under(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, extension, out);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
}

/// (path relative to the root, text) of every Rust source but this file.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        files_under(&root.join(dir), "rs", &mut files);
    }
    let sources: Vec<(String, String)> = files
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (relative, std::fs::read_to_string(&path).unwrap())
        })
        .filter(|(relative, _)| relative != THIS_FILE)
        .collect();
    assert!(sources.len() > 100, "found only {} sources", sources.len());
    sources
}

/// Code lines of `text` (the part before any `//` comment), numbered from 1.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split("//").next().unwrap_or("")))
}

/// Where `type_name { ... }` builds a value (not a definition, an impl or a return type).
fn struct_literals(type_name: &str, allowed_dir: &str) -> Vec<String> {
    let needle = format!("{type_name} {{");
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path.starts_with(allowed_dir) {
            continue;
        }
        for (number, line) in code_lines(&text) {
            let Some(at) = line.find(&needle) else {
                continue;
            };
            let before = line[..at].trim_end().trim_end_matches('&').trim_end();
            let definition = ["struct", "impl", "->", "for", "enum"]
                .iter()
                .any(|word| before.ends_with(word));
            if !definition {
                found.push(format!("{path}:{number}: {}", line.trim()));
            }
        }
    }
    found
}

#[test]
fn one_gpu_table() {
    // Only the catalogue builds a GpuSpec; everything else names a GPU.
    let literals = struct_literals("GpuSpec", "cost/src/gpu.rs");
    assert!(
        literals.is_empty(),
        "GpuSpec built outside the catalogue: {literals:#?}"
    );
    // No second set of device rates: the keys ExpertWeave had are gone from code and scenarios.
    let old_keys = [concat!("hbm", "_gbps"), concat!("peak", "_tflops")];
    let mut hits = Vec::new();
    for (path, text) in sources() {
        for key in old_keys {
            if text.contains(key) {
                hits.push(format!("{path}: {key}"));
            }
        }
    }
    let mut scenarios = Vec::new();
    files_under(&root().join("scenarios"), "toml", &mut scenarios);
    for path in scenarios {
        let text = std::fs::read_to_string(&path).unwrap();
        for key in old_keys {
            if text.contains(key) {
                hits.push(format!("{}: {key}", path.display()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "device rates outside the GPU catalogue: {hits:#?}"
    );
}

#[test]
fn one_model_shape_table() {
    for shape in ["DenseModelShape", "MoeModelShape", "MlaMoeShape"] {
        let literals = struct_literals(shape, "cost/src/shape/");
        assert!(
            literals.is_empty(),
            "{shape} built outside the shape catalogue: {literals:#?}"
        );
    }
}

/// Whether a code line writes the roofline formula itself: a `max` of a memory term (memory,
/// bandwidth, bytes) against a compute term (compute, FLOPs). Only `cost::kernel::combine`
/// (through `KernelRates::combine` and `Roofline::op`) may.
fn writes_the_roofline_formula(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.contains("max(")
        && ["memory", "bandwidth", "bytes"]
            .iter()
            .any(|w| lower.contains(w))
        && ["compute", "flops"].iter().any(|w| lower.contains(w))
}

/// The one place that combines a memory and a compute term.
const COMBINE_FILE: &str = "cost/src/kernel.rs";

#[test]
fn the_formula_check_sees_the_formula() {
    assert!(writes_the_roofline_formula(
        "let dense = (prefill / s.compute).max(decode / s.bandwidth);"
    ));
    assert!(writes_the_roofline_formula(
        "launch + (t.memory_ns / kv_split).max(t.compute_ns / tp)"
    ));
    assert!(writes_the_roofline_formula(
        "f64::max(bytes / bw, flops / peak)"
    ));
    assert!(!writes_the_roofline_formula("let rows = rows.max(1);"));
    assert!(!writes_the_roofline_formula(
        "nanos: self.rates.combine(memory_ns, compute_ns),"
    ));
}

#[test]
fn one_roofline() {
    // Datasheet peaks are turned into rates (and bytes / bandwidth, FLOPs / peak) only inside
    // the cost model; no family defines its own step formula; and the max (or any combine) of a
    // memory and a compute term is written once, in `cost::kernel::combine`.
    let mut hits = Vec::new();
    for (path, text) in sources() {
        let in_cost_model = path.starts_with("cost/src/");
        for (number, line) in code_lines(&text) {
            let peaks = line.contains(".peak_bandwidth()") || line.contains(".peak_flops()");
            let own_formula = line.contains(concat!("fn step", "_seconds"));
            let formula = path != COMBINE_FILE && writes_the_roofline_formula(line);
            if (peaks && !in_cost_model) || own_formula || formula {
                hits.push(format!("{path}:{number}: {}", line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "a roofline outside cost::roofline / cost::kernel::combine: {hits:#?}"
    );
}
