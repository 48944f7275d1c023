//! The roofline against measured GPU kernels (docs/fidelity.md, "Against measured GPU kernels"):
//! for every op profile of `profiles/vidur/` (A100, H100, A40) and each class of operations the
//! roofline prices (gated MLP, attention projections, element-wise kernels), the roofline's time
//! over the measured median by token count at every tensor-parallel degree measured; then whole
//! dense and MoE steps built from the measured operations (`cost::measured_steps`) against the
//! roofline's step of the same model. Prints markdown tables and writes two figures through the
//! `figures` crate (PNG + SVG): `vidur_kernels` (measured staircase, the profile's
//! interpolation carried past the last measurement, the roofline) and `vidur_roofline_error`.
//! Run: `cargo run --release -p expertsim-scenario --example measured_kernels [-- OUT_DIR]`
//! (default OUT_DIR: docs/figures).

use expertsim_scenario::cost::measured_ops::{LayerShape, OpClass, roofline_nanos};
use expertsim_scenario::cost::measured_steps::{MeasuredDenseStep, MeasuredSet, moe};
use expertsim_scenario::cost::op_profile::OpProfile;
use expertsim_scenario::cost::roofline::{
    StepRoofline, StepTokens, TensorParallel, analytic_profile,
};
use expertsim_scenario::cost::shape::{DenseModelShape, MoeModelShape};
use expertsim_scenario::cost::{GpuSpec, LinkSpec};
use figures::{Figure, Panel, Series};
use std::path::{Path, PathBuf};

/// The measured sets, one per GPU.
const SETS: [&str; 3] = ["vidur/a100", "vidur/h100", "vidur/a40"];
/// The classes of operations compared (the roofline prices each as one kernel group).
const CLASSES: [OpClass; 3] = [
    OpClass::Mlp,
    OpClass::AttentionProjections,
    OpClass::Elementwise,
];
/// Token counts of the per-class table's columns.
const COLUMNS: [u64; 9] = [1, 16, 64, 128, 256, 512, 1024, 4096, 16384];

fn class_name(class: OpClass) -> &'static str {
    match class {
        OpClass::Mlp => "MLP",
        OpClass::AttentionProjections => "attention projections",
        OpClass::Elementwise => "element-wise",
    }
}

fn short_model(profile: &OpProfile) -> &str {
    profile.model.rsplit('/').next().unwrap_or(&profile.model)
}

/// The measured median of `class` in `profile` at `tp` over `tokens` rows (the sum of the
/// class's operations), or `None` outside the measured range.
fn measured(profile: &OpProfile, class: OpClass, tp: u32, tokens: u64) -> Option<f64> {
    class
        .operations()
        .iter()
        .map(|&op| profile.series(op, tp)?.nanos_at(tokens).ok())
        .sum()
}

/// The token counts every series of `class` at `tp` was measured at.
fn measured_tokens(profile: &OpProfile, class: OpClass, tp: u32) -> Vec<u64> {
    let Some(first) = profile.series(class.operations()[0], tp) else {
        return Vec::new();
    };
    first
        .points
        .iter()
        .map(|&(t, _)| t)
        .filter(|&t| measured(profile, class, tp, t).is_some())
        .collect()
}

fn load_set(root: &Path, name: &str) -> MeasuredSet {
    MeasuredSet::load(name, &root.join(name)).expect("committed measured set")
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let out_dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/figures"));
    let sets: Vec<MeasuredSet> = SETS.iter().map(|name| load_set(&root, name)).collect();

    per_class_tables(&sets);
    whole_steps(&sets);
    figures(&sets, &out_dir);
}

