//! The calibration pipeline: what is measured, at which counts, and how the measurements
//! become a profile. Every series is timed on the same backend with the same warm-up and
//! repetitions; the profile's curves hold medians, its `calibration` section every point with
//! its spread.
//!
//! - `expert_ffn`: the whole MoE layer (grouping, gate/up, SiLU x up, down, combine) with all
//!   tokens routed to one expert of the model's size, at the tile-rule token counts;
//! - `non_expert_prefill`: the layer's dense matmul weights as one GEMM (`hidden` ->
//!   dense parameters / `hidden`) over the tokens of a pass, at the same counts;
//! - `non_expert_decode`: that GEMM plus attention over `decode_context` cached tokens, vs batch;
//! - `head`: the output projection GEMM (`hidden` -> `vocab`), vs batch;
//! - `decode_step`: derived, as the roofline derives it: `n_layers x (non_expert_decode(b) +
//!   expert_ffn(b x top_k / n_experts)) + head(b)`;
//! - `decode_step/context=C` (measurements only): the decode kernels at other contexts;
//! - `reroute/{fused,unfused}/adapters=A` (measurements only): batched rerouting vs tokens.

use crate::sampler::{batch_points, steps, token_points};
use crate::stats::summarize;
use kernels::KernelInputError;
use kernels::backend::{Backend, BackendError, BackendKind, Workload};
use kernels::decode::{DecodeProblem, DecodeShape};
use kernels::moe::{MoeProblem, MoeShape, check_tile_tokens};
use kernels::reroute::{RerouteProblem, RerouteVariant};
use sim::cost::curve::{CostCurve, CurveError};
use sim::cost::profile::{
    Calibration, ExpertExecution, ExpertFfnCurve, MeasuredProfile, Measurement,
    PROFILE_FORMAT_VERSION, Profile, ProfileSource, SourceKind,
};
use sim::cost::shape::{MoeModelShape, WeightDtype};
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
    /// Experts each adapter fine-tuned.
    pub tuned_experts: usize,
    pub warmup: usize,
    pub repetitions: usize,
    pub seed: u64,
    pub quick: bool,
}

