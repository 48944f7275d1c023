//! Where every GPU's kernel-model rates come from (`profiles/rates.json`): fitted to the
//! measured files under `profiles/` where a GPU was measured, the datasheet times the measured
//! GPUs' median efficiency where it was not. The fits minimise the sum of squared log errors
//! (time predicted over time measured) by Nelder-Mead from datasheet starting points:
//!
//! - H200 (`profiles/h200/kernels.json`): the floor, streaming and GEMM rates, reduction
//!   latency, grouped GEMM streaming and math rates and per-group tail, for each p-norm p in
//!   {1, 2, 4, 8} (the best p kept), on the Mixtral-8x7B and Llama-2-7B points only (dense
//!   GEMMs CUDA-graph timed, grouped GEMMs); the host launch from those rows' eager calls (the
//!   geometric mean of the fastest call and the median host-bound call, two bounds that
//!   disagree). Qwen1.5-MoE and attention points are not fitted: docs/fidelity.md reports them
//!   apart.
//! - A100, H100, A40 (`profiles/vidur/<gpu>/`): streaming and GEMM rates on every measured MLP
//!   and attention-projection point (all tensor-parallel degrees), then the kernel floor on the
//!   element-wise kernels; the shape constants (reduction latency, p, grouped ratios) are the
//!   H200's.
//!
//! `EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost committed_rates` rewrites the file;
//! the test holds the committed file to this derivation.

use crate::gpu::{GPU_NAMES, GpuSpec};
use crate::kernel::Timing;
use crate::kernel::{GpuRatesEntry, GroupSums, KernelRates, RatesFile};
use crate::kernel_timings::KernelTimings;
use crate::measured_ops::{LayerShape, OpClass, class_kernels};
use crate::op_profile::OpProfile;
use std::path::Path;

/// Nelder-Mead on `f` from `x0` with initial steps `step`: reflection 1, expansion 2,
/// contraction and shrink 1/2, `iterations` at most. Deterministic.
pub fn nelder_mead(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: &[f64],
    iterations: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut points: Vec<Vec<f64>> = vec![x0.to_vec()];
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step[i];
        points.push(x);
    }
    let mut values: Vec<f64> = points.iter().map(|p| f(p)).collect();
    for _ in 0..iterations {
        let mut order: Vec<usize> = (0..=n).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        points = order.iter().map(|&i| points[i].clone()).collect();
        values = order.iter().map(|&i| values[i]).collect();
        if (values[n] - values[0]).abs() <= 1e-12 * values[0].abs().max(1e-300) {
            break;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|i| points[..n].iter().map(|p| p[i]).sum::<f64>() / n as f64)
            .collect();
        let towards = |t: f64| -> Vec<f64> {
            (0..n)
                .map(|i| centroid[i] + t * (centroid[i] - points[n][i]))
                .collect()
        };
        let reflected = towards(1.0);
        let fr = f(&reflected);
        if fr < values[0] {
            let expanded = towards(2.0);
            let fe = f(&expanded);
            if fe < fr {
                points[n] = expanded;
                values[n] = fe;
            } else {
                points[n] = reflected;
                values[n] = fr;
            }
        } else if fr < values[n - 1] {
            points[n] = reflected;
            values[n] = fr;
        } else {
            let contracted = towards(-0.5);
            let fc = f(&contracted);
            if fc < values[n] {
                points[n] = contracted;
                values[n] = fc;
            } else {
                for j in 1..=n {
                    points[j] = (0..n)
                        .map(|i| points[0][i] + 0.5 * (points[j][i] - points[0][i]))
                        .collect();
                    values[j] = f(&points[j]);
                }
            }
        }
    }
    let best = (0..=n)
        .min_by(|&a, &b| values[a].total_cmp(&values[b]))
        .expect("a simplex has points");
    (points[best].clone(), values[best])
}

/// Nelder-Mead twice: from `x0`, then restarted from the first result with a tenth of the steps.
fn minimise(f: &dyn Fn(&[f64]) -> f64, x0: &[f64], step: &[f64]) -> (Vec<f64>, f64) {
    let (x, _) = nelder_mead(f, x0, step, 6000);
    let small: Vec<f64> = step.iter().map(|s| s / 10.0).collect();
    nelder_mead(f, &x, &small, 6000)
}

