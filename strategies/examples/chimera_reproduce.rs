//! Reproduces the Chimera paper's headline comparisons with the simulator: the single-model
//! queueing study (FCFS vs SJF vs STJF, Figure 3), the main grid (vLLM, MLFQ, LTR, vLLM(STJF) and
//! Chimera at several slacks on four model combinations, APPS and MATH, RPS 8/12/16, Figure 5) and
//! the router / oracle ablations (Figures 6, 7). Prints markdown tables; every number is computed.
//!
//! Run: `cargo run --release -p expertsim-strategies --example chimera_reproduce [duration_s] [seed]`

use sim::chimera::config::{ClusterFile, WorkloadFile};
use sim::chimera::workload::{Dataset, PredictorConfig, SemanticRouterConfig};
use sim::chimera::{ChimeraConfig, ChimeraMetrics, QueuePolicyConfig, RouterConfig, run::simulate};
use std::path::Path;

const COMBOS: &[(&str, &[&str])] = &[
    ("Qwen1.5B+7B", &["qwen2.5-1.5b", "qwen2.5-7b"]),
    ("Qwen1.5B+14B", &["qwen2.5-1.5b", "qwen2.5-14b"]),
    ("Llama3B+Ministral8B", &["llama3.2-3b", "ministral-8b"]),
    (
        "Qwen1.5B+3B+14B",
        &["qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-14b"],
    ),
];
const RPS: &[f64] = &[8.0, 12.0, 16.0];
const SLACKS: &[f64] = &[0.0, 0.25, 0.5, 1.0, 2.0];

struct System {
    name: String,
    queue: QueuePolicyConfig,
    routing: RouterConfig,
    predictor: PredictorConfig,
    router: SemanticRouterConfig,
}

fn system(
    name: &str,
    queue: QueuePolicyConfig,
    routing: RouterConfig,
    predictor: PredictorConfig,
    router: SemanticRouterConfig,
) -> System {
    System {
        name: name.into(),
        queue,
        routing,
        predictor,
        router,
    }
}

/// The scenario defaults (`chimera::config::default_predictor` / `default_semantic_router`).
fn noisy_predictor() -> PredictorConfig {
    sim::chimera::config::default_predictor()
}
fn noisy_router() -> SemanticRouterConfig {
    sim::chimera::config::default_semantic_router()
}
fn least_loaded() -> RouterConfig {
    RouterConfig::LeastLoaded {
        waiting_weight: 4.0,
        running_weight: 1.0,
    }
}
fn stjf() -> QueuePolicyConfig {
    QueuePolicyConfig::Stjf {
        starvation_threshold: sim::chimera::policy::default_starvation_threshold(),
        quantum: sim::chimera::policy::default_quantum(),
    }
}

fn baselines() -> Vec<System> {
    vec![
        system(
            "vLLM",
            QueuePolicyConfig::Fcfs,
            least_loaded(),
            noisy_predictor(),
            noisy_router(),
        ),
        system(
            "MLFQ",
            QueuePolicyConfig::Mlfq {
                levels: 4,
                base_quantum_tokens: 256,
            },
            least_loaded(),
            noisy_predictor(),
            noisy_router(),
        ),
        system(
            "LTR",
            QueuePolicyConfig::Ltr { noise: 0.5 },
            least_loaded(),
            noisy_predictor(),
            noisy_router(),
        ),
        system(
            "vLLM(STJF)",
            QueuePolicyConfig::Stjf {
                starvation_threshold: 0,
                quantum: 64,
            },
            least_loaded(),
            PredictorConfig::Oracle,
            noisy_router(),
        ),
    ]
}

fn chimera(
    name: &str,
    slack: f64,
    predictor: PredictorConfig,
    router: SemanticRouterConfig,
) -> System {
    system(
        &format!("{name} s={slack}"),
        stjf(),
        RouterConfig::Chimera {
            slack,
            margin: 0.05,
        },
        predictor,
        router,
    )
}

