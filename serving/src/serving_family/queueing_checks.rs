//! Checks of the engine against queueing theory, on the serving simulator's `static` replica
//! (the CAPS preset's scheduler loop): with batches of one, a window of one and oldest-first
//! selection it is a single-server FCFS queue, so its mean waiting time must match the M/M/1
//! and M/D/1 closed forms (`replica.scheduler.pricing = "exponential"` / `"constant"`); and
//! Little's law must hold on a loaded batched run.

use crate::metrics::RunOutput;
use crate::policies::batch::BatchSelector;
use crate::serving_family::tests::{OldestFirst, run_selected, scenario, value};

fn run(text: &str, seed: u64) -> RunOutput {
    let scenario = scenario(text).unwrap_or_else(|e| panic!("{e:?}"));
    let mut selectors: Vec<Box<dyn BatchSelector>> = vec![Box::new(OldestFirst)];
    run_selected(&scenario, seed, &mut selectors)
}

/// A single-server FCFS queue: Poisson arrivals at `rate`, one request per batch, dispatched the
/// moment the server is free, each batch priced by the queueing reference `pricing`.
fn single_server(rate: f64, pricing: &str, service_ms: f64, n: u64) -> String {
    format!(
        r#"[model]
name = "qwen1.5-moe-a2.7b-nf4"
[replica]
gpu = "L4"
max_num_seqs = 1
scheduler = {{ kind = "static", window_size = 1, min_batch_trigger = 1, pricing = "{pricing}", service_ms = {service_ms} }}
[workload]
n_requests = {n}
prompt_tokens = {{ kind = "fixed", value = 16 }}
output_tokens = {{ kind = "fixed", value = 1 }}
[arrival]
pattern = "poisson"
rate_per_s = {rate}
"#
    )
}

#[test]
fn mm1_mean_wait_matches_closed_form() {
    // lambda = 50/s, mu = 100/s, rho = 0.5: Wq = rho / (mu - lambda) = 10 ms.
    let out = run(&single_server(50.0, "exponential", 10.0, 400_000), 11);
    let expected_ms = 0.5 / (100.0 - 50.0) * 1e3;
    let got = value(&out, "queueing_mean_ms");
    assert!(
        (got - expected_ms).abs() / expected_ms < 0.02,
        "M/M/1 Wq = {got:.4} ms, closed form {expected_ms} ms"
    );
    // Sojourn time W = 1 / (mu - lambda) = 20 ms.
    let sojourn = value(&out, "e2e_mean_ms");
    assert!((sojourn - 20.0).abs() / 20.0 < 0.02, "M/M/1 W = {sojourn}");
}

#[test]
fn md1_mean_wait_matches_closed_form() {
    // Pollaczek-Khinchine with deterministic service: Wq = rho / (2 mu (1 - rho)) = 5 ms.
    let out = run(&single_server(50.0, "constant", 10.0, 400_000), 12);
    let expected_ms = 0.5 / (2.0 * 100.0 * 0.5) * 1e3;
    let got = value(&out, "queueing_mean_ms");
    assert!(
        (got - expected_ms).abs() / expected_ms < 0.02,
        "M/D/1 Wq = {got:.4} ms, closed form {expected_ms} ms"
    );
    // Deterministic service: every sojourn is the wait plus exactly 10 ms.
    assert!((value(&out, "e2e_mean_ms") - got - 10.0).abs() < 1e-6);
}

#[test]
fn littles_law_holds_on_a_loaded_batched_run() {
    let text = r#"[model]
name = "qwen1.5-moe-a2.7b-nf4"
[replica]
gpu = "L4"
max_num_seqs = 8
scheduler = { kind = "static", loads = "experts", pricing = "cv" }
[experts]
routing = { kind = "affinity", concentration = 0.3, purity = 0.8 }
[workload]
n_requests = 3000
prompt_tokens = { kind = "log_normal", median = 128, sigma = 0.6, max = 2048 }
output_tokens = { kind = "log_normal", median = 16, sigma = 0.6, max = 256 }
[arrival]
pattern = "bursty"
rate_per_s = 150
"#;
    let out = run(text, 5);
    let n = value(&out, "completed");
    assert_eq!(n, 3000.0);
    // L_q = lambda W_q over the whole sample path: the time integral of the queue depth equals
    // the sum of the waits, so mean depth x makespan = n x mean wait (up to the histogram-free
    // exact sums both sides use).
    let depth = value(&out, "queue_depth_mean");
    let lhs = depth * value(&out, "makespan_s");
    let rhs = n * value(&out, "queueing_mean_ms") * 1e-3;
    assert!(
        (lhs - rhs).abs() / rhs < 1e-6,
        "L x T = {lhs}, n x Wq = {rhs}"
    );
    assert!(depth > 1.0, "the run is loaded: mean queue depth {depth}");
}