/// Roofline / measured per class at TP 1 by token count, then the spread over every measured
/// token count at each degree.
fn per_class_tables(sets: &[MeasuredSet]) {
    println!("### Roofline / measured median, tensor parallelism 1\n");
    let header: Vec<String> = COLUMNS.iter().map(|n| n.to_string()).collect();
    println!(
        "| GPU | shape (model) | operations | {} |",
        header.join(" | ")
    );
    println!("|---|---|---|{}", "---|".repeat(COLUMNS.len()));
    for set in sets {
        for profile in &set.ops.profiles {
            let shape = LayerShape::of_profile(profile);
            for class in CLASSES {
                let cells: Vec<String> = COLUMNS
                    .iter()
                    .map(|&n| match measured(profile, class, 1, n) {
                        Some(m) => format!(
                            "{:.2}",
                            roofline_nanos(&set.ops.roofline, class, &shape, 1, n) / m
                        ),
                        None => "-".into(),
                    })
                    .collect();
                println!(
                    "| {} | {} | {} | {} |",
                    set.ops.gpu.name,
                    short_model(profile),
                    class_name(class),
                    cells.join(" | ")
                );
            }
        }
    }
    println!(
        "\n### Roofline / measured median over every measured token count, per degree\n\n\
         | GPU | shape (model) | operations | TP | token counts | min | median | max | \
         within +-20 % |\n|---|---|---|---|---|---|---|---|---|"
    );
    for set in sets {
        for profile in &set.ops.profiles {
            let shape = LayerShape::of_profile(profile);
            for class in CLASSES {
                for tp in profile.tensor_parallel_degrees() {
                    let tokens = measured_tokens(profile, class, tp);
                    if tokens.is_empty() {
                        continue;
                    }
                    let mut ratios: Vec<f64> = tokens
                        .iter()
                        .map(|&n| {
                            roofline_nanos(&set.ops.roofline, class, &shape, tp, n)
                                / measured(profile, class, tp, n).expect("measured count")
                        })
                        .collect();
                    ratios.sort_by(f64::total_cmp);
                    let within = ratios.iter().filter(|r| (0.8..=1.2).contains(*r)).count();
                    println!(
                        "| {} | {} | {} | {tp} | {}-{} ({}) | {:.2} | {:.2} | {:.2} | {:.0} % |",
                        set.ops.gpu.name,
                        short_model(profile),
                        class_name(class),
                        tokens[0],
                        tokens[tokens.len() - 1],
                        tokens.len(),
                        ratios[0],
                        ratios[ratios.len() / 2],
                        ratios[ratios.len() - 1],
                        100.0 * within as f64 / ratios.len() as f64
                    );
                }
            }
        }
    }
}

/// The dense model a Vidur profile measured, from the shape catalogue (the profile's model name
/// after its organisation, e.g. `Meta-Llama-3-8B`).
fn dense_shape_of(profile: &OpProfile) -> DenseModelShape {
    let preset = match short_model(profile) {
        "Llama-2-7b-hf" => "llama-2-7b",
        // Llama-3.1-8B has Llama-3-8B's layers (its RoPE scaling is not in a step's cost).
        "Meta-Llama-3-8B" => "llama-3.1-8b-instruct",
        other => panic!("no catalogue preset for the profiled model {other}"),
    };
    let shape = DenseModelShape::preset(preset).expect("catalogue preset");
    let measured = LayerShape::of_profile(profile);
    assert_eq!(
        (
            shape.hidden,
            shape.intermediate,
            shape.n_heads,
            shape.n_kv_heads
        ),
        (
            measured.hidden,
            measured.ffn,
            measured.n_heads,
            measured.n_kv_heads
        ),
        "{preset} is the profiled shape"
    );
    shape
}

/// The roofline's link between the GPUs of one DGX node, for its all-reduce where the network
/// profile has none: NVLink 3 (A100) 300 GB/s and NVLink 4 (H100) 450 GB/s per direction per
/// GPU (datasheets), a 10 us collective latency as `LinkSpec::PCIE4_X16` assumes.
fn nvlink(gpu: &GpuSpec) -> LinkSpec {
    LinkSpec {
        bandwidth_bytes_per_s: if gpu.name.starts_with("H100") {
            450e9
        } else {
            300e9
        },
        latency_ns: 10_000.0,
    }
}

