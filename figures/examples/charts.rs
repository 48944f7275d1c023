//! Renders one realistic example of each non-line chart kind, and a figure mixing
//! kinds: `cargo run -p expertsim-figures --example charts -- [/tmp/figures]` writes
//! `<prefix>_bars`, `_stacked`, `_heatmap`, `_heatmap_dense`, `_timeline` and
//! `_mixed` (`.png` and `.svg` each).

use figures::{
    BarPanel, BarSeries, Chart, ChartFigure, HeatmapPanel, Panel, Segment, Series, StackLayer,
    StackedBarPanel, TimelinePanel, render,
};

const MODELS: [&str; 4] = [
    "Mixtral-8x7B",
    "DeepSeek-V2-Lite",
    "Qwen1.5-MoE",
    "OLMoE-1B-7B",
];
const SETUPS: [&str; 3] = ["low variability", "medium variability", "high variability"];

/// GEM-style: end-to-end latency reduction vs the linear mapping, per model and setup.
fn reduction(title: &str, scale: f64) -> BarPanel {
    let base = [
        [4.1, 9.8, 17.5],
        [-2.3, 6.2, 13.9],
        [1.4, 7.7, 22.6],
        [-4.8, 3.1, 11.2],
    ];
    BarPanel {
        title: title.to_string(),
        x_label: "model".to_string(),
        y_label: "latency reduction vs linear (%)".to_string(),
        groups: MODELS.iter().map(|s| s.to_string()).collect(),
        series: SETUPS
            .iter()
            .enumerate()
            .map(|(b, setup)| BarSeries {
                label: setup.to_string(),
                values: base.iter().map(|row| row[b] * scale).collect(),
                y_err: Some(base.iter().map(|row| 0.8 + 0.12 * row[b].abs()).collect()),
            })
            .collect(),
    }
}

/// MOSAIC-style: end-to-end time = expert stage + aggregator, per dataset and policy.
fn stacked(title: &str, scale: f64) -> StackedBarPanel {
    let datasets = ["ShareGPT", "LMSYS-Chat", "Alpaca"];
    let policies = ["round-robin", "greedy", "ILP"];
    let expert = [[41.0, 35.5, 29.8], [52.3, 44.0, 36.1], [28.4, 25.9, 21.7]];
    let aggregator = [[6.2, 6.9, 7.4], [8.1, 8.8, 9.6], [4.0, 4.3, 4.9]];
    let scaled = |m: [[f64; 3]; 3]| {
        m.iter()
            .map(|row| row.iter().map(|v| v * scale).collect())
            .collect()
    };
    StackedBarPanel {
        title: title.to_string(),
        x_label: "dataset".to_string(),
        y_label: "end-to-end time (s)".to_string(),
        groups: datasets.iter().map(|s| s.to_string()).collect(),
        bars: policies.iter().map(|s| s.to_string()).collect(),
        layers: vec![
            StackLayer {
                label: "expert stage".to_string(),
                values: scaled(expert),
            },
            StackLayer {
                label: "aggregator".to_string(),
                values: scaled(aggregator),
            },
        ],
    }
}