impl Plan {
    /// The full calibration: GEM's tile rule (64-token tiles to 4096, every 1024 to 16384),
    /// 500 repetitions as in the paper.
    pub fn full() -> Plan {
        Plan {
            tile: 64,
            dense_limit: 4096,
            sparse_step: 1024,
            sparse_limit: 16_384,
            max_batch: 256,
            head_batches: None,
            decode_context: 256,
            contexts: vec![1024, 4096, 16_384],
            context_batches: vec![1, 8, 32, 64, 65, 128, 256],
            reroute_tokens: vec![1, 16, 64, 256, 1024, 4096, 16_384],
            adapters: vec![1, 5, 10, 20],
            tuned_experts: 8,
            warmup: 10,
            repetitions: 500,
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
            tuned_experts: 8,
            warmup: 0,
            repetitions: 1,
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
        if self.repetitions == 0 {
            return bad("repetitions", "must be at least 1".into());
        }
        if self.warmup > MAX_COUNT || self.repetitions > MAX_COUNT {
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
        ] {
            if let Some(v) = list.iter().find(|v| **v == 0 || **v > MAX_COUNT) {
                return bad(flag, format!("{v} is not in 1..={MAX_COUNT}"));
            }
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

/// Times workloads and collects the series.
struct Recorder<'a> {
    backend: &'a mut dyn Backend,
    plan: &'a Plan,
    measurements: Vec<Measurement>,
    log: &'a mut dyn FnMut(&str),
    started: Instant,
}

impl Recorder<'_> {
    fn time(&mut self, x: usize, workload: &Workload) -> Result<[f64; 6], CalibrateError> {
        let samples = self
            .backend
            .time(workload, self.plan.warmup, self.plan.repetitions)?;
        Ok(summarize(x as f64, &samples))
    }

    fn push(
        &mut self,
        name: String,
        x: &str,
        points: Vec<[f64; 6]>,
    ) -> Result<CostCurve, CalibrateError> {
        (self.log)(&format!(
            "{name}: {} points ({:.1} s so far)",
            points.len(),
            self.started.elapsed().as_secs_f64()
        ));
        let curve =
            CostCurve::new(points.iter().map(|p| (p[0], p[1])).collect()).map_err(|source| {
                CalibrateError::Curve {
                    name: name.clone(),
                    source,
                }
            })?;
        self.measurements.push(Measurement {
            name,
            x: x.into(),
            points,
        });
        Ok(curve)
    }
}

/// A decode-kernel problem whose weights are kept across points (they are the expensive part
/// to generate); `set` replaces the per-point inputs.
struct DecodeBench {
    problem: DecodeProblem,
}

impl DecodeBench {
    fn new(shape: DecodeShape, tile: usize, seed: u64) -> DecodeBench {
        DecodeBench {
            problem: DecodeProblem::random(shape, tile, 1, 0, seed, true),
        }
    }

    fn workload(mut self, batch: usize, context: usize, seed: u64) -> Workload {
        let fresh = DecodeProblem::random(
            DecodeShape {
                out_features: 1,
                ..self.problem.shape
            },
            self.problem.tile_tokens,
            batch,
            context,
            seed,
            true,
        );
        self.problem.batch = batch;
        self.problem.context = context;
        self.problem.x = fresh.x;
        self.problem.q = fresh.q;
        self.problem.k_cache = fresh.k_cache;
        self.problem.v_cache = fresh.v_cache;
        Workload::Decode(self.problem)
    }

    fn back(workload: Workload) -> DecodeBench {
        match workload {
            Workload::Decode(problem) => DecodeBench { problem },
            _ => unreachable!("a DecodeBench workload is a decode workload"),
        }
    }

    /// Times the bench at each `(x, batch, context)` and returns the rows.
    fn series(
        mut self,
        recorder: &mut Recorder<'_>,
        points: impl IntoIterator<Item = (usize, usize)>,
    ) -> Result<(DecodeBench, Vec<[f64; 6]>), CalibrateError> {
        let seed = recorder.plan.seed;
        let mut rows = Vec::new();
        for (batch, context) in points {
            let workload = self.workload(batch, context, seed);
            let row = recorder.time(batch, &workload);
            self = DecodeBench::back(workload);
            rows.push(row?);
        }
        Ok((self, rows))
    }
}

/// The dense part of one layer as a GEMM: output features so that `hidden x out` covers the
/// layer's matmul parameters.
pub fn dense_out_features(shape: &MoeModelShape) -> usize {
    (shape.dense_matmul_params_per_layer() as usize).div_ceil(shape.hidden)
}

/// Measures everything in `plan` for `shape` and returns the profile. `log` gets one line
/// per finished series.
pub fn calibrate(
    backend: &mut dyn Backend,
    shape: &MoeModelShape,
    plan: &Plan,
    log: &mut dyn FnMut(&str),
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
    let device = backend.device().clone();
    let seed = plan.seed;
    let mut recorder = Recorder {
        backend,
        plan,
        measurements: Vec::new(),
        log,
        started,
    };
    let tokens = token_points(
        plan.tile,
        plan.dense_limit,
        plan.sparse_step,
        plan.sparse_limit,
    );
    let batches = batch_points(plan.tile, plan.max_batch);

    // The expert FFN: one expert of the model's size, all tokens routed to it.
    let expert_shape = MoeShape {
        hidden: shape.hidden,
        expert_ffn: shape.expert_ffn,
        n_experts: 1,
        top_k: 1,
    };
    let mut moe = MoeProblem::random(expert_shape, plan.tile, 1, seed);
    let mut rows = Vec::new();
    for &n in &tokens {
        let fresh = MoeProblem::random(
            MoeShape {
                expert_ffn: 1,
                ..expert_shape
            },
            plan.tile,
            n,
            seed,
        );
        moe.x = fresh.x;
        moe.topk_ids = fresh.topk_ids;
        moe.topk_weights = fresh.topk_weights;
        let workload = Workload::Moe(moe);
        let row = recorder.time(n, &workload);
        moe = match workload {
            Workload::Moe(p) => p,
            _ => unreachable!("built as a MoE workload"),
        };
        rows.push(row?);
    }
    drop(moe);
    let medians: Vec<(f64, f64)> = rows.iter().map(|r| (r[0], r[1])).collect();
    let at_boundaries = steps(&medians, 0.02 * medians[0].1)
        .into_iter()
        .filter(|&x| x as usize % plan.tile == 0)
        .count();
    (recorder.log)(&format!(
        "expert_ffn: the median jumps by over 2 % at {at_boundaries} of the {} sampled tile boundaries",
        (plan.dense_limit / plan.tile).saturating_sub(1)
    ));
    let expert = recorder.push("expert_ffn".into(), "tokens", rows)?;

    // The layer's dense part: prefill (GEMM only) and decode (GEMM + attention).
    let dense_shape = DecodeShape {
        hidden: shape.hidden,
        out_features: dense_out_features(shape),
        n_heads: shape.n_attention_heads,
        n_kv_heads: shape.n_kv_heads,
        head_dim: shape.head_dim,
    };
    let bench = DecodeBench::new(dense_shape, plan.tile, seed);
    let (bench, rows) = bench.series(&mut recorder, tokens.iter().map(|&n| (n, 0)))?;
    let non_expert_prefill = recorder.push("non_expert_prefill".into(), "tokens", rows)?;
    let (bench, rows) = bench.series(
        &mut recorder,
        batches.iter().map(|&b| (b, plan.decode_context)),
    )?;
    let non_expert_decode = recorder.push("non_expert_decode".into(), "batch", rows)?;
    let mut bench = bench;
    for &context in &plan.contexts {
        let (next, rows) = bench.series(
            &mut recorder,
            plan.context_batches.iter().map(|&b| (b, context)),
        )?;
        bench = next;
        let mut sorted = rows;
        sorted.sort_by(|a, b| a[0].total_cmp(&b[0]));
        sorted.dedup_by(|a, b| a[0] == b[0]);
        recorder.push(format!("decode_step/context={context}"), "batch", sorted)?;
    }
    drop(bench);

    // The output head.
    let head_shape = DecodeShape {
        out_features: shape.vocab,
        ..dense_shape
    };
    let head_batches = plan.head_batches.clone().unwrap_or_else(|| batches.clone());
    let head_bench = DecodeBench::new(head_shape, plan.tile, seed);
    let (head_bench, rows) =
        head_bench.series(&mut recorder, head_batches.iter().map(|&b| (b, 0)))?;
    drop(head_bench);
    let head = recorder.push("head".into(), "batch", rows)?;

    // Batched rerouting, fused and unfused, per adapter count.
    for &adapters in &plan.adapters {
        for variant in [RerouteVariant::Fused, RerouteVariant::Unfused] {
            let mut rows = Vec::new();
            for &t in &plan.reroute_tokens {
                let problem = RerouteProblem::random(
                    t,
                    shape.n_experts,
                    shape.top_k,
                    adapters,
                    plan.tuned_experts,
                    seed,
                );
                rows.push(recorder.time(t, &Workload::Reroute(problem, variant))?);
            }
            let mut sorted = rows;
            sorted.sort_by(|a, b| a[0].total_cmp(&b[0]));
            sorted.dedup_by(|a, b| a[0] == b[0]);
            recorder.push(
                format!("reroute/{}/adapters={adapters}", variant.as_str()),
                "tokens",
                sorted,
            )?;
        }
    }

    // The whole decode step, derived from the measured curves.
    let decode_samples = batches
        .iter()
        .map(|&b| {
            let even_load = (b * shape.top_k) as f64 / shape.n_experts as f64;
            let nanos = shape.n_layers as f64
                * (non_expert_decode.at(b as f64) + expert.at(even_load))
                + head.at(b as f64);
            (b as f64, nanos)
        })
        .collect();
    let decode_step = CostCurve::new(decode_samples).map_err(|source| CalibrateError::Curve {
        name: "decode_step".into(),
        source,
    })?;

    let mode = if plan.quick {
        "QUICK smoke run (tiny tiles, one repetition): exercises the pipeline, not a calibration; "
    } else {
        ""
    };
    let notes = format!(
        "{mode}measured with the {} backend ({}); expert_ffn: the whole MoE layer with every \
         token routed to one expert; non-expert parts: one GEMM of the layer's dense matmul \
         weights ({} x {}) plus attention over {} cached tokens for decode; head: the {} x {} \
         output GEMM; decode_step derived as n_layers x (non_expert_decode + expert_ffn(batch x \
         top_k / n_experts)) + head (docs/calibration.md)",
        device.backend,
        device.timing,
        dense_shape.hidden,
        dense_shape.out_features,
        plan.decode_context,
        shape.hidden,
        shape.vocab,
    );
    let Recorder { measurements, .. } = recorder;
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
        }],
        non_expert_prefill,
        non_expert_decode,
        head,
        decode_step,
        // The CPU references run a layer's experts one after another; a GPU's grouped kernel
        // runs their tiles at once.
        expert_execution: match device.backend {
            BackendKind::Cpu => ExpertExecution::Serial,
            BackendKind::Cuda => ExpertExecution::Concurrent,
        },
    };
    let calibration = Calibration {
        backend: device.backend.as_str().into(),
        device_name: device.name,
        compute_capability: device
            .compute_capability
            .map(|(major, minor)| format!("{major}.{minor}")),
        driver: device.driver,
        kernel_source_hash: kernels::source::source_hash(),
        tile_tokens: plan.tile as u32,
        timing: device.timing.into(),
        warmup: plan.warmup as u32,
        repetitions: plan.repetitions as u32,
        profiling_seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        measurements,
    };
    Ok(MeasuredProfile {
        profile,
        calibration,
    })
}
