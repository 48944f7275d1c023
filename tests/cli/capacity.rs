//! `expertsim capacity`: the bisection finds the rate an M/D/1 queue's closed form gives, stops
//! within its tolerance, writes the same bytes twice, and refuses what it cannot search.

use super::common::{expertsim, stderr};

/// An M/D/1 queue: one request per batch, every batch 10 ms, Poisson arrivals.
const MD1: &str = r#"
name = "md1-capacity"
description = "M/D/1 reference for the capacity search"
family = "serving"
seeds = [1, 2, 3]

[model]
name = "qwen1.5-moe-a2.7b-nf4"

[replica]
gpu = "L4"
max_num_seqs = 1
scheduler = { kind = "static", window_size = 1, min_batch_trigger = 1, pricing = "constant", service_ms = 10 }

[workload]
n_requests = 20000
prompt_tokens = { kind = "fixed", value = 16 }
output_tokens = { kind = "fixed", value = 1 }

[arrival]
pattern = "poisson"
rate_per_s = 10
"#;

fn search(dir: &std::path::Path, slo: &str, out: &str) -> (serde_json::Value, Vec<u8>) {
    let scenario = dir.join("md1.toml");
    std::fs::write(&scenario, MD1).unwrap();
    let out = dir.join(out);
    let output = expertsim(&[
        "capacity",
        scenario.to_str().unwrap(),
        "--slo",
        slo,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let bytes = std::fs::read(out.join("capacity.json")).unwrap();
    (serde_json::from_slice(&bytes).unwrap(), bytes)
}

/// Mean sojourn of M/D/1 with service S at load rho: W = S + rho S / (2 (1 - rho)). For
/// W <= 20 ms with S = 10 ms: rho = 2x / (S + 2x) with x = W - S = 10 ms, rho = 2/3, so the
/// capacity is 66.7 req/s. The search must land within its 2% tolerance plus the sampling
/// error of 3 x 20,000 requests near saturation (5% all told).
#[test]
fn capacity_of_an_md1_queue_matches_its_closed_form() {
    let dir = tempfile::tempdir().unwrap();
    let (report, bytes) = search(dir.path(), "e2e_mean_ms=20", "a");
    let cell = &report["cells"][0];
    let capacity = cell["capacity"].as_f64().unwrap();
    let missed = cell["missed_at"].as_f64().unwrap();
    assert!(
        (capacity - 200.0 / 3.0).abs() < 0.05 * 200.0 / 3.0,
        "{capacity}"
    );
    // The bracket is within the tolerance, and its ends were evaluated as met and missed.
    assert!(
        missed > capacity && missed - capacity <= 0.02 * missed,
        "{cell}"
    );
    let evaluations = cell["evaluations"].as_array().unwrap();
    let at = |rate: f64| {
        evaluations
            .iter()
            .find(|e| e["rate"].as_f64() == Some(rate))
            .unwrap()
    };
    assert_eq!(at(capacity)["met"], true);
    assert_eq!(at(missed)["met"], false);
    // A looser SLO admits a higher rate; the same search writes the same bytes.
    let (looser, _) = search(dir.path(), "e2e_mean_ms=40", "b");
    assert!(looser["cells"][0]["capacity"].as_f64().unwrap() > capacity);
    let (_, again) = search(dir.path(), "e2e_mean_ms=20", "c");
    assert_eq!(bytes, again);
}

#[test]
fn capacity_refuses_what_it_cannot_search() {
    let output = expertsim(&[
        "capacity",
        "scenarios/mosaic/quick.toml",
        "--slo",
        "e2e_mean_ms=1",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no arrival.rate_per_s to start from"),
        "{}",
        stderr(&output)
    );
    let output = expertsim(&[
        "capacity",
        "scenarios/caps/quick.toml",
        "--slo",
        "e2e_p99_ms=100",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("is swept"), "{}", stderr(&output));
    let output = expertsim(&["capacity", "scenarios/chimera/quick.toml", "--slo", "p99=3"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("\"p99\" is not a serving metric")
            && err.contains("workflow_latency_per_token_ms"),
        "{err}"
    );
}