/// Whole steps: a dense model of each profile's own shape (every GEMM and element-wise kernel
/// measured) and Mixtral-8x7B (experts and attention measured on the A100, scaled elsewhere),
/// built from measured operations, against the roofline's step of the same model. No host
/// overhead on either side.
fn whole_steps(sets: &[MeasuredSet]) {
    let decode = |batch: u64| StepTokens {
        rows: batch,
        sequences: batch,
        context_tokens: batch * 1024,
        prefill_square: 0.0,
    };
    let prefill = |tokens: u64| StepTokens {
        rows: tokens,
        sequences: 1,
        context_tokens: tokens,
        prefill_square: (tokens * tokens) as f64,
    };
    let works: Vec<(String, StepTokens)> = [1u64, 8, 32, 128]
        .iter()
        .map(|&b| (format!("decode {b} x 1024 ctx"), decode(b)))
        .chain(
            [512u64, 2048]
                .iter()
                .map(|&n| (format!("prefill {n}"), prefill(n))),
        )
        .collect();
    println!(
        "\n### Whole dense steps: roofline / built from measured operations\n\n\
         | GPU | model | TP | step | from measured ops (ms) | of which measured | roofline (ms) | \
         roofline / measured-built |\n|---|---|---|---|---|---|---|---|"
    );
    for set in sets {
        for profile in &set.ops.profiles {
            let shape = dense_shape_of(profile);
            for tp in [1u32, 2] {
                let parallel = TensorParallel {
                    degree: tp,
                    link: nvlink(&set.ops.gpu),
                };
                let built = MeasuredDenseStep::new(set, &shape, parallel, 0.0);
                if tp > 1 && set.network.is_none() {
                    continue;
                }
                let roofline = StepRoofline::dense(&shape, set.ops.roofline, parallel, 0.0);
                for (label, work) in &works {
                    let (price, _) = built.price(work);
                    let analytic_parts = shape.n_layers as f64 * roofline.attention(work).nanos()
                        + roofline.head(work.sequences).nanos();
                    let measured_share = 1.0 - analytic_parts / price.nanos;
                    let reference = roofline.price(work).nanos;
                    println!(
                        "| {} | {} | {tp} | {label} | {:.3} | {:.0} % | {:.3} | {:.2} |",
                        set.ops.gpu.name,
                        short_model(profile),
                        price.nanos / 1e6,
                        100.0 * measured_share,
                        reference / 1e6,
                        reference / price.nanos
                    );
                }
            }
        }
    }

    println!(
        "\n### Whole MoE steps (Mixtral-8x7B, one GPU): roofline / built from measured operations\n\n\
         | GPU | experts priced | step | from measured ops (ms) | roofline (ms) | roofline / measured-built |\n\
         |---|---|---|---|---|---|"
    );
    let shape = MoeModelShape::mixtral_8x7b();
    for set in sets {
        let built = moe(set, &shape, 1);
        let analytic = analytic_profile(&set.ops.gpu, &shape);
        let expert_source = built
            .record
            .operations
            .iter()
            .find(|o| o.operation.as_str() == "routed_experts")
            .map(|o| format!("{:?}", o.source).to_lowercase())
            .unwrap_or_default();
        // A step of `rows` rows routed evenly: the `rows x top_k` routed rows spread over
        // min(E, rows x top_k) active experts, run one after another; plus the non-expert part
        // (decode: each sequence over the profile's decode context, 256 cached tokens), times the layers, plus the head.
        let step = |p: &expertsim_scenario::cost::profile::Profile, rows: u64, decode: bool| {
            let expert = &p.expert_ffn[0].curve;
            let routed = (rows * shape.top_k as u64) as f64;
            let active = routed.min(shape.n_experts as f64);
            let (non_expert, head) = if decode {
                (p.non_expert_decode.at(rows as f64), p.head.at(rows as f64))
            } else {
                (p.non_expert_prefill.at(rows as f64), p.head.at(1.0))
            };
            shape.n_layers as f64 * (non_expert + active * expert.at(routed / active)) + head
        };
        for (label, measured_ns, roofline_ns) in [1u64, 8, 32, 128]
            .iter()
            .map(|&b| {
                (
                    format!("decode {b} x {} ctx", built.profile.decode_context_tokens),
                    step(&built.profile, b, true),
                    step(&analytic, b, true),
                )
            })
            .chain([512u64, 2048].iter().map(|&n| {
                (
                    format!("prefill {n}"),
                    step(&built.profile, n, false),
                    step(&analytic, n, false),
                )
            }))
        {
            println!(
                "| {} | {expert_source} | {label} | {:.3} | {:.3} | {:.2} |",
                set.ops.gpu.name,
                measured_ns / 1e6,
                roofline_ns / 1e6,
                roofline_ns / measured_ns
            );
        }
    }
}

