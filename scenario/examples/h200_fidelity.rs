//! docs/fidelity.md's "Against a real H200", generated: every point of
//! `profiles/h200/kernels.json` priced through the simulator's entry points (`cost::fidelity`),
//! the error per operation class with the points the H200 rates were fitted on apart from
//! those they were not, per shape, the H200's rates with their derivation, Vidur's shares
//! within +-20 % before and after; the figures `docs/figures/h200_*.{png,svg}` (measured
//! staircases beside the model, error per shape); and the price inputs that reproduce every
//! prediction through `expertsim price` (`profiles/h200/price_{graph,eager}.csv`).
//! Run: `cargo run --release -p expertsim-scenario --example h200_fidelity`.

use expertsim_scenario::cost::fidelity::{
    FidelityPoint, KernelClass, MAX_MEDIAN_ABS_PCT, MIN_WITHIN_20_PCT, gated, price_points, spread,
    vidur_shares,
};
use expertsim_scenario::cost::gpu::GpuSpec;
use expertsim_scenario::cost::kernel::{RatesFile, Timing};
use expertsim_scenario::cost::kernel_timings::KernelTimings;
use expertsim_scenario::cost::measured_ops::OpClass;
use figures::{Figure, Panel, Series};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

const BEGIN: &str = "<!-- h200-fidelity:begin -->";
const END: &str = "<!-- h200-fidelity:end -->";

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn row(label: &str, s: Option<expertsim_scenario::cost::fidelity::Spread>) -> String {
    match s {
        Some(s) => format!(
            "| {label} | {} | {:.1} % | {:.0} % | {:.2} / {:.2} / {:.2} |",
            s.n, s.median_abs_pct, s.within_20_pct, s.min_ratio, s.median_ratio, s.max_ratio
        ),
        None => format!("| {label} | 0 | - | - | - |"),
    }
}

fn class_table(points: &[FidelityPoint]) -> String {
    let mut out = String::from(
        "| class (timing) | points | median \\|error\\| | within +-20 % | min / median / max predicted / measured | fitted: points, median \\|error\\|, within | not fitted: points, median \\|error\\|, within |\n|---|---|---|---|---|---|---|\n",
    );
    for class in KernelClass::ALL {
        let all = gated(points, class);
        let timing = all[0].timing.as_str();
        let s = spread(all.iter().copied()).expect("every class has points");
        let part = |fitted: bool| {
            spread(all.iter().copied().filter(|p| p.fitted == fitted))
                .map(|s| {
                    format!(
                        "{}, {:.1} %, {:.0} %",
                        s.n, s.median_abs_pct, s.within_20_pct
                    )
                })
                .unwrap_or_else(|| "-".into())
        };
        writeln!(
            out,
            "| {} ({timing}) | {} | {:.1} % | {:.0} % | {:.2} / {:.2} / {:.2} | {} | {} |",
            class.name(),
            s.n,
            s.median_abs_pct,
            s.within_20_pct,
            s.min_ratio,
            s.median_ratio,
            s.max_ratio,
            part(true),
            part(false)
        )
        .unwrap();
    }
    // The eager token sweep of the dense GEMMs, reported beside (the bar is on CUDA graphs).
    let eager: Vec<_> = points
        .iter()
        .filter(|p| p.class == KernelClass::DenseGemm && p.timing == Timing::Eager)
        .collect();
    let s = spread(eager.iter().copied()).unwrap();
    let part = |fitted: bool| {
        let fitted_model = |p: &&FidelityPoint| {
            expertsim_scenario::cost::fit::FITTED_MODELS.contains(&p.model.as_str())
        };
        spread(eager.iter().copied().filter(|p| fitted_model(p) == fitted))
            .map(|s| {
                format!(
                    "{}, {:.1} %, {:.0} %",
                    s.n, s.median_abs_pct, s.within_20_pct
                )
            })
            .unwrap_or_else(|| "-".into())
    };
    writeln!(
        out,
        "| dense GEMM, eager token sweep (not held to the bar) | {} | {:.1} % | {:.0} % | {:.2} / {:.2} / {:.2} | {} (their host launch derived from them) | {} |",
        s.n, s.median_abs_pct, s.within_20_pct, s.min_ratio, s.median_ratio, s.max_ratio, part(true), part(false)
    )
    .unwrap();
    out
}

