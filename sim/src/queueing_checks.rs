//! Checks of the engine against queueing theory: with batch size 1 and FCFS order the CAPS server
//! is a single-server queue, so its mean waiting time must match the M/M/1 and M/D/1 closed
//! forms; and Little's law must hold on a loaded batched run.

use crate::caps::metrics::RunMetrics;
use crate::caps::run::simulate;
use crate::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use crate::records::DiscardRecords;
use crate::rng::SimRng;
use crate::scenario::load_str;
use std::path::Path;

/// Oldest-first selection, so this module needs nothing from the strategies crate.
struct OldestFirst;
impl BatchSelector for OldestFirst {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _: &mut SimRng,
    ) {
        for idx in 0..window.len() {
            if selection.is_full() {
                break;
            }
            if !selection.is_chosen(idx) {
                selection.add(window, idx);
            }
        }
    }
}

fn run(text: &str, seed: u64) -> RunMetrics {
    let plan = load_str(Path::new("queueing.toml"), text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let Some(scenario) = plan.cells[0].scenario.get::<crate::caps::CapsScenario>() else {
        panic!("the queueing checks are CAPS scenarios")
    };
    simulate(scenario, seed, &mut OldestFirst, &mut DiscardRecords).0
}

/// A single-server FCFS queue: Poisson arrivals at `rate`, one request per batch, dispatched the
/// moment the server is free.
fn single_server(rate: f64, service_model: &str, service_ms: f64, n: u64) -> String {
    format!(
        r#"name = "single-server"
family = "caps"
[model]
n_layers = 1
n_experts = 4
top_k = 1
[workload]
n_requests = {n}
[arrival]
pattern = "poisson"
rate_per_s = {rate}
[scheduler]
max_batch_size = 1
window_size = 1
min_batch_trigger = 1
[execution]
model = "{service_model}"
service_ms = {service_ms}
[metrics]
queue_sample_interval_ms = 0
"#
    )
}

#[test]
fn mm1_mean_wait_matches_closed_form() {
    // lambda = 50/s, mu = 100/s, rho = 0.5: Wq = rho / (mu - lambda) = 10 ms.
    let metrics = run(&single_server(50.0, "exponential", 10.0, 400_000), 11);
    let expected_ms = 0.5 / (100.0 - 50.0) * 1e3;
    let got = metrics.queue_wait.mean_ms;
    assert!(
        (got - expected_ms).abs() / expected_ms < 0.02,
        "M/M/1 Wq = {got:.4} ms, closed form {expected_ms} ms"
    );
    // Sojourn time W = 1 / (mu - lambda) = 20 ms.
    assert!(
        (metrics.latency.mean_ms - 20.0).abs() / 20.0 < 0.02,
        "M/M/1 W = {}",
        metrics.latency.mean_ms
    );
}

#[test]
fn md1_mean_wait_matches_closed_form() {
    // Pollaczek-Khinchine with deterministic service: Wq = rho / (2 mu (1 - rho)) = 5 ms.
    let metrics = run(&single_server(50.0, "constant", 10.0, 400_000), 12);
    let expected_ms = 0.5 / (2.0 * 100.0 * 0.5) * 1e3;
    let got = metrics.queue_wait.mean_ms;
    assert!(
        (got - expected_ms).abs() / expected_ms < 0.02,
        "M/D/1 Wq = {got:.4} ms, closed form {expected_ms} ms"
    );
    // Deterministic service: every sojourn is the wait plus exactly 10 ms.
    assert!((metrics.latency.mean_ms - got - 10.0).abs() < 1e-6);
}

#[test]
fn littles_law_holds_on_a_loaded_batched_run() {
    let text = r#"name = "little"
family = "caps"
[workload]
n_requests = 3000
[arrival]
pattern = "bursty"
rate_per_s = 150
[execution]
model = "cv"
gpu = "L4"
[metrics]
queue_sample_interval_ms = 0
"#;
    let m = run(text, 5);
    assert_eq!(m.n_requests, 3000);
    // L_q = lambda W_q over the whole sample path: the time integral of the queue depth equals the
    // sum of the waits, so mean depth x makespan = n x mean wait (up to the histogram-free exact
    // sums both sides use).
    let lhs = m.queue_depth_mean * m.makespan_s;
    let rhs = m.n_requests as f64 * m.queue_wait.mean_ms * 1e-3;
    assert!(
        (lhs - rhs).abs() / rhs < 1e-6,
        "L x T = {lhs}, n x Wq = {rhs}"
    );
    assert!(
        m.queue_depth_mean > 1.0,
        "the run is loaded: mean queue depth {}",
        m.queue_depth_mean
    );
}
