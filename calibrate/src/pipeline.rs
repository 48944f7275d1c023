//! The calibration pipeline: what is measured, at which counts, and how the measurements
//! become a profile. Every series is timed on the same backend with the same warm-up and
//! stopping rule (`adaptive`: repeat until the median is known to a stated precision, or a
//! fixed count); the profile's curves hold medians, its `calibration` section every point with
//! its spread and repetitions. The workloads are `bench`'s.
//!
//! - `expert_ffn`: the whole MoE layer (grouping, gate/up, SiLU x up, down, combine) with all
//!   tokens routed to one expert of the model's size, at the tile-rule token counts;
//! - `expert_gemm/{w13,w2}`: the expert's two GEMMs alone at the same counts; with
//!   `expert_ffn` they split the layer by mechanism (the profile's `expert_ffn[0].split`): its
//!   fixed part `expert_ffn - (w13 + w2)`, launched once per layer, and each active expert's
//!   GEMM pair `w13 + w2`;
//! - `non_expert_prefill`: the layer's dense matmul weights as one GEMM (`hidden` ->
//!   dense parameters / `hidden`) over the tokens of a pass, at the same counts;
//! - `non_expert_decode`: that GEMM plus attention over `decode_context` cached tokens, vs batch;
//! - `head`: the output projection GEMM (`hidden` -> `vocab`), vs batch;
//! - `decode_step`: derived: `n_layers x (non_expert_decode(b) + layer(b))` + head(b)`, the
//!   layer being its fixed part at `b x top_k` assignments plus `min(b x top_k, n_experts)`
//!   GEMM pairs at the even load `b x top_k / n_experts` (at least one row);
//! - `decode_step/context=C` (measurements only): the decode kernels at other contexts;
//! - `dense_gemm/out=W` (measurements only, `--gemm-widths`): one GEMM `hidden -> W` alone
//!   at the prefill counts (ExpertWeave's layers and head at their own widths);
//! - `reroute/{fused,unfused}/adapters=A` (measurements only): batched rerouting vs tokens.

use crate::adaptive::{Stop, StoppingRule};
use crate::bench::{Bench, ExpertGemm, Series};
use crate::progress::Progress;
use expertsim_scenario::cost::curve::{CostCurve, CurveError};
use expertsim_scenario::cost::profile::{
    Calibration, ExpertExecution, ExpertFfnCurve, MeasuredProfile, Measurement, MoeLayerSplit,
    PROFILE_FORMAT_VERSION, Profile, ProfileSource, SourceKind, StoppingRecord, decode_step_nanos,
};
use expertsim_scenario::cost::sampling::{batch_points, steps, token_points};
use expertsim_scenario::cost::shape::{MoeModelShape, WeightDtype};
use kernels::KernelInputError;
use kernels::backend::{Backend, BackendError, BackendKind};
use kernels::moe::check_tile_tokens;
use kernels::reroute::RerouteVariant;
use std::time::Instant;

/// Limits on every count, so that a typo cannot ask for terabytes.
pub const MAX_COUNT: usize = 1 << 20;

/// What to measure and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub tile: usize,
    pub dense_limit: usize,
    pub sparse_step: usize,
    pub sparse_limit: usize,
    pub max_batch: usize,
    /// Batch sizes of the output head (the full batch rule unless trimmed).
    pub head_batches: Option<Vec<usize>>,
    pub decode_context: usize,
    /// Further contexts for the decode-vs-context measurements.
    pub contexts: Vec<usize>,
    pub context_batches: Vec<usize>,
    pub reroute_tokens: Vec<usize>,
    pub adapters: Vec<usize>,
    /// The dense and head series measure one GPU's shard at this tensor-parallel degree.
    pub tensor_parallel: usize,
    /// Output widths of further GEMMs over `hidden`, each measured alone at the prefill
    /// series' token counts (`dense_gemm/out=W`).
    pub gemm_widths: Vec<usize>,
    pub warmup: usize,
    /// When a point has been repeated enough.
    pub stopping: StoppingRule,
    pub seed: u64,
    pub quick: bool,
}