fn shape_table(points: &[FidelityPoint]) -> String {
    let mut out = String::from(
        "| model | op | timing | points | median \\|error\\| | within +-20 % | min / median / max predicted / measured |\n|---|---|---|---|---|---|---|\n",
    );
    let mut groups: BTreeMap<(String, String, &str), Vec<&FidelityPoint>> = BTreeMap::new();
    for p in points {
        groups
            .entry((p.model.clone(), p.op.clone(), p.timing.as_str()))
            .or_default()
            .push(p);
    }
    for ((model, op, timing), ps) in groups {
        let s = spread(ps.iter().copied()).unwrap();
        writeln!(
            out,
            "{}",
            row(&format!("{model} | {op} | {timing}"), Some(s))
        )
        .unwrap();
    }
    out
}

fn rates_table() -> String {
    let rates = RatesFile::committed();
    let mut out = String::from(
        "| GPU | source | streaming GB/s | GEMM TFLOP/s | grouped streaming (single-tile groups) GB/s | grouped GEMM TFLOP/s | kernel floor us | reduction ns per 1,000 K | p | group tail (tiles) | host launch us |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for e in &rates.gpus {
        let r = &e.rates;
        writeln!(
            out,
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2} | {:.0} | {} | {:.3} | {:.1} |",
            e.gpu,
            e.source,
            r.stream_bytes_per_s / 1e9,
            r.gemm_flops / 1e12,
            r.grouped_stream_bytes_per_s / 1e9,
            r.grouped_gemm_flops / 1e12,
            r.kernel_floor_ns / 1e3,
            r.reduction_ns_per_element * 1e3,
            r.overlap_norm,
            r.group_tail_tiles,
            r.host_launch_ns / 1e3
        )
        .unwrap();
    }
    out
}

fn vidur_table() -> String {
    let mut out = String::from(
        "| GPU | operations | points | within +-20 %, former roofline | within +-20 %, kernel model |\n|---|---|---|---|---|\n",
    );
    for s in vidur_shares(&root().join("profiles")) {
        let class = match s.class {
            OpClass::Mlp => "MLP",
            OpClass::AttentionProjections => "attention projections",
            OpClass::Elementwise => "element-wise",
        };
        writeln!(
            out,
            "| {} | {class} | {} | {:.1} % | {:.1} % |",
            s.gpu,
            s.n,
            100.0 * s.before as f64 / s.n as f64,
            100.0 * s.within as f64 / s.n as f64
        )
        .unwrap();
    }
    out
}

/// The price inputs whose `expertsim price` output reproduces every prediction.
fn price_inputs(points: &[FidelityPoint]) {
    for timing in [Timing::Graph, Timing::Eager] {
        let mut text = String::from("gpu,model,op,tokens,context,rows_per_expert,measured_us\n");
        for p in points.iter().filter(|p| p.timing == timing) {
            let (tokens, context, rows) = match p.class {
                KernelClass::GroupedGemm => (
                    String::new(),
                    String::new(),
                    p.rows_per_expert
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(";"),
                ),
                KernelClass::DecodeAttention => {
                    (p.tokens.to_string(), p.context.to_string(), String::new())
                }
                _ => (p.tokens.to_string(), String::new(), String::new()),
            };
            writeln!(
                text,
                "H200,{},{},{tokens},{context},{rows},{}",
                p.model,
                p.op,
                p.measured_ns / 1e3
            )
            .unwrap();
        }
        let path = root().join(format!("profiles/h200/price_{}.csv", timing.as_str()));
        std::fs::write(&path, text).expect("the price input writes");
        eprintln!("wrote {}", path.display());
    }
}