fn run(
    models: &[&str],
    dataset: Dataset,
    rps: f64,
    duration: f64,
    seed: u64,
    s: &System,
) -> ChimeraMetrics {
    let config = ChimeraConfig {
        cluster: ClusterFile {
            gpu: "RTX-A6000".into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            max_batch_size: 256,
            gpu_memory_utilization: 0.9,
            step_overhead_ms: sim::chimera::models::DEFAULT_STEP_OVERHEAD_MS,
        },
        workload: WorkloadFile {
            dataset,
            rps,
            duration_s: duration,
        },
        predictor: s.predictor.clone(),
        semantic_router: s.router.clone(),
        queue: s.queue.clone(),
        routing: s.routing.clone(),
    };
    let scenario = config
        .validate(Path::new("."))
        .expect("example scenario is valid");
    let mut queue = strategies::queue::build(&scenario.queue);
    let mut router = strategies::routing::build(&scenario.routing);
    simulate(&scenario, seed, queue.as_mut(), router.as_mut())
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let duration: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(600.0);
    let seed: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    println!("Chimera reproduction: {duration} s of arrivals per run, seed {seed}\n");

    // Figure 3: one engine, FCFS vs SJF vs STJF (no aging, and with the default aging).
    println!("## Queueing study (one engine per model): mean queueing time per workflow, ms\n");
    println!(
        "| dataset | model | RPS | FCFS | SJF | STJF | STJF aged | SJF vs FCFS | STJF vs SJF | per-request FCFS / SJF / STJF |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for dataset in [Dataset::Apps, Dataset::Math] {
        for (model, rps) in [
            ("qwen2.5-1.5b", 16.0),
            ("qwen2.5-1.5b", 24.0),
            ("qwen2.5-3b", 8.0),
            ("qwen2.5-3b", 12.0),
            ("qwen2.5-7b", 4.0),
            ("qwen2.5-7b", 6.0),
            ("qwen2.5-14b", 1.0),
            ("qwen2.5-14b", 2.0),
        ] {
            let queues = [
                QueuePolicyConfig::Fcfs,
                QueuePolicyConfig::Sjf,
                QueuePolicyConfig::Stjf {
                    starvation_threshold: 0,
                    quantum: 64,
                },
                stjf(),
            ];
            let m: Vec<ChimeraMetrics> = queues
                .into_iter()
                .map(|queue| {
                    let s = system(
                        queue.kind(),
                        queue,
                        RouterConfig::RoundRobin,
                        noisy_predictor(),
                        noisy_router(),
                    );
                    run(&[model], dataset, rps, duration, seed, &s)
                })
                .collect();
            let w: Vec<f64> = m.iter().map(|m| m.workflow_queue_time.mean_ms).collect();
            println!(
                "| {dataset:?} | {model} | {rps} | {:.0} | {:.0} | {:.0} | {:.0} | {:+.0}% | {:+.0}% | {:.0} / {:.0} / {:.0} |",
                w[0],
                w[1],
                w[2],
                w[3],
                100.0 * (w[1] / w[0] - 1.0),
                100.0 * (w[2] / w[1] - 1.0),
                m[0].queue_time.mean_ms,
                m[1].queue_time.mean_ms,
                m[2].queue_time.mean_ms,
            );
        }
    }

    // Figure 5: the main grid.
    let mut systems = baselines();
    for &slack in SLACKS {
        systems.push(chimera("Chimera", slack, noisy_predictor(), noisy_router()));
    }
    for &slack in &[0.0, 0.5, 2.0] {
        systems.push(chimera(
            "Chimera-no-router",
            slack,
            noisy_predictor(),
            SemanticRouterConfig::Static,
        ));
        systems.push(chimera(
            "Chimera-oracle-predictor",
            slack,
            PredictorConfig::Oracle,
            noisy_router(),
        ));
        systems.push(chimera(
            "Chimera-oracle-router",
            slack,
            noisy_predictor(),
            SemanticRouterConfig::Oracle,
        ));
    }
    for dataset in [Dataset::Apps, Dataset::Math] {
        for (combo, models) in COMBOS {
            println!("\n## {dataset:?} {combo}: latency per token (ms/token) / score (%)\n");
            println!(
                "| system | RPS 8 | RPS 12 | RPS 16 | mean ms/token | mean score | Kendall | mAP |"
            );
            println!("|---|---|---|---|---|---|---|---|");
            let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = vec![];
            for s in &systems {
                let metrics: Vec<ChimeraMetrics> = RPS
                    .iter()
                    .map(|&rps| run(models, dataset, rps, duration, seed, s))
                    .collect();
                let lat: Vec<f64> = metrics.iter().map(|m| m.latency_per_token_ms).collect();
                let score: Vec<f64> = metrics.iter().map(|m| m.score_pct).collect();
                println!(
                    "| {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} | {:.3} | {:.3} |",
                    s.name,
                    lat[0],
                    score[0],
                    lat[1],
                    score[1],
                    lat[2],
                    score[2],
                    mean(&lat),
                    mean(&score),
                    mean(
                        &metrics
                            .iter()
                            .map(|m| m.predictor_kendall_distance)
                            .collect::<Vec<_>>()
                    ),
                    mean(&metrics.iter().map(|m| m.router_map).collect::<Vec<_>>()),
                );
                rows.push((s.name.clone(), lat, score));
            }
            // Speedup (mean over RPS of the per-RPS latency ratio) and score gain of Chimera
            // at each slack over each baseline.
            println!(
                "\n| Chimera vs | {} |",
                SLACKS
                    .iter()
                    .map(|s| format!("s={s}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            println!("|---|{}", "---|".repeat(SLACKS.len()));
            for base in ["vLLM", "MLFQ", "LTR", "vLLM(STJF)"] {
                let b = rows.iter().find(|r| r.0 == base).expect("baseline row");
                let cells: Vec<String> = SLACKS
                    .iter()
                    .map(|slack| {
                        let c = rows
                            .iter()
                            .find(|r| r.0 == format!("Chimera s={slack}"))
                            .expect("chimera row");
                        let speedup =
                            mean(&b.1.iter().zip(&c.1).map(|(x, y)| x / y).collect::<Vec<_>>());
                        let gain = mean(&c.2) - mean(&b.2);
                        format!("{speedup:.2}x, {gain:+.1} pt")
                    })
                    .collect();
                println!("| {base} | {} |", cells.join(" | "));
            }
        }
    }
}