impl Plan {
    /// The full calibration: GEM's tile rule (64-token tiles to 4096, every 1024 to 16384),
    /// each point repeated until its median is known to 2 % at 95 % (at most 500 repetitions,
    /// GEM's fixed count). The decode-vs-context measurements (used by no curve) stop at a
    /// 4096-token context and 32 sequences: 32 x 4096 cached tokens are already a 1 GB KV cache
    /// for Qwen1.5-MoE, generated on the host and uploaded for every batch of repetitions.
    pub fn full() -> Plan {
        Plan {
            tile: 64,
            dense_limit: 4096,
            sparse_step: 1024,
            sparse_limit: 16_384,
            max_batch: 256,
            head_batches: None,
            decode_context: 256,
            contexts: vec![1024, 4096],
            context_batches: vec![1, 8, 32],
            reroute_tokens: vec![1, 16, 64, 256, 1024, 4096, 16_384],
            adapters: vec![1, 5, 10, 20],
            tensor_parallel: 1,
            gemm_widths: vec![],
            warmup: 10,
            stopping: StoppingRule::default(),
            seed: 42,
            quick: false,
        }
    }

    /// A smoke run of the whole pipeline in seconds on a CPU: 4-token tiles to 8 tokens, one
    /// repetition, the output head at two batch sizes, no extra contexts.
    pub fn quick() -> Plan {
        Plan {
            tile: 4,
            dense_limit: 8,
            sparse_step: 0,
            sparse_limit: 0,
            max_batch: 8,
            head_batches: Some(vec![1, 5]),
            decode_context: 256,
            contexts: vec![],
            context_batches: vec![],
            reroute_tokens: vec![1, 64, 1024],
            adapters: vec![1, 4],
            tensor_parallel: 1,
            gemm_widths: vec![],
            warmup: 0,
            stopping: StoppingRule::fixed(1),
            seed: 42,
            quick: true,
        }
    }

    /// Checks every knob; the error names the flag.
    pub fn validate(&self) -> Result<(), CalibrateError> {
        let bad = |flag: &str, problem: String| {
            Err(CalibrateError::Input(format!("--{flag}: {problem}")))
        };
        check_tile_tokens(self.tile).map_err(|e| CalibrateError::Input(format!("--tile: {e}")))?;
        self.stopping.check().map_err(CalibrateError::Input)?;
        if self.warmup > MAX_COUNT || self.stopping.max_repetitions > MAX_COUNT {
            return bad("repetitions", format!("at most {MAX_COUNT}"));
        }
        if self.dense_limit < self.tile {
            return bad(
                "dense-limit",
                format!("{} is below one tile ({})", self.dense_limit, self.tile),
            );
        }
        let counts = [
            ("dense-limit", self.dense_limit),
            ("sparse-limit", self.sparse_limit),
            ("max-batch", self.max_batch),
            ("decode-context", self.decode_context),
        ];
        for (flag, value) in counts {
            if value > MAX_COUNT {
                return bad(flag, format!("{value} exceeds {MAX_COUNT}"));
            }
        }
        if self.max_batch == 0 || self.decode_context == 0 {
            return bad(
                "max-batch",
                "max batch and decode context must be at least 1".into(),
            );
        }
        for (flag, list) in [
            ("contexts", &self.contexts),
            ("context-batches", &self.context_batches),
            ("reroute-tokens", &self.reroute_tokens),
            ("adapters", &self.adapters),
            ("gemm-widths", &self.gemm_widths),
        ] {
            if let Some(v) = list.iter().find(|v| **v == 0 || **v > MAX_COUNT) {
                return bad(flag, format!("{v} is not in 1..={MAX_COUNT}"));
            }
        }
        if self.tensor_parallel == 0 || self.tensor_parallel > 64 {
            return bad(
                "tensor-parallel",
                format!("{} is not in 1..=64", self.tensor_parallel),
            );
        }
        if !self.contexts.is_empty() && self.context_batches.is_empty() {
            return bad("context-batches", "needed when --contexts is given".into());
        }
        Ok(())
    }
}

