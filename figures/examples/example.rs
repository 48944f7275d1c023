//! Renders realistic example figures (12 strategies, 4 arrival rates, some error bars):
//! `cargo run -p expertsim-figures --example example -- /tmp/figures_example [--log] [--grid]`.
//! Default: P99 latency, bursty | poisson side by side; `--grid`: throughput and
//! imbalance vs rate for bursty and poisson in a 2x2 grid.

use std::path::PathBuf;

use figures::{Figure, Panel, Series, render};

const STRATEGIES: [&str; 12] = [
    "fcfs",
    "round-robin",
    "least-loaded",
    "expert-affinity",
    "token-balanced",
    "lpt-rebalance",
    "power-of-two",
    "locality-aware",
    "speculative-prefetch",
    "capacity-factor-1.25",
    "hot-expert-replication",
    "oracle",
];
const RATES: [f64; 4] = [50.0, 100.0, 200.0, 400.0];

fn panel(title: &str, burst: f64, log_y: bool) -> Panel {
    let series = STRATEGIES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let quality = 1.0 - i as f64 / 14.0;
            let points: Vec<(f64, f64)> = RATES
                .iter()
                .map(|&r| {
                    let load = r / 450.0;
                    let p99 = 40.0 * (1.0 + 0.4 * quality)
                        + burst * quality * 30.0 * load / (1.0 - load * (0.6 + 0.35 * quality));
                    (r, p99)
                })
                .collect();
            let y_err = (i % 3 == 0).then(|| points.iter().map(|p| p.1 * 0.06).collect());
            Series {
                label: name.to_string(),
                points,
                y_err,
            }
        })
        .collect();
    Panel {
        title: title.to_string(),
        x_label: "arrival rate (req/s)".to_string(),
        y_label: "P99 latency (ms)".to_string(),
        series,
        log_y,
    }
}

fn throughput(title: &str, eff: f64) -> Panel {
    let series = STRATEGIES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let quality = 1.0 - i as f64 / 14.0;
            let points: Vec<(f64, f64)> = RATES
                .iter()
                .map(|&r| {
                    let cap = 300.0 + 150.0 * (1.0 - quality);
                    (r, 128.0 * r.min(cap * eff) * (1.0 - 0.02 * quality))
                })
                .collect();
            let y_err = (i % 4 == 1).then(|| points.iter().map(|p| p.1 * 0.03).collect());
            Series {
                label: name.to_string(),
                points,
                y_err,
            }
        })
        .collect();
    Panel {
        title: format!("throughput, {title}"),
        x_label: "arrival rate (req/s)".to_string(),
        y_label: "throughput (tokens/s)".to_string(),
        series,
        log_y: false,
    }
}

fn imbalance(title: &str, burst: f64) -> Panel {
    let series = STRATEGIES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let quality = 1.0 - i as f64 / 14.0;
            let points: Vec<(f64, f64)> = RATES
                .iter()
                .map(|&r| (r, 1.0 + burst * quality * (0.3 + r / 500.0)))
                .collect();
            let y_err = (i % 4 == 2).then(|| points.iter().map(|p| (p.1 - 1.0) * 0.1).collect());
            Series {
                label: name.to_string(),
                points,
                y_err,
            }
        })
        .collect();
    Panel {
        title: format!("expert imbalance, {title}"),
        x_label: "arrival rate (req/s)".to_string(),
        y_label: "max / mean expert load".to_string(),
        series,
        log_y: false,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stem = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("/tmp/figures_example"), PathBuf::from);
    let log_y = std::env::args().any(|a| a == "--log");
    let figure = if std::env::args().any(|a| a == "--grid") {
        Figure {
            title: "Throughput and expert imbalance vs arrival rate".to_string(),
            panels: vec![
                throughput("bursty", 0.8),
                throughput("poisson", 1.0),
                imbalance("bursty", 1.6),
                imbalance("poisson", 1.0),
            ],
            columns: 2,
        }
    } else {
        Figure {
            title: "P99 latency vs arrival rate per strategy".to_string(),
            panels: vec![panel("bursty", 2.5, log_y), panel("poisson", 1.0, log_y)],
            columns: 2,
        }
    };
    for path in render(&figure, &stem)? {
        println!("{}", path.display());
    }
    Ok(())
}
