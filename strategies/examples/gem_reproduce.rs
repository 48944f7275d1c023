//! Reproduces the GEM paper's headline experiments with the simulator's library calls and
//! prints the tables quoted in docs/reproduction-gem.md:
//! `cargo run --release -p expertsim-strategies --example gem_reproduce [-- quick | full]`.

use serde_json::json;
use sim::gem::config::GemConfig;
use sim::gem::variability::{ThroughputDistribution, moderate_factors, variability_at_scale};
use sim::gem::{Deployment, GemScenario, simulate};
use sim::rng::stream;
use std::path::Path;
use std::time::Instant;

const MODELS: &[&str] = &[
    "mixtral-8x7b",
    "mixtral-8x22b",
    "llama-4-scout",
    "hunyuan-a13b",
    "qwen3-30b-a3b",
];
const SETUPS: &[&str] = &["high", "moderate", "low"];

fn scenario(config: serde_json::Value) -> GemScenario {
    serde_json::from_value::<GemConfig>(config)
        .expect("scenario parses")
        .validate(Path::new("."))
        .expect("scenario validates")
}

fn run(s: &GemScenario, seeds: &[u64]) -> (f64, f64) {
    let mut mapper = strategies::mapping::build(&s.mapper);
    let mut e2e = 0.0;
    let mut p90 = 0.0;
    for &seed in seeds {
        let out = simulate(s, seed, mapper.as_mut());
        e2e += out.scalar("e2e_mean_ms").unwrap();
        p90 += out.scalar("tpot_p90_ms").unwrap();
    }
    (e2e / seeds.len() as f64, p90 / seeds.len() as f64)
}

fn reduction(base: f64, x: f64) -> f64 {
    100.0 * (base - x) / base
}

fn main() {
    // `quick`: 500 requests, one seed; `full`: the paper's 4K requests, three seeds; default:
    // 1000 requests and two seeds, as scenarios/gem/evaluation-*.toml.
    let args: Vec<String> = std::env::args().collect();
    let (n_requests, seeds): (usize, &[u64]) = if args.iter().any(|a| a == "quick") {
        (500, &[1])
    } else if args.iter().any(|a| a == "full") {
        (4000, &[1, 2, 3])
    } else {
        (1000, &[1, 2])
    };

    println!("== Variability at scale (section 6, 10,000 draws) ==");
    let d = ThroughputDistribution::default();
    let (above, below) = d.sigmas();
    println!("split-normal sigmas: above {above:.4}, below {below:.4}");
    for p in variability_at_scale(&d, &[4, 8, 16, 32, 64], 10_000, &mut stream(1, "gem/scale")) {
        println!(
            "N = {:>2}: gap vs fastest {:5.1} %, fastest over slowest {:5.1} %",
            p.n_gpus,
            100.0 * p.gap_vs_fastest,
            100.0 * p.gap_vs_slowest
        );
    }
    let moderate = moderate_factors(&d, 4, 1000, &mut stream(0, "gem/moderate-variability"));
    println!("moderate setup factors (1000 draws of 4): {moderate:.3?}");

    for dataset in ["sharegpt", "codecontests"] {
        println!(
            "\n== End-to-end and p90 TPOT reduction vs linear, {dataset}, {n_requests} requests =="
        );
        println!(
            "{:<14} {:<9} {:>10} {:>10} {:>10} {:>10}",
            "model", "setup", "eplb e2e", "gem e2e", "eplb p90", "gem p90"
        );
        let mut sums = std::collections::BTreeMap::<&str, (f64, f64, f64, usize)>::new();
        for model in MODELS {
            for setup in SETUPS {
                let results: Vec<(f64, f64)> = ["linear", "eplb", "gem"]
                    .iter()
                    .map(|kind| {
                        let config = json!({
                            "model": {"name": model},
                            "cluster": {"variability": setup},
                            "workload": {"dataset": dataset, "n_requests": n_requests},
                            "mapper": {"kind": kind},
                        });
                        run(&scenario(config), seeds)
                    })
                    .collect();
                let (l, e, g) = (results[0], results[1], results[2]);
                println!(
                    "{model:<14} {setup:<9} {:>9.1}% {:>9.1}% {:>9.1}% {:>9.1}%",
                    reduction(l.0, e.0),
                    reduction(l.0, g.0),
                    reduction(l.1, e.1),
                    reduction(l.1, g.1)
                );
                let entry = sums.entry(setup).or_insert((0.0, f64::MIN, 0.0, 0));
                entry.0 += reduction(l.0, g.0);
                entry.1 = entry.1.max(reduction(l.0, g.0));
                entry.2 += reduction(l.1, g.1);
                entry.3 += 1;
            }
        }
        for (setup, (sum, best, p90, n)) in sums {
            println!(
                "{setup:<9}: GEM e2e reduction mean {:.1} %, best {:.1} %; p90 TPOT mean {:.1} %",
                sum / n as f64,
                best,
                p90 / n as f64
            );
        }
    }

    println!("\n== Trace-length sweep (high variability, ShareGPT, 500 unseen requests) ==");
    for model in ["qwen3-30b-a3b", "hunyuan-a13b", "llama-4-scout"] {
        let config = |mapper: serde_json::Value| {
            scenario(json!({
                "model": {"name": model},
                "cluster": {"variability": "high"},
                "workload": {"n_requests": 500},
                "mapper": mapper,
            }))
        };
        let linear = run(&config(json!({"kind": "linear"})), seeds);
        let mut row = format!("{model:<14}");
        for window in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            let g = run(&config(json!({"kind": "gem", "window": window})), seeds);
            row.push_str(&format!(" w{window}:{:+.1}%", reduction(linear.0, g.0)));
        }
        println!("{row}");
    }

    println!(
        "\n== Mapping time: GEM, all 48 layers of Qwen3-30B-A3B, 4 GPUs, window 16, K = 30 =="
    );
    let s = scenario(json!({
        "model": {"name": "qwen3-30b-a3b"},
        "cluster": {"variability": "high"},
        "mapper": {"kind": "gem"},
    }));
    let deployment = Deployment::new(&s, 1);
    let mut gem = strategies::mapping::build(&s.mapper);
    let start = Instant::now();
    let mappings = deployment.map_layers(gem.as_mut(), 16, 1);
    println!(
        "{} layers mapped in {:.3} s (wall clock, this machine)",
        mappings.len(),
        start.elapsed().as_secs_f64()
    );
}