fn log2(x: f64) -> f64 {
    x.log2()
}

fn series(label: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.into(),
        points,
        y_err: None,
    }
}

fn figures(points: &[FidelityPoint], out: &Path) {
    let set = KernelTimings::h200();
    let gpu = GpuSpec::by_name("H200").unwrap();
    // Dense GEMMs: the measured staircase (eager sweep and CUDA graph) and the model, per shape.
    let mut gemm_panels = Vec::new();
    let mut error_panels = Vec::new();
    let mut shapes: Vec<(String, String)> = Vec::new();
    for p in &set.gemm {
        if !shapes.iter().any(|(m, o)| (m, o) == (&p.model, &p.op)) {
            shapes.push((p.model.clone(), p.op.clone()));
        }
    }
    let mut error_series = Vec::new();
    for (model, op) in &shapes {
        let of = |timing: Timing| -> Vec<&FidelityPoint> {
            points
                .iter()
                .filter(|p| {
                    p.class == KernelClass::DenseGemm
                        && &p.model == model
                        && &p.op == op
                        && p.timing == timing
                })
                .collect()
        };
        let (eager, graph) = (of(Timing::Eager), of(Timing::Graph));
        let m = expertsim_scenario::cost::price::CatalogueModel::by_name(model).unwrap();
        let o = expertsim_scenario::cost::price::Op::parse(op).unwrap();
        // The model on a dense token grid (every 8 tokens to 512, then a geometric grid).
        let grid: Vec<u64> = (0..=64u64)
            .map(|i| (i * 8).max(1))
            .chain((0..=40).map(|i| (512.0 * 2f64.powf(i as f64 / 8.0)).round() as u64))
            .filter(|&t| t <= 16_384)
            .collect();
        let model_line = |timing: Timing| {
            grid.iter()
                .map(|&t| {
                    let p = expertsim_scenario::cost::price::price_op(&gpu, &m, o, t, 0, timing)
                        .unwrap();
                    (log2(t as f64), p.predicted_ns / 1e3)
                })
                .collect()
        };
        let measured = |ps: &[&FidelityPoint]| {
            ps.iter()
                .map(|p| (log2(p.tokens as f64), p.measured_ns / 1e3))
                .collect()
        };
        gemm_panels.push(Panel {
            title: format!("{model} {op}"),
            x_label: "log2(tokens)".into(),
            y_label: "time (us)".into(),
            series: vec![
                series("measured, CUDA graph", measured(&graph)),
                series("measured, eager", measured(&eager)),
                series("model, CUDA graph", model_line(Timing::Graph)),
                series("model, eager", model_line(Timing::Eager)),
            ],
            log_y: true,
        });
        error_series.push(series(
            &format!("{model} {op}"),
            graph
                .iter()
                .map(|p| (log2(p.tokens as f64), p.ratio()))
                .collect(),
        ));
    }
    error_panels.push(Panel {
        title: "dense GEMMs, CUDA graph".into(),
        x_label: "log2(tokens)".into(),
        y_label: "predicted / measured".into(),
        series: error_series,
        log_y: true,
    });
    // Grouped GEMMs: per model, measured and model vs tokens, one line per experts touched.
    let mut grouped_panels = Vec::new();
    for model in ["mixtral-8x7b", "qwen1.5-moe-a2.7b"] {
        let ps: Vec<&FidelityPoint> = points
            .iter()
            .filter(|p| p.class == KernelClass::GroupedGemm && p.model == model)
            .collect();
        let mut by_groups: BTreeMap<usize, Vec<&FidelityPoint>> = BTreeMap::new();
        for p in ps.iter().filter(|p| {
            p.rows_per_expert.iter().max() <= Some(&(p.rows_per_expert.iter().min().unwrap() + 1))
        }) {
            by_groups.entry(p.groups).or_default().push(p);
        }
        let mut measured = Vec::new();
        let mut modelled = Vec::new();
        let mut errors = Vec::new();
        for (g, list) in &by_groups {
            let pts = |f: &dyn Fn(&FidelityPoint) -> f64| {
                list.iter()
                    .map(|p| (log2(p.tokens as f64), f(p)))
                    .collect::<Vec<_>>()
            };
            measured.push(series(
                &format!("{g} experts"),
                pts(&|p| p.measured_ns / 1e3),
            ));
            modelled.push(series(
                &format!("{g} experts"),
                pts(&|p| p.priced.predicted_ns / 1e3),
            ));
            errors.push(series(&format!("{g} experts"), pts(&|p| p.ratio())));
        }
        let fitted = if expertsim_scenario::cost::fit::FITTED_MODELS.contains(&model) {
            "fitted"
        } else {
            "not fitted"
        };
        grouped_panels.push(Panel {
            title: format!("{model} grouped GEMMs ({fitted}): measured"),
            x_label: "log2(tokens of the step)".into(),
            y_label: "time (us)".into(),
            series: measured,
            log_y: true,
        });
        grouped_panels.push(Panel {
            title: format!("{model} grouped GEMMs: model"),
            x_label: "log2(tokens of the step)".into(),
            y_label: "time (us)".into(),
            series: modelled,
            log_y: true,
        });
        error_panels.push(Panel {
            title: format!("{model} grouped GEMMs ({fitted})"),
            x_label: "log2(tokens of the step)".into(),
            y_label: "predicted / measured".into(),
            series: errors,
            log_y: true,
        });
    }
    // Attention: decode per batch vs context, prefill vs length; measured and model.
    let decode: Vec<&FidelityPoint> = points
        .iter()
        .filter(|p| p.class == KernelClass::DecodeAttention)
        .collect();
    let mut batches: Vec<u64> = decode.iter().map(|p| p.tokens).collect();
    batches.sort_unstable();
    batches.dedup();
    let mut decode_series = Vec::new();
    let mut decode_errors = Vec::new();
    for b in &batches {
        let list: Vec<_> = decode.iter().filter(|p| p.tokens == *b).collect();
        decode_series.push(series(
            &format!("batch {b}, measured"),
            list.iter()
                .map(|p| (log2(p.context as f64), p.measured_ns / 1e3))
                .collect(),
        ));
        decode_series.push(series(
            &format!("batch {b}, model"),
            list.iter()
                .map(|p| (log2(p.context as f64), p.priced.predicted_ns / 1e3))
                .collect(),
        ));
        decode_errors.push(series(
            &format!("batch {b}"),
            list.iter()
                .map(|p| (log2(p.context as f64), p.ratio()))
                .collect(),
        ));
    }
    let prefill: Vec<&FidelityPoint> = points
        .iter()
        .filter(|p| p.class == KernelClass::PrefillAttention)
        .collect();
    let attention_panels = vec![
        Panel {
            title: "decode attention, eager (not fitted)".into(),
            x_label: "log2(context tokens)".into(),
            y_label: "time (us)".into(),
            series: decode_series,
            log_y: true,
        },
        Panel {
            title: "causal prefill attention, eager (not fitted)".into(),
            x_label: "log2(length)".into(),
            y_label: "time (us)".into(),
            series: vec![
                series(
                    "measured",
                    prefill
                        .iter()
                        .map(|p| (log2(p.tokens as f64), p.measured_ns / 1e3))
                        .collect(),
                ),
                series(
                    "model",
                    prefill
                        .iter()
                        .map(|p| (log2(p.tokens as f64), p.priced.predicted_ns / 1e3))
                        .collect(),
                ),
            ],
            log_y: true,
        },
    ];
    error_panels.push(Panel {
        title: "decode attention, eager (not fitted)".into(),
        x_label: "log2(context tokens)".into(),
        y_label: "predicted / measured".into(),
        series: decode_errors,
        log_y: true,
    });
    error_panels.push(Panel {
        title: "prefill attention, eager (not fitted)".into(),
        x_label: "log2(length)".into(),
        y_label: "predicted / measured".into(),
        series: vec![series(
            "prefill",
            prefill
                .iter()
                .map(|p| (log2(p.tokens as f64), p.ratio()))
                .collect(),
        )],
        log_y: true,
    });
    for (name, title, panels, columns) in [
        (
            "h200_gemm",
            "H200 dense GEMMs: measured staircase (eager sweep, CUDA graph) and the kernel model",
            gemm_panels,
            4,
        ),
        (
            "h200_grouped",
            "H200 grouped expert GEMMs (two per MoE layer): measured and the kernel model",
            grouped_panels,
            2,
        ),
        (
            "h200_attention",
            "H200 FlashAttention, eager: measured and the kernel model",
            attention_panels,
            2,
        ),
        (
            "h200_error",
            "H200: predicted / measured per shape",
            error_panels,
            3,
        ),
    ] {
        let written = figures::render(
            &Figure {
                title: title.into(),
                panels,
                columns,
            },
            &out.join(name),
        )
        .expect("the figure renders");
        for path in written {
            eprintln!("wrote {}", path.display());
        }
    }
}