/// The p-norms tried (powers of two keep the combine to square roots).
pub const OVERLAP_NORMS: [u32; 4] = [1, 2, 4, 8];

/// Softmax exponentials per SM per clock (compute capability 8.x, 9.x special-function units).
const EXP_PER_SM_PER_CLOCK: f64 = 16.0;

fn exp_rate(gpu: &GpuSpec) -> f64 {
    f64::from(gpu.sm_count) * EXP_PER_SM_PER_CLOCK * gpu.boost_clock_mhz * 1e6
}

/// The models whose points the H200 fit reads; the others are predicted, not fitted.
pub const FITTED_MODELS: [&str; 2] = ["mixtral-8x7b", "llama-2-7b"];

/// The H200's rates from `set` and the lines saying where each comes from.
pub fn fit_kernel_timings(set: &KernelTimings, gpu: &GpuSpec) -> (KernelRates, Vec<String>) {
    let fitted = |m: &str| FITTED_MODELS.contains(&m);
    let gemms: Vec<_> = set
        .gemm
        .iter()
        .filter(|p| fitted(&p.model) && p.timing == Timing::Graph)
        .collect();
    let grouped: Vec<(GroupSums, u64, u64, f64)> = set
        .grouped
        .iter()
        .filter(|p| fitted(&p.model))
        .map(|p| {
            (
                GroupSums::of_counts(&p.rows_per_expert),
                p.hidden,
                p.expert_ffn,
                p.median_us * 1e3,
            )
        })
        .collect();
    let rates_of = |x: &[f64], p: u32| KernelRates {
        kernel_floor_ns: x[0] * 1e3,
        stream_bytes_per_s: x[1] * 1e12,
        gemm_flops: x[2] * 1e12,
        reduction_ns_per_element: x[3],
        grouped_stream_bytes_per_s: x[4] * 1e12,
        grouped_gemm_flops: x[5] * 1e12,
        group_tail_tiles: x[6],
        overlap_norm: p,
        host_launch_ns: 0.0,
        exp_per_s: exp_rate(gpu),
        sms: gpu.sm_count,
    };
    let loss = |x: &[f64], p: u32| {
        if x.iter().any(|v| !(v.is_finite() && *v >= 0.0))
            || x[1] <= 0.0
            || x[2] <= 0.0
            || x[4] <= 0.0
            || x[5] <= 0.0
        {
            return f64::INFINITY;
        }
        let r = rates_of(x, p);
        let mut sum = 0.0;
        for g in &gemms {
            let e = (r.gemm(g.tokens, g.k, g.n, 2.0).nanos / (g.median_us * 1e3)).ln();
            sum += e * e;
        }
        for (sums, h, f, ns) in &grouped {
            let t = r.grouped_gemm(sums, *h, 2 * f, 2.0).nanos
                + r.grouped_gemm(sums, *f, *h, 2.0).nanos;
            let e = (t / ns).ln();
            sum += e * e;
        }
        sum
    };
    let bw = gpu.memory_bandwidth_gbps / 1e3;
    let peak = gpu.dense_bf16_tflops;
    let start = [5.0, 0.8 * bw, 0.6 * peak, 0.3, 0.4 * bw, 0.6 * peak, 0.2];
    let steps = [1.0, 0.1 * bw, 0.05 * peak, 0.1, 0.05 * bw, 0.05 * peak, 0.1];
    let (mut best, mut best_p, mut best_loss) = (start.to_vec(), 1, f64::INFINITY);
    for p in OVERLAP_NORMS {
        let (x, l) = minimise(&|x: &[f64]| loss(x, p), &start, &steps);
        if l < best_loss {
            (best, best_p, best_loss) = (x, p, l);
        }
    }
    let mut rates = rates_of(&best, best_p);
    // The host's launch of one eager call is bounded by the fitting rows from both sides, and
    // the two bounds disagree: no eager call is faster than its launch, so the fastest one
    // bounds it from above; calls whose CUDA-graph kernel takes under half their eager time are
    // host-bound and give it from below (their median). We take the geometric mean.
    let eager: Vec<_> = set
        .gemm
        .iter()
        .filter(|p| fitted(&p.model) && p.timing == Timing::Eager)
        .collect();
    let fastest = eager
        .iter()
        .map(|p| p.median_us * 1e3)
        .fold(f64::INFINITY, f64::min);
    let host_bound: Vec<f64> = eager
        .iter()
        .filter(|e| {
            gemms.iter().any(|g| {
                (&g.model, &g.op, g.tokens) == (&e.model, &e.op, e.tokens)
                    && g.median_us < 0.5 * e.median_us
            })
        })
        .map(|e| e.median_us * 1e3)
        .collect();
    let slowest = median(host_bound.clone());
    let host = (fastest * slowest).sqrt();
    rates.host_launch_ns = host;
    let n = gemms.len() + grouped.len();
    let fit = format!(
        "fitted jointly on the {n} Mixtral-8x7B and Llama-2-7B points of profiles/h200/kernels.json ({} dense GEMMs, CUDA-graph timed; {} grouped GEMMs): Nelder-Mead on the sum of squared log errors ({best_loss:.4}), p tried in {OVERLAP_NORMS:?}",
        gemms.len(),
        grouped.len()
    );
    let derivation = vec![
        format!(
            "stream_bytes_per_s, gemm_flops, kernel_floor_ns, reduction_ns_per_element, grouped_stream_bytes_per_s, grouped_gemm_flops, group_tail_tiles, overlap_norm: {fit}"
        ),
        format!(
            "host_launch_ns: the fastest eager call among those rows (an eager call takes at least its launch): {:.0} ns",
            host
        ),
        format!(
            "exp_per_s: {} SMs x 16 per clock x {} MHz (datasheet)",
            gpu.sm_count, gpu.boost_clock_mhz
        ),
    ];
    (rates, derivation)
}