/// A deterministic pseudo-random number in 0..1 (no dependency needed).
fn hash01(a: usize, b: usize, c: usize) -> f64 {
    let mut x =
        (a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((b as u64) << 21) ^ ((c as u64) << 42);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Per-GPU load of the experts in each slot of one MoE layer under a mapping.
fn slot_loads(mapping: &str, seed: usize, balance: f64) -> HeatmapPanel {
    let (gpus, slots) = (8, 8);
    let values = (0..gpus)
        .map(|g| {
            (0..slots)
                .map(|s| {
                    // Skewed popularity, evened out by `balance` (0: none, 1: perfect).
                    let hot = 3.0 * (-(((g * slots + s) % 13) as f64) / 3.0).exp();
                    let noise = hash01(seed, g, s);
                    let raw = 120.0 * (1.0 + hot + 0.6 * noise);
                    (raw * (1.0 - balance) + 260.0 * balance).round()
                })
                .collect()
        })
        .collect();
    HeatmapPanel {
        title: mapping.to_string(),
        x_label: "slot".to_string(),
        y_label: "GPU".to_string(),
        row_labels: (0..gpus).map(|g| format!("GPU {g}")).collect(),
        column_labels: (0..slots).map(|s| s.to_string()).collect(),
        values,
        value_label: "tokens routed".to_string(),
        range: None,
        annotate: true,
    }
}

/// 16 GPUs x 64 experts: the share of each expert's tokens served by each GPU.
fn dense(mapping: &str, replicas: usize) -> HeatmapPanel {
    let (gpus, experts) = (16, 64);
    let values = (0..gpus)
        .map(|g| {
            (0..experts)
                .map(|e| {
                    let home = e * gpus / experts;
                    let copies = if e % 9 == 0 { replicas } else { 1 };
                    let d = (g + gpus - home) % gpus;
                    if d < copies {
                        (100.0 / copies as f64 * (0.8 + 0.4 * hash01(7, g, e))).round()
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    HeatmapPanel {
        title: mapping.to_string(),
        x_label: "expert".to_string(),
        y_label: "GPU".to_string(),
        row_labels: (0..gpus).map(|g| g.to_string()).collect(),
        column_labels: (0..experts).map(|e| e.to_string()).collect(),
        values,
        value_label: "% of expert's tokens".to_string(),
        range: Some((0.0, 100.0)),
        annotate: true,
    }
}

/// Worker timelines under a policy: load an expert, generate with it, maybe idle.
fn timeline(policy: &str, plan: &[&[(usize, f64, f64)]]) -> TimelinePanel {
    let mut segments = Vec::new();
    for (w, jobs) in plan.iter().enumerate() {
        let mut t = 0.0;
        for &(expert, load, generate) in *jobs {
            if load > 0.0 {
                segments.push(Segment {
                    row: w,
                    start: t,
                    end: t + load,
                    kind: "load".to_string(),
                    label: format!("E{expert}"),
                });
                t += load;
            }
            segments.push(Segment {
                row: w,
                start: t,
                end: t + generate,
                kind: "generate".to_string(),
                label: format!("E{expert}"),
            });
            t += generate;
        }
    }
    // Idle until the last worker finishes.
    let end = segments.iter().map(|s| s.end).fold(0.0, f64::max);
    for w in 0..plan.len() {
        let last = segments
            .iter()
            .filter(|s| s.row == w)
            .map(|s| s.end)
            .fold(0.0, f64::max);
        if last < end {
            segments.push(Segment {
                row: w,
                start: last,
                end,
                kind: "idle".to_string(),
                label: String::new(),
            });
        }
    }
    TimelinePanel {
        title: policy.to_string(),
        x_label: "time (s)".to_string(),
        y_label: "worker".to_string(),
        rows: (0..plan.len()).map(|w| format!("worker {w}")).collect(),
        segments,
        range: None,
    }
}

fn line_panel() -> Panel {
    Panel {
        title: "P99 latency".to_string(),
        x_label: "arrival rate (req/s)".to_string(),
        y_label: "P99 latency (ms)".to_string(),
        series: SETUPS
            .iter()
            .enumerate()
            .map(|(i, s)| Series {
                label: s.to_string(),
                points: [50.0, 100.0, 200.0, 400.0]
                    .iter()
                    .map(|&r| (r, 60.0 + (1.0 + i as f64) * r * r / 2000.0))
                    .collect(),
                y_err: None,
            })
            .collect(),
        log_y: false,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prefix = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/figures".to_string());
    let figures = [
        (
            "bars",
            ChartFigure {
                title: "End-to-end latency reduction vs linear mapping".to_string(),
                charts: vec![
                    reduction("8 GPUs", 1.0).into(),
                    reduction("16 GPUs", 1.3).into(),
                ],
                columns: 2,
                colors: Vec::new(),
                legend_title: None,
                caption: None,
            },
        ),
        (
            "stacked",
            ChartFigure {
                title: "End-to-end time = expert stage + aggregator".to_string(),
                charts: vec![
                    stacked("Mixtral-8x7B", 1.0).into(),
                    stacked("DeepSeek-V2-Lite", 0.7).into(),
                ],
                columns: 2,
                colors: Vec::new(),
                legend_title: None,
                caption: None,
            },
        ),
        (
            "heatmap",
            ChartFigure {
                title: "Per-GPU expert load, layer 12".to_string(),
                charts: vec![
                    slot_loads("linear", 1, 0.0).into(),
                    slot_loads("round-robin", 2, 0.3).into(),
                    slot_loads("GEM", 3, 0.8).into(),
                ],
                columns: 3,
                colors: Vec::new(),
                legend_title: None,
                caption: None,
            },
        ),
        (
            "heatmap_dense",
            ChartFigure {
                title: "Expert placement with replication".to_string(),
                charts: vec![
                    dense("no replication", 1).into(),
                    dense("2 replicas of hot experts", 2).into(),
                ],
                columns: 2,
                colors: Vec::new(),
                legend_title: None,
                caption: None,
            },
        ),
        (
            "timeline",
            ChartFigure {
                title: "Worker activity per policy".to_string(),
                charts: vec![
                    timeline(
                        "round-robin",
                        &[
                            &[(0, 1.2, 3.0), (4, 1.2, 2.1), (8, 1.2, 4.4)],
                            &[(1, 1.2, 5.2), (5, 1.2, 1.0)],
                            &[(2, 1.2, 1.4), (6, 1.2, 6.3), (9, 1.2, 0.9)],
                            &[(3, 1.2, 2.2), (7, 1.2, 1.5)],
                        ],
                    )
                    .into(),
                    timeline(
                        "ILP",
                        &[
                            &[(6, 1.2, 6.3), (3, 1.2, 2.2)],
                            &[(1, 1.2, 5.2), (7, 1.2, 1.5), (9, 1.2, 0.9)],
                            &[(8, 1.2, 4.4), (0, 1.2, 3.0), (5, 1.2, 1.0)],
                            &[(4, 1.2, 2.1), (2, 1.2, 1.4), (0, 0.0, 2.4)],
                        ],
                    )
                    .into(),
                ],
                columns: 1,
                colors: vec![("idle".to_string(), [0xC8, 0xC8, 0xC8])],
                legend_title: None,
                caption: None,
            },
        ),
        (
            "mixed",
            ChartFigure {
                title: "One figure, four kinds of panels".to_string(),
                charts: vec![
                    Chart::Line(line_panel()),
                    reduction("reduction vs linear", 1.0).into(),
                    slot_loads("GEM", 3, 0.8).into(),
                    timeline(
                        "round-robin",
                        &[&[(0, 1.2, 3.0), (4, 1.2, 2.1)], &[(1, 1.2, 5.2)]],
                    )
                    .into(),
                ],
                columns: 2,
                colors: Vec::new(),
                legend_title: None,
                caption: None,
            },
        ),
    ];
    for (name, figure) in &figures {
        let stem = std::path::PathBuf::from(format!("{prefix}_{name}"));
        for path in render(figure, &stem)? {
            println!("{}", path.display());
        }
    }
    Ok(())
}