fn main() {
    let gpu = GpuSpec::by_name("H200").unwrap();
    let points = price_points(&KernelTimings::h200(), &gpu);
    let mut section = String::new();
    writeln!(
        section,
        "Generated by `cargo run --release -p expertsim-scenario --example h200_fidelity` from \
         `profiles/h200/kernels.json` ({} points) and `profiles/rates.json`; the bar (median \
         |error| at most {MAX_MEDIAN_ABS_PCT} %, at least {MIN_WITHIN_20_PCT} % of points within \
         +-20 %, per class, CUDA-graph timing where a class has it) is `cargo test --release -p \
         expertsim-cost fidelity_h200`. Error = predicted / measured - 1; \"fitted\" are the \
         Mixtral-8x7B and Llama-2-7B points the H200's rates were fitted on, \"not fitted\" the \
         Qwen1.5-MoE GEMMs and every attention point, predicted.\n",
        points.len()
    )
    .unwrap();
    section.push_str("### Per operation class\n\n");
    section.push_str(&class_table(&points));
    section.push_str("\n![dense GEMMs](figures/h200_gemm.png)\n\n![grouped GEMMs](figures/h200_grouped.png)\n\n![attention](figures/h200_attention.png)\n\n![error per shape](figures/h200_error.png)\n\n");
    section.push_str("### Per shape\n\n");
    section.push_str(&shape_table(&points));
    section.push_str("\n### The rates (`profiles/rates.json`)\n\n");
    section.push_str(&rates_table());
    section.push_str("\n### Vidur's kernels, before and after (every point, every degree)\n\n");
    section.push_str(&vidur_table());
    section.push_str(
        "\nEvery prediction above comes back from the simulator's own pricing command: \
         `expertsim price profiles/h200/price_graph.csv` and `expertsim price \
         profiles/h200/price_eager.csv --timing eager` (the inputs carry `measured_us` \
         beside; `tests/cli/price.rs` holds the two to these numbers).\n",
    );
    let doc_path = root().join("docs/fidelity.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/fidelity.md");
    let (a, b) = (
        doc.find(BEGIN).expect("the begin marker") + BEGIN.len(),
        doc.find(END).expect("the end marker"),
    );
    let updated = format!("{}\n{}{}", &doc[..a], section, &doc[b..]);
    std::fs::write(&doc_path, updated).expect("docs/fidelity.md writes");
    eprintln!("wrote {}", doc_path.display());
    price_inputs(&points);
    figures(&points, &root().join("docs/figures"));
}
