//! What a sweep key means on an axis or over a legend: a label with its unit for every key the
//! shipped scenarios plot, so that no figure shows a raw key like `rate_per_s`. A key not in the
//! table falls back to its last meaningful part (`x_label` in a `[[figure]]` overrides either).

/// `(key, label)`: the label says what the value is and, for quantities, its unit.
const KEY_LABELS: &[(&str, &str)] = &[
    ("arrival.rate_per_s", "arrival rate (requests/s)"),
    ("arrival.pattern", "arrival pattern"),
    ("scheduler.selector.kind", "batch selector"),
    ("scheduler.max_batch_size", "batch size (requests)"),
    ("scheduler.window_size", "candidate window (requests)"),
    ("model.name", "model"),
    ("model.preset", "model"),
    ("cluster.variability", "GPU variability"),
    ("cluster.n_gpus", "GPUs"),
    ("cluster.models", "models served"),
    ("replica.models", "models served"),
    ("mapper.kind", "expert mapping"),
    ("mapper.window", "mapping window (steps)"),
    ("experts.mapping.kind", "expert mapping"),
    ("experts.mapping.window", "mapping window (steps)"),
    ("replica.variability.setup", "GPU variability"),
    ("experiment.gpus", "GPUs"),
    ("replica.batch_former.kind", "batch selector"),
    ("replica.speed_factors", "GPU speed factors"),
    ("workload.rps", "workflow arrival rate (workflows/s)"),
    ("workload.dataset", "dataset"),
    ("workload.workflow.dataset", "dataset"),
    (
        "adapters.alpha",
        "adapter popularity shape (power-law alpha)",
    ),
    ("placement.policy.kind", "placement"),
    ("workload.questions.dataset", "benchmark"),
    ("workload.questions.gate.tau", "gate threshold (tau)"),
    ("queue", "queue policy"),
    ("queue.kind", "queue policy"),
    ("replica.queue", "queue policy"),
    ("replica.queue.kind", "queue policy"),
    ("routing", "router"),
    ("routing.kind", "router"),
    ("replica.scheduler", "scheduler"),
    ("replica.scheduler.preemption", "preemption"),
    ("routing.slack", "router slack"),
    ("adapters.memory", "adapter memory manager"),
    ("adapters.memory.kind", "adapter memory manager"),
    ("adapters.count", "adapters served"),
    ("workload.prompt_tokens.value", "prompt length (tokens)"),
    ("workload.n_requests", "requests (offline: the batch size)"),
    ("adapters.rerouting", "batched rerouting"),
    ("predictor.kind", "length predictor"),
    ("semantic_router.kind", "semantic router"),
    ("routing.semantic_router", "semantic router"),
    ("routing.semantic_router.kind", "semantic router"),
];

/// The label of `key`: from the table, else its last meaningful part.
pub(crate) fn key_label(key: &str) -> String {
    KEY_LABELS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, label)| label.to_string())
        .unwrap_or_else(|| super::short_key(key).replace('_', " "))
}

/// A metric's label without its trailing unit: "P99 latency (ms)" -> "P99 latency".
pub(crate) fn without_unit(label: &str) -> &str {
    match label.rfind(" (") {
        Some(i) if label.ends_with(')') => &label[..i],
        _ => label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plotted_key_of_the_shipped_scenarios_has_a_label() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        for family in std::fs::read_dir(&root).unwrap() {
            let dir = family.unwrap().path();
            if !dir.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&dir).unwrap() {
                let path = file.unwrap().path();
                if path.extension().is_none_or(|e| e != "toml") {
                    continue;
                }
                let doc: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
                let Some(figures) = doc.get("figure").and_then(|f| f.as_array()) else {
                    continue;
                };
                for figure in figures {
                    let mut keys: Vec<&str> = Vec::new();
                    for field in ["x", "panels", "series", "points"] {
                        match figure.get(field) {
                            Some(toml::Value::String(k)) => keys.push(k),
                            Some(toml::Value::Array(ks)) => {
                                keys.extend(ks.iter().filter_map(|k| k.as_str()))
                            }
                            _ => {}
                        }
                    }
                    for key in keys {
                        assert!(
                            KEY_LABELS.iter().any(|(k, _)| *k == key),
                            "{}: no label for `{key}` in src/plots/labels.rs",
                            path.display()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn units_are_stripped_for_titles() {
        assert_eq!(without_unit("P99 latency (ms)"), "P99 latency");
        assert_eq!(without_unit("throughput"), "throughput");
        assert_eq!(key_label("arrival.rate_per_s"), "arrival rate (requests/s)");
        assert_eq!(key_label("foo.some_key"), "some key");
    }
}
