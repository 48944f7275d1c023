//! Grep-level checks that the engine is one: every family folder holds an engine `Model` and runs
//! it through `engine::run`, no source keeps an event queue of its own beside the engine's, and no
//! model's event handler has an arm for an event it never schedules (`unreachable!`, `panic!`).
//! A reviewer runs them with `cargo test -p expertsim-scenario --lib one_engine_checks`.

use std::path::{Path, PathBuf};

/// The family folders, each a module of `expertsim-serving` (`FamilyId::module`:
/// `serving_family` for `serving`), as prefixes of the paths `sources` gives.
fn family_dirs() -> Vec<String> {
    crate::registry::families()
        .map(|f| format!("serving/src/{}/", f.module()))
        .collect()
}

/// Folders of the workspace whose Rust sources are read.
const SOURCE_DIRS: &[&str] = &[
    "core/src",
    "cost/src",
    "serving/src",
    "scenario/src",
    "live/src",
    "strategies/src",
    "src",
];

/// This file, which names what it looks for.
const THIS_FILE: &str = "scenario/src/one_engine_checks.rs";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.rs` files under `dir`, recursively, in sorted order.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// (path relative to the root, code with `//` comments removed) of every source but this file.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        rust_files(&root.join(dir), &mut files);
    }
    let sources: Vec<(String, String)> = files
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let code: String = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|line| format!("{}\n", line.split("//").next().unwrap_or("")))
                .collect();
            (relative, code)
        })
        .filter(|(relative, _)| relative != THIS_FILE)
        .collect();
    assert!(sources.len() > 100, "found only {} sources", sources.len());
    sources
}

/// The body of the block that opens at the first `{` at or after `from` (braces balanced).
pub(crate) fn block_at(code: &str, from: usize) -> &str {
    let open = from + code[from..].find('{').expect("a block follows");
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open..open + i + 1];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces after byte {from}");
}

/// The `impl ... Model for ...` blocks of `code`.
fn model_impls(code: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("impl") {
        let start = at + found;
        let header_end = start + code[start..].find('{').unwrap_or(code.len() - start);
        let header = &code[start..header_end];
        let is_model = header.contains(" Model for ") || header.contains("::Model for ");
        if is_model {
            blocks.push(block_at(code, start));
        }
        at = start + 4;
    }
    blocks
}

/// Whether `code` calls `engine::run`, by path or imported (`use crate::engine::{run, ..}`).
fn calls_engine_run(code: &str) -> bool {
    let imported = code.lines().any(|line| {
        line.trim_start().starts_with("use crate::engine::")
            && line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == "run")
    });
    code.contains("engine::run(") || (imported && code.contains(" run(&mut"))
}

#[test]
fn every_family_runs_an_engine_model_through_engine_run() {
    let sources = sources();
    for prefix in family_dirs() {
        let in_family: Vec<&(String, String)> = sources
            .iter()
            .filter(|(p, _)| p.starts_with(&prefix))
            .collect();
        assert!(!in_family.is_empty(), "no sources under {prefix}");
        assert!(
            in_family
                .iter()
                .any(|(_, code)| !model_impls(code).is_empty()),
            "{prefix} has no `impl Model for`: its run does not go through the engine"
        );
        assert!(
            in_family.iter().any(|(_, code)| calls_engine_run(code)),
            "{prefix} never calls engine::run"
        );
    }
}

#[test]
fn no_event_queue_beside_the_engines() {
    let mut offenders = Vec::new();
    for (path, code) in sources() {
        if path == "core/src/event_queue.rs" || path == "core/src/engine.rs" {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            if line.contains("BinaryHeap") || line.contains("EventQueue::new(") {
                offenders.push(format!("{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a second event queue:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn no_model_handles_an_event_it_never_schedules() {
    let mut offenders = Vec::new();
    let mut handlers = 0;
    for (path, code) in sources() {
        for block in model_impls(&code) {
            let Some(at) = block.find("fn handle") else {
                continue;
            };
            handlers += 1;
            let body = block_at(block, at);
            for word in ["unreachable!", "panic!", "todo!", "unimplemented!"] {
                if body.contains(word) {
                    offenders.push(format!("{path}: a `handle` arm calls {word}"));
                }
            }
        }
    }
    assert!(handlers >= family_dirs().len(), "found {handlers} handlers");
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn no_family_computes_its_own_request_percentiles() {
    // The replica records every request (`serving::ReplicaStats::latencies`); a family reads
    // percentiles off the recorder's summary, or off the recorder's own histograms
    // (`latencies.<ttft|tpot|itl|e2e|queueing>.quantile_ms`, and a workflow workload's
    // `workflows.<e2e|queueing>.quantile_ms`, `recorder::WorkflowSummary`), and keeps no
    // histogram of its own.
    let mut offenders = Vec::new();
    let families = family_dirs();
    for (path, code) in sources() {
        if !families.iter().any(|prefix| path.starts_with(prefix)) {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            let own_histogram = line.contains("LatencyRecorder");
            let raw_quantile = ["value_at_quantile", "Histogram<", "percentile("]
                .iter()
                .any(|word| line.contains(word));
            let off_recorder = line.match_indices("quantile_ms(").any(|(at, _)| {
                !["ttft", "tpot", "itl", "e2e", "queueing"]
                    .iter()
                    .any(|h| line[..at].ends_with(&format!("latencies.{h}.")))
                    && !["e2e", "queueing"]
                        .iter()
                        .any(|h| line[..at].ends_with(&format!("workflows.{h}.")))
            });
            if own_histogram || raw_quantile || off_recorder {
                offenders.push(format!("{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a family computes request percentiles itself instead of reading the recorder:\n{}",
        offenders.join("\n")
    );
}