/// Why calibration stopped.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("measured series {name} is not a valid cost curve: {source}")]
    Curve { name: String, source: CurveError },
}

impl From<KernelInputError> for CalibrateError {
    fn from(e: KernelInputError) -> Self {
        CalibrateError::Backend(BackendError::Input(e))
    }
}

/// Every series `plan` measures with its `x` values (increasing), in measuring order.
pub fn schedule(plan: &Plan) -> Vec<(Series, Vec<usize>)> {
    let sorted = |v: &[usize]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    };
    let tokens = token_points(
        plan.tile,
        plan.dense_limit,
        plan.sparse_step,
        plan.sparse_limit,
    );
    let batches = batch_points(plan.tile, plan.max_batch);
    let mut series = vec![(Series::ExpertFfn, tokens.clone())];
    for gemm in [ExpertGemm::W13, ExpertGemm::W2] {
        series.push((Series::ExpertGemm(gemm), tokens.clone()));
    }
    series.push((Series::NonExpertPrefill, tokens.clone()));
    for &width in &sorted(&plan.gemm_widths) {
        series.push((Series::DenseGemm(width), tokens.clone()));
    }
    series.push((Series::NonExpertDecode, batches.clone()));
    for &context in &plan.contexts {
        series.push((
            Series::DecodeAtContext(context),
            sorted(&plan.context_batches),
        ));
    }
    let head = plan.head_batches.as_deref().map(sorted).unwrap_or(batches);
    series.push((Series::Head, head));
    for &adapters in &plan.adapters {
        for variant in [RerouteVariant::Fused, RerouteVariant::Unfused] {
            series.push((
                Series::Reroute { variant, adapters },
                sorted(&plan.reroute_tokens),
            ));
        }
    }
    series
}

/// The MoE layer split by mechanism from its three measured series at the same token counts:
/// each expert's GEMM pair `w13 + w2`, and the fixed part `layer - (w13 + w2)` (at least 0: on a
/// noisy device the difference of two medians can dip below zero where the fixed part is tiny,
/// as on the CPU references).
fn layer_split(
    layer: &CostCurve,
    w13: &CostCurve,
    w2: &CostCurve,
) -> Result<MoeLayerSplit, CalibrateError> {
    let (mut fixed, mut gemms) = (Vec::new(), Vec::new());
    for (x, whole) in layer.samples() {
        let pair = w13.at(x) + w2.at(x);
        gemms.push((x, pair));
        fixed.push((x, (whole - pair).max(0.0)));
    }
    let curve = |name: &str, points| {
        CostCurve::new(points).map_err(|source| CalibrateError::Curve {
            name: name.into(),
            source,
        })
    };
    Ok(MoeLayerSplit {
        fixed: curve("expert_ffn.split.fixed", fixed)?,
        expert_gemms: curve("expert_ffn.split.expert_gemms", gemms)?,
    })
}

/// The layer's dense part as a GEMM: output features so that `hidden x out` covers the
/// layer's matmul parameters.
pub fn dense_out_features(shape: &MoeModelShape) -> usize {
    (shape.dense_matmul_params_per_layer() as usize).div_ceil(shape.hidden)
}

fn curve_of(name: &str, points: &[[f64; 6]]) -> Result<CostCurve, CalibrateError> {
    CostCurve::new(points.iter().map(|p| (p[0], p[1])).collect()).map_err(|source| {
        CalibrateError::Curve {
            name: name.to_string(),
            source,
        }
    })
}