/// A measured op profile's classes at every measured point: (class, shape, degree, tokens, ns).
type ClassPoint = (OpClass, LayerShape, u32, u64, f64);

fn class_points(profiles: &[OpProfile]) -> Vec<ClassPoint> {
    let mut out = Vec::new();
    for profile in profiles {
        let shape = LayerShape::of_profile(profile);
        for tp in profile.tensor_parallel_degrees() {
            for class in [
                OpClass::Mlp,
                OpClass::AttentionProjections,
                OpClass::Elementwise,
            ] {
                for (tokens, ns) in class.measured_totals(profile, tp) {
                    out.push((class, shape, tp, tokens, ns));
                }
            }
        }
    }
    out
}

/// A Vidur GPU's rates: streaming and GEMM rates on its MLP and projection points, then its
/// kernel floor on its element-wise points; the shape constants from `h200`.
pub fn fit_op_profiles(
    profiles: &[OpProfile],
    gpu: &GpuSpec,
    h200: &KernelRates,
    folder: &str,
) -> (KernelRates, Vec<String>) {
    let points = class_points(profiles);
    let (gemm_points, elementwise): (Vec<_>, Vec<_>) =
        points.iter().partition(|p| p.0 != OpClass::Elementwise);
    let h200_gpu = GpuSpec::by_name("H200").expect("the H200 is in the catalogue");
    let base = KernelRates {
        exp_per_s: exp_rate(gpu),
        sms: gpu.sm_count,
        host_launch_ns: gpu.kernel_launch_overhead_ns,
        ..*h200
    };
    let rates_of = |bw: f64, peak: f64, floor: f64| KernelRates {
        stream_bytes_per_s: bw * 1e12,
        gemm_flops: peak * 1e12,
        grouped_stream_bytes_per_s: bw * 1e12 * h200.grouped_stream_bytes_per_s
            / h200.stream_bytes_per_s,
        grouped_gemm_flops: peak * 1e12 * h200.grouped_gemm_flops / h200.gemm_flops,
        kernel_floor_ns: floor,
        ..base
    };
    let loss = |rates: &KernelRates, pts: &[&ClassPoint]| {
        pts.iter()
            .map(|(class, shape, tp, tokens, ns)| {
                let t: f64 = class_kernels(rates, *class, shape, *tp, *tokens)
                    .iter()
                    .map(|k| k.nanos)
                    .sum();
                let e = (t / ns).ln();
                e * e
            })
            .sum::<f64>()
    };
    let bw0 = 0.8 * gpu.memory_bandwidth_gbps / 1e3;
    let peak0 = 0.6 * gpu.dense_bf16_tflops;
    let ((bw, peak), l1) = {
        let f = |x: &[f64]| {
            if x[0] <= 0.0 || x[1] <= 0.0 {
                return f64::INFINITY;
            }
            loss(&rates_of(x[0], x[1], h200.kernel_floor_ns), &gemm_points)
        };
        let (x, l) = minimise(&f, &[bw0, peak0], &[0.1 * bw0, 0.1 * peak0]);
        ((x[0], x[1]), l)
    };
    let (floor, l2) = {
        let f = |x: &[f64]| {
            if x[0] < 0.0 {
                return f64::INFINITY;
            }
            loss(&rates_of(bw, peak, x[0] * 1e3), &elementwise)
        };
        let (x, l) = minimise(&f, &[h200.kernel_floor_ns / 1e3], &[1.0]);
        (x[0] * 1e3, l)
    };
    let _ = h200_gpu;
    let derivation = vec![
        format!(
            "stream_bytes_per_s, gemm_flops: fitted on the {} MLP and attention-projection points of profiles/{folder}/ (every degree): Nelder-Mead on the sum of squared log errors ({l1:.3}), the H200's floor and shape constants held",
            gemm_points.len()
        ),
        format!(
            "kernel_floor_ns: fitted on the {} element-wise points of profiles/{folder}/ ({l2:.3})",
            elementwise.len()
        ),
        "grouped_stream_bytes_per_s, grouped_gemm_flops: the H200's ratios to its streaming and GEMM rates; reduction_ns_per_element, group_tail_tiles, overlap_norm: the H200's".into(),
        format!("host_launch_ns: not measured; the catalogue's assumption ({:.0} ns)", gpu.kernel_launch_overhead_ns),
        format!("exp_per_s: {} SMs x 16 per clock x {} MHz (datasheet)", gpu.sm_count, gpu.boost_clock_mhz),
    ];
    (rates_of(bw, peak, floor), derivation)
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

/// The Vidur folders and their GPUs.
const VIDUR_SETS: [(&str, &str); 3] = [
    ("vidur/a100", "A100-80GB"),
    ("vidur/h100", "H100-SXM"),
    ("vidur/a40", "A40"),
];

/// Every catalogue GPU's rates from the measured files under `profiles_dir`.
pub fn derive_rates(profiles_dir: &Path) -> RatesFile {
    let h200 = GpuSpec::by_name("H200").expect("the H200 is in the catalogue");
    let set = KernelTimings::load(&profiles_dir.join("h200/kernels.json"))
        .expect("profiles/h200/kernels.json loads");
    let (h200_rates, h200_lines) = fit_kernel_timings(&set, &h200);
    let mut entries = vec![GpuRatesEntry {
        gpu: h200.name.clone(),
        rates: h200_rates,
        source: "measured (profiles/h200/kernels.json)".into(),
        derivation: h200_lines,
    }];
    for (folder, name) in VIDUR_SETS {
        let gpu = GpuSpec::by_name(name).expect("Vidur's GPUs are in the catalogue");
        let mut files: Vec<_> = std::fs::read_dir(profiles_dir.join(folder))
            .expect("a Vidur folder")
            .map(|e| e.expect("a folder entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        let profiles: Vec<OpProfile> = files
            .iter()
            .map(|p| OpProfile::load(p).expect("a committed op profile"))
            .collect();
        let (rates, lines) = fit_op_profiles(&profiles, &gpu, &h200_rates, folder);
        entries.push(GpuRatesEntry {
            gpu: gpu.name.clone(),
            rates,
            source: format!("measured (profiles/{folder}/, Vidur)"),
            derivation: lines,
        });
    }
    let efficiency = |f: &dyn Fn(&GpuRatesEntry, &GpuSpec) -> f64| {
        median(
            entries
                .iter()
                .map(|e| f(e, &GpuSpec::by_name(&e.gpu).expect("a catalogue GPU")))
                .collect(),
        )
    };
    let eta_stream = efficiency(&|e, g| e.rates.stream_bytes_per_s / g.peak_bandwidth());
    let eta_gemm = efficiency(&|e, g| e.rates.gemm_flops / g.peak_flops());
    let floor = median(entries.iter().map(|e| e.rates.kernel_floor_ns).collect());
    let measured: Vec<String> = entries.iter().map(|e| e.gpu.clone()).collect();
    for name in GPU_NAMES {
        if measured.iter().any(|m| m == name) {
            continue;
        }
        let gpu = GpuSpec::by_name(name).expect("listed GPUs exist");
        let rates = KernelRates {
            stream_bytes_per_s: gpu.peak_bandwidth() * eta_stream,
            gemm_flops: gpu.peak_flops() * eta_gemm,
            grouped_stream_bytes_per_s: gpu.peak_bandwidth()
                * eta_stream
                * h200_rates.grouped_stream_bytes_per_s
                / h200_rates.stream_bytes_per_s,
            grouped_gemm_flops: gpu.peak_flops() * eta_gemm * h200_rates.grouped_gemm_flops
                / h200_rates.gemm_flops,
            kernel_floor_ns: floor,
            host_launch_ns: gpu.kernel_launch_overhead_ns,
            exp_per_s: exp_rate(&gpu),
            sms: gpu.sm_count,
            ..h200_rates
        };
        entries.push(GpuRatesEntry {
            gpu: gpu.name.clone(),
            rates,
            source: "datasheet x efficiency".into(),
            derivation: vec![
                format!("stream_bytes_per_s: datasheet {} GB/s x {eta_stream:.4}, the median over the measured GPUs ({}) of streaming rate / datasheet", gpu.memory_bandwidth_gbps, measured.join(", ")),
                format!("gemm_flops: datasheet {} TFLOP/s x {eta_gemm:.4}, the median over the measured GPUs of GEMM rate / datasheet", gpu.dense_bf16_tflops),
                format!("kernel_floor_ns: the median over the measured GPUs ({floor:.0} ns)"),
                "grouped_stream_bytes_per_s, grouped_gemm_flops: the H200's ratios; reduction_ns_per_element, group_tail_tiles, overlap_norm: the H200's".into(),
                format!("host_launch_ns: not measured; the catalogue's assumption ({:.0} ns)", gpu.kernel_launch_overhead_ns),
                if gpu.boost_clock_mhz > 0.0 {
                    format!("exp_per_s: {} SMs x 16 per clock x {} MHz (datasheet)", gpu.sm_count, gpu.boost_clock_mhz)
                } else {
                    "exp_per_s: 0 (no published clock: exponentials not modelled)".into()
                },
            ],
        });
    }
    entries.sort_by_key(|e| GPU_NAMES.iter().position(|n| *n == e.gpu));
    RatesFile {
        format_version: 1,
        note: "every catalogue GPU's kernel-model rates, derived by expertsim_cost::fit from the measured files under profiles/ (docs/cost-model.md, \"The kernel model\"); regenerate with EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost committed_rates".into(),
        gpus: entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let f = |x: &[f64]| (x[0] - 3.0).powi(2) + 10.0 * (x[1] + 1.0).powi(2);
        let (x, v) = minimise(&f, &[0.0, 0.0], &[1.0, 1.0]);
        assert!(
            (x[0] - 3.0).abs() < 1e-5 && (x[1] + 1.0).abs() < 1e-5 && v < 1e-9,
            "{x:?}"
        );
    }

    /// The committed `profiles/rates.json` is what the fit derives from the committed measured
    /// files. Regenerate with `EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost
    /// committed_rates`.
    #[test]
    fn committed_rates_match_the_fit() {
        let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let derived = derive_rates(&profiles);
        let path = profiles.join("rates.json");
        if std::env::var_os("EXPERTSIM_UPDATE_PROFILES").is_some_and(|v| v == "1") {
            std::fs::write(&path, derived.to_json()).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap();
        assert!(
            committed == derived.to_json(),
            "profiles/rates.json differs from the fit; regenerate with EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost committed_rates"
        );
        // Every catalogue GPU has rates, each positive.
        for name in GPU_NAMES {
            let e = derived.entry(name).unwrap();
            assert!(
                e.rates.stream_bytes_per_s > 0.0
                    && e.rates.gemm_flops > 0.0
                    && e.rates.kernel_floor_ns >= 0.0,
                "{name}"
            );
        }
    }
}
