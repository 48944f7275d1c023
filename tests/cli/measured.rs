//! Scenarios priced from measured GPU operations (`[...] measured = "vidur/a100"`): each family's
//! scenario runs end to end and its results name the set and what priced each operation, its
//! analytic twin names none, and a set that is missing, of another GPU or beside a second cost
//! source is refused with exit 2 naming the field.

use crate::common::{expertsim, stderr};
use serde_json::Value;

/// Runs `scenario` with `sets` overrides into a temporary folder and returns its first cell's
/// cost model and first run's details.
fn first_run(scenario: &str, sets: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args = vec![
        "run",
        scenario,
        "--no-figures",
        "--out",
        out.to_str().unwrap(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let output = expertsim(&args);
    assert!(output.status.success(), "{scenario}: {}", stderr(&output));
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    let results: Value = serde_json::from_str(&text).unwrap();
    let cell = &results["cells"][0];
    (
        cell["cost_model"].as_str().unwrap().to_string(),
        cell["runs"][0]["details"].clone(),
    )
}

/// The source the pricing record gives `operation`.
fn source_of<'a>(pricing: &'a Value, operation: &str) -> &'a str {
    pricing["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operation"] == operation)
        .unwrap_or_else(|| panic!("no {operation} in {pricing}"))["source"]
        .as_str()
        .unwrap()
}