/// Measures everything in `plan` for `shape` and returns the profile. `log` gets one line
/// per finished series with the points done, the time spent and the estimated time left; with
/// `draw_bar` a progress bar shows the same on a terminal.
pub fn calibrate(
    backend: &mut dyn Backend,
    shape: &MoeModelShape,
    plan: &Plan,
    log: &mut dyn FnMut(&str),
    draw_bar: bool,
) -> Result<MeasuredProfile, CalibrateError> {
    let started = Instant::now();
    plan.validate()?;
    shape
        .validate()
        .map_err(|e| CalibrateError::Input(e.to_string()))?;
    if shape.weight_dtype != WeightDtype::Bf16 || shape.lm_head_dtype != WeightDtype::Bf16 {
        return Err(CalibrateError::Input(format!(
            "the kernels store weights in bf16, but model {} has {} block weights and a {} head; \
             calibrate its bf16 variant",
            shape.name, shape.weight_dtype, shape.lm_head_dtype
        )));
    }
    let mut bench = Bench::new(shape, plan.tile, plan.decode_context, plan.seed)
        .with_tensor_parallel(plan.tensor_parallel);
    let schedule = schedule(plan);
    let points_total = schedule.iter().map(|(_, xs)| xs.len()).sum();
    let work_total = schedule
        .iter()
        .flat_map(|(series, xs)| xs.iter().map(|&x| bench.work(series, x)))
        .sum();
    let mut progress = Progress::new(points_total, work_total, draw_bar);
    let mut measurements = Vec::new();
    let (mut total_repetitions, mut at_maximum) = (0u64, 0u32);
    for (series, xs) in &schedule {
        let name = series.name();
        let mut points = Vec::with_capacity(xs.len());
        let mut repetitions = Vec::with_capacity(xs.len());
        for &x in xs {
            let timed = bench.time(backend, series, x, plan.warmup, &plan.stopping);
            let timed = timed.inspect_err(|_| progress.finish())?;
            total_repetitions += timed.repetitions as u64;
            at_maximum += u32::from(timed.stop == Stop::Maximum && !plan.stopping.is_fixed());
            points.push(timed.row);
            repetitions.push(timed.repetitions as u32);
            progress.point_done(bench.work(series, x), &format!("{name} at {x}"));
        }
        curve_of(&name, &points)?;
        let line = format!(
            "{name}: {} points, {} repetitions ({})",
            points.len(),
            repetitions.iter().map(|&r| u64::from(r)).sum::<u64>(),
            progress.summary()
        );
        progress.println(&line, log);
        measurements.push(Measurement {
            name,
            x: series.x_label().into(),
            points,
            repetitions: (!plan.stopping.is_fixed()).then_some(repetitions),
        });
    }
    progress.finish();
    let series_curve = |series: Series| {
        let name = series.name();
        let m = measurements
            .iter()
            .find(|m| m.name == name)
            .expect("every plan measures the four step series");
        curve_of(&name, &m.points)
    };
    let expert = series_curve(Series::ExpertFfn)?;
    let split = layer_split(
        &expert,
        &series_curve(Series::ExpertGemm(ExpertGemm::W13))?,
        &series_curve(Series::ExpertGemm(ExpertGemm::W2))?,
    )?;
    let non_expert_prefill = series_curve(Series::NonExpertPrefill)?;
    let non_expert_decode = series_curve(Series::NonExpertDecode)?;
    let head = series_curve(Series::Head)?;

    let medians: Vec<(f64, f64)> = expert.samples().collect();
    let at_boundaries = steps(&medians, 0.02 * medians[0].1)
        .into_iter()
        .filter(|&x| x as usize % plan.tile == 0)
        .count();
    log(&format!(
        "expert_ffn: the median jumps by over 2 % at {at_boundaries} of the {} sampled tile boundaries",
        (plan.dense_limit / plan.tile).saturating_sub(1)
    ));

    // The whole decode step, derived from the measured curves: per layer its fixed part once
    // and the GEMM pairs of the experts an even spread of the batch's assignments reaches.
    let decode_samples = batch_points(plan.tile, plan.max_batch)
        .iter()
        .map(|&b| {
            let nanos =
                decode_step_nanos(shape, b as u64, &non_expert_decode, &head, |assignments| {
                    let active = assignments.min(shape.n_experts as u64);
                    let even_load = (assignments as f64 / active as f64).max(1.0);
                    split.fixed.at(assignments as f64)
                        + active as f64 * split.expert_gemms.at(even_load)
                });
            (b as f64, nanos)
        })
        .collect();
    let decode_step = CostCurve::new(decode_samples).map_err(|source| CalibrateError::Curve {
        name: "decode_step".into(),
        source,
    })?;

    // The timing as it was in the end (a CUDA backend that could not capture a graph says so).
    let device = backend.device().clone();
    let libraries = device
        .libraries
        .as_deref()
        .map_or(String::new(), |l| format!(", with {l}"));
    let mode = if plan.quick {
        "QUICK smoke run (tiny tiles, one repetition): exercises the pipeline, not a calibration; "
    } else {
        ""
    };
    let shard = if plan.tensor_parallel > 1 {
        format!(
            "; non-expert and head series: one GPU's shard at tensor parallelism {} (outputs, \
             heads and vocabulary divided by it)",
            plan.tensor_parallel
        )
    } else {
        String::new()
    };
    let notes = format!(
        "{mode}measured with the {} backend{libraries} ({}), {}; expert_ffn: the whole MoE layer \
         with every token routed to one expert; non-expert parts: one GEMM of the layer's dense \
         matmul weights ({} x {}) plus attention over {} cached tokens for decode; head: the {} \
         x {} output GEMM; expert_ffn's split: its fixed part = expert_ffn - (w13 + w2) once per \
         layer, each active expert's GEMM pair = w13 + w2; decode_step derived as n_layers x \
         (non_expert_decode + fixed + active experts x GEMM pair) + head{shard} \
         (docs/calibration.md)",
        device.backend,
        device.timing,
        plan.stopping.describe(),
        shape.hidden,
        dense_out_features(shape),
        plan.decode_context,
        shape.hidden,
        shape.vocab,
    );
    let profile = Profile {
        format_version: PROFILE_FORMAT_VERSION,
        gpu: device.name.clone(),
        source: ProfileSource {
            kind: SourceKind::Measured,
            tool_version: format!("expertsim-calibrate {}", env!("CARGO_PKG_VERSION")),
            date: Some(crate::timestamp::now()),
            notes,
        },
        model: shape.clone(),
        decode_context_tokens: plan.decode_context as u32,
        expert_ffn: vec![ExpertFfnCurve {
            hidden: shape.hidden,
            expert_ffn: shape.expert_ffn,
            dtype: shape.weight_dtype,
            curve: expert,
            split: Some(split),
        }],
        non_expert_prefill,
        non_expert_decode,
        head,
        decode_step,
        // The CPU references run a layer's experts one after another, and so does the CUDA
        // backend: one cuBLAS GEMM pair per expert with tokens, back to back on one stream.
        expert_execution: match device.backend {
            BackendKind::Cpu | BackendKind::Cuda => ExpertExecution::Serial,
        },
        tensor_parallel: plan.tensor_parallel as u32,
    };
    let rule = &plan.stopping;
    let calibration = Calibration {
        backend: device.backend.as_str().into(),
        device_name: device.name,
        compute_capability: device
            .compute_capability
            .map(|(major, minor)| format!("{major}.{minor}")),
        driver: device.driver,
        kernel_source_hash: kernels::source::source_hash(),
        tile_tokens: plan.tile as u32,
        timing: device.timing,
        warmup: plan.warmup as u32,
        repetitions: rule.max_repetitions as u32,
        stopping: (!rule.is_fixed()).then_some(StoppingRecord {
            confidence: rule.confidence,
            relative_half_width: rule.relative_half_width,
            min_repetitions: rule.min_repetitions as u32,
            max_repetitions: rule.max_repetitions as u32,
            total_repetitions,
            points_at_maximum: at_maximum,
        }),
        profiling_seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        measurements,
    };
    Ok(MeasuredProfile {
        profile,
        calibration,
    })
}