/// One panel per (GPU, model, class) at TP 1: the measured medians, the class as the pricing
/// reads it (interpolated inside the measured range, the last measurement times the roofline's
/// growth past it, to 4x the last count), and the roofline; and one panel per GPU of the
/// roofline's ratio to the measured median by class.
fn figures(sets: &[MeasuredSet], out_dir: &Path) {
    let mut staircases = Vec::new();
    let mut errors = Vec::new();
    for set in sets {
        let mut ratio_series = Vec::new();
        for profile in &set.ops.profiles {
            let shape = LayerShape::of_profile(profile);
            for class in CLASSES {
                let tokens = measured_tokens(profile, class, 1);
                let last = tokens[tokens.len() - 1];
                let priced = set.ops.class(class, &shape, 1);
                // A geometric grid, eight points per doubling, to 4x the last measured count.
                let grid: Vec<u64> = (0..=8 * (64 - (4 * last).leading_zeros()))
                    .map(|k| 2f64.powf(f64::from(k) / 8.0).round() as u64)
                    .filter(|&n| n <= 4 * last)
                    .collect::<std::collections::BTreeSet<u64>>()
                    .into_iter()
                    .collect();
                let log2 = |n: u64| (n as f64).log2();
                let us = |ns: f64| ns / 1e3;
                staircases.push(Panel {
                    title: format!(
                        "{} {} {}",
                        set.ops.gpu.name,
                        short_model(profile),
                        class_name(class)
                    ),
                    x_label: "log2(tokens)".into(),
                    y_label: "time (us)".into(),
                    series: vec![
                        Series {
                            label:
                                "imported profile as priced (interpolated; past the range scaled)"
                                    .into(),
                            points: grid
                                .iter()
                                .map(|&n| (log2(n), us(priced.nanos(n))))
                                .collect(),
                            y_err: None,
                        },
                        Series {
                            label: "measured median (Vidur)".into(),
                            points: tokens
                                .iter()
                                .map(|&n| (log2(n), us(measured(profile, class, 1, n).unwrap())))
                                .collect(),
                            y_err: None,
                        },
                        Series {
                            label: "roofline".into(),
                            points: grid
                                .iter()
                                .map(|&n| {
                                    (
                                        log2(n),
                                        us(roofline_nanos(&set.ops.roofline, class, &shape, 1, n)),
                                    )
                                })
                                .collect(),
                            y_err: None,
                        },
                    ],
                    log_y: true,
                });
                ratio_series.push(Series {
                    label: format!("{} {}", short_model(profile), class_name(class)),
                    points: tokens
                        .iter()
                        .map(|&n| {
                            (
                                log2(n),
                                roofline_nanos(&set.ops.roofline, class, &shape, 1, n)
                                    / measured(profile, class, 1, n).unwrap(),
                            )
                        })
                        .collect(),
                    y_err: None,
                });
            }
        }
        errors.push(Panel {
            title: format!("{}, tensor parallelism 1", set.ops.gpu.name),
            x_label: "log2(tokens)".into(),
            y_label: "roofline / measured median".into(),
            series: ratio_series,
            log_y: true,
        });
    }
    let written = figures::render(
        &Figure {
            title: "Measured kernels (Vidur) vs the imported profile's pricing vs the roofline"
                .into(),
            panels: staircases,
            columns: 3,
        },
        &out_dir.join("vidur_kernels"),
    )
    .expect("figure renders");
    let more = figures::render(
        &Figure {
            title: "Roofline / measured median by token count".into(),
            panels: errors,
            columns: 3,
        },
        &out_dir.join("vidur_roofline_error"),
    )
    .expect("figure renders");
    for path in written.iter().chain(&more) {
        eprintln!("wrote {}", path.display());
    }
}