#[test]
fn gem_and_caps_price_mixtral_experts_from_the_a100_staircase() {
    for (scenario, twin, sets, degree) in [
        (
            "scenarios/gem/measured-a100.toml",
            "scenarios/gem/measured-a100-analytic.toml",
            &["workload.n_requests=60", "experts.mapping.kind=gem"][..],
            4,
        ),
        (
            "scenarios/caps/measured-a100.toml",
            "scenarios/caps/measured-a100-analytic.toml",
            &[
                "workload.n_requests=60",
                "arrival.rate_per_s=40",
                "replica.batch_former.kind=fcfs",
            ][..],
            1,
        ),
    ] {
        let (cost_model, details) = first_run(scenario, sets);
        assert_eq!(cost_model, "measured-operations", "{scenario}");
        // The serving family (the CAPS preset) holds one record per replica group.
        let pricing = match &details["pricing"] {
            serde_json::Value::Array(groups) => &groups[0],
            record => record,
        };
        assert_eq!(pricing["measured"], "vidur/a100", "{scenario}");
        assert_eq!(pricing["gpu"], "A100-80GB");
        assert_eq!(pricing["tensor_parallel"], degree);
        let files: Vec<&str> = pricing["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(files.contains(&"profiles/vidur/a100/Meta-Llama-3-8B.json"));
        // Mixtral's expert and attention are Llama-3-8B's shapes: measured; the rest is not in
        // the data.
        for (operation, source) in [
            ("routed_experts", "measured"),
            ("attention_projections", "measured"),
            ("elementwise", "measured"),
            ("router", "analytic"),
            ("attention", "analytic"),
            ("head", "analytic"),
        ] {
            assert_eq!(source_of(pricing, operation), source, "{scenario}");
        }
        let (cost_model, details) = first_run(twin, sets);
        assert_eq!(cost_model, "analytic-roofline", "{twin}");
        // No record: none at all, or (the serving family) null for every replica group.
        let none = match details.get("pricing") {
            None => true,
            Some(serde_json::Value::Array(groups)) => groups.iter().all(|g| g.is_null()),
            Some(_) => false,
        };
        assert!(none, "{twin}");
    }
}

#[test]
fn chimera_prices_each_model_from_the_shapes_that_fit() {
    let sets = [
        "workload.horizon_s=20",
        "routing={ kind = \"least_loaded\" }",
    ];
    let (cost_model, details) = first_run("scenarios/chimera/measured-a100.toml", &sets);
    // The least measured group's source: no Chimera model's MLP is a measured shape.
    assert_eq!(cost_model, "scaled");
    // One record per replica group, in the order `replica.models` names them.
    let pricing = details["pricing"].as_array().unwrap();
    assert_eq!(pricing.len(), 3);
    for group in pricing {
        assert_eq!(group["measured"], "vidur/a100");
        assert_eq!(group["gpu"], "A100-80GB");
    }
    // Ministral-3-8B's layer is Llama-3-8B's (hidden 4096, 32 heads of which 8 KV, MLP 14336):
    // every GEMM of it is a measured shape.
    let ministral = &pricing[1];
    assert_eq!(source_of(ministral, "attention_projections"), "measured");
    assert_eq!(source_of(ministral, "elementwise"), "measured");
    assert_eq!(source_of(ministral, "mlp"), "measured");
    // Llama-3.2-3B (hidden 3072) and Qwen2.5-7B (hidden 3584) fit no measured shape.
    for (group, model) in [(0, "llama-3.2-3b"), (2, "qwen2.5-7b")] {
        for operation in ["mlp", "attention_projections", "elementwise"] {
            assert_eq!(source_of(&pricing[group], operation), "scaled", "{model}");
        }
        assert_eq!(
            source_of(&pricing[group], "attention"),
            "analytic",
            "{model}"
        );
    }
    let (cost_model, details) = first_run("scenarios/chimera/measured-a100-analytic.toml", &sets);
    assert_eq!(cost_model, "analytic-roofline");
    let groups = details["pricing"].as_array().unwrap();
    assert!(groups.iter().all(|g| g.is_null()), "{groups:?}");
}

#[test]
fn mosaic_prices_each_expert_and_the_aggregator_from_the_shapes_that_fit() {
    let sets = ["placement.policy.kind=round_robin"];
    let (cost_model, details) = first_run("scenarios/mosaic/measured-a100.toml", &sets);
    // The least measured group's source: QwenR1's and Gemma's shapes fit no measured one.
    assert_eq!(cost_model, "scaled");
    // One record per replica group, in file order: LlamaR1, QwenR1, Gemma, Exaone, aggregator.
    let pricing = details["pricing"].as_array().unwrap();
    assert_eq!(pricing.len(), 5);
    for group in pricing {
        assert_eq!(group["measured"], "vidur/a100");
        assert_eq!(group["gpu"], "A100-80GB");
    }
    // LlamaR1 and Exaone have Meta-Llama-3-8B's layer: every class is measured.
    for (group, expert) in [(0, "LlamaR1"), (3, "Exaone")] {
        for operation in ["mlp", "attention_projections", "elementwise"] {
            assert_eq!(
                source_of(&pricing[group], operation),
                "measured",
                "{expert}"
            );
        }
        assert_eq!(pricing[group]["tensor_parallel"], 1);
    }
    // Qwen2.5-7B's shape (QwenR1) and Gemma-2-9B's (hidden 3584) fit no measured shape.
    for (group, expert) in [(1, "QwenR1"), (2, "Gemma")] {
        for operation in ["mlp", "attention_projections", "elementwise"] {
            assert_eq!(source_of(&pricing[group], operation), "scaled", "{expert}");
        }
        assert_eq!(source_of(&pricing[group], "attention"), "analytic");
        assert_eq!(source_of(&pricing[group], "head"), "analytic");
    }
    // The aggregator is tensor-parallel over the 4 workers: TP-4 rows, measured all-reduces.
    let aggregator = &pricing[4];
    assert_eq!(aggregator["tensor_parallel"], 4);
    assert_eq!(source_of(aggregator, "all_reduce"), "measured");
    assert_eq!(source_of(aggregator, "mlp"), "scaled");
    let (cost_model, details) = first_run("scenarios/mosaic/measured-a100-analytic.toml", &sets);
    assert_eq!(cost_model, "analytic-roofline");
    let groups = details["pricing"].as_array().unwrap();
    assert!(groups.iter().all(|g| g.is_null()), "{groups:?}");
}

#[test]
fn a_bad_measured_set_is_refused_naming_the_field() {
    for (scenario, set, needles) in [
        (
            "scenarios/gem/measured-a100.toml",
            "replica.measured=vidur/b200",
            &[
                "field `replica.measured`",
                "no measured profile set `vidur/b200`",
            ][..],
        ),
        (
            "scenarios/caps/measured-a100.toml",
            "replica.measured=vidur/b200",
            &["field `replica.measured`", "no measured profile set"][..],
        ),
        (
            "scenarios/chimera/measured-a100.toml",
            "replica.measured=vidur/b200",
            &["field `replica.measured`", "no measured profile set"][..],
        ),
        (
            "scenarios/chimera/measured-a100.toml",
            "replica.measured=../vidur",
            &["field `replica.measured`", "not a measured set's name"][..],
        ),
        (
            "scenarios/gem/measured-a100.toml",
            "replica.gpu=H100-SXM",
            &[
                "measured-a100.toml:23:1: field `replica.measured`",
                "measured on A100-80GB, but replica.gpu is H100-SXM",
            ][..],
        ),
        (
            "scenarios/gem/measured-a100.toml",
            "replica.scheduler.profile=profile.json",
            &["field `replica.measured`", "second cost source"][..],
        ),
        (
            "scenarios/caps/measured-a100.toml",
            "replica.scheduler.profile=l4_qwen1.5-moe-a2.7b",
            &["field `replica.measured`", "second cost source"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let output = expertsim(&[
            "run",
            scenario,
            "--set",
            set,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{scenario} {set}");
        let err = stderr(&output);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("error: {scenario}")), "{err}");
        for needle in needles {
            assert!(err.contains(needle), "expected {needle:?} in: {err}");
        }
        assert!(!out.exists(), "nothing written for {scenario} {set}");
    }
}
