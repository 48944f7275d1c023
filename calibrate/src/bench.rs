//! The workload behind every calibration point, rebuilt from its series and `x`: what the
//! pipeline times, and what `expertsim live`'s probe times again to check that a profile
//! describes the device it runs on. Weights are generated once per series and kept across
//! points (they are the expensive part to generate); each point gets fresh inputs.
//!
//! - `expert_ffn`: the whole MoE layer with all `x` tokens routed to one expert of the
//!   model's size;
//! - `non_expert_prefill`: one GEMM of the layer's dense matmul weights over `x` tokens;
//! - `non_expert_decode`, `decode_step/context=C`: that GEMM plus attention over the decode
//!   context (or `C`) cached tokens per sequence, for `x` sequences;
//! - `head`: the output projection GEMM over `x` sequences;
//! - `expert_gemm/{w13,w2}`: one of the expert's two GEMMs alone over `x` tokens (gate/up
//!   `hidden -> 2 x expert_ffn`, down `expert_ffn -> hidden`): with `expert_ffn`, they split
//!   the layer into its fixed part and each expert's GEMM pair;
//! - `reroute/{fused,unfused}/adapters=A`: one layer's batched rerouting of `x` tokens.

use crate::adaptive::{Repeated, Stop, StoppingRule, repeat_until_precise};
use crate::stats::summarize;
use expertsim_scenario::cost::shape::MoeModelShape;
use kernels::backend::{Backend, BackendError, Workload};
use kernels::blas::RowMajorGemm;
use kernels::decode::{DecodeProblem, DecodeShape};
use kernels::moe::{MoeProblem, MoeShape};
use kernels::numeric::{random_weights, synthetic_bf16};
use kernels::reroute::{RerouteProblem, RerouteVariant};

/// Experts each adapter fine-tuned, in the rerouting measurements.
pub const TUNED_EXPERTS_PER_ADAPTER: usize = 8;

/// One measured series of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    ExpertFfn,
    NonExpertPrefill,
    NonExpertDecode,
    /// The decode kernels at another context than the profile's decode context.
    DecodeAtContext(usize),
    Head,
    /// One of the expert's GEMMs alone (measurements only).
    ExpertGemm(ExpertGemm),
    /// One GEMM `hidden -> width` alone, vs tokens (measurements only: a scenario's dense
    /// layers and head at their own widths).
    DenseGemm(usize),
    Reroute {
        variant: RerouteVariant,
        adapters: usize,
    },
}

/// The expert's two GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGemm {
    /// Gate and up fused: `hidden -> 2 x expert_ffn`.
    W13,
    /// Down: `expert_ffn -> hidden`.
    W2,
}

impl ExpertGemm {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpertGemm::W13 => "w13",
            ExpertGemm::W2 => "w2",
        }
    }
}

impl Series {
    /// The measurement's name in a profile's `calibration` section.
    pub fn name(&self) -> String {
        match self {
            Series::ExpertFfn => "expert_ffn".into(),
            Series::NonExpertPrefill => "non_expert_prefill".into(),
            Series::NonExpertDecode => "non_expert_decode".into(),
            Series::DecodeAtContext(c) => format!("decode_step/context={c}"),
            Series::Head => "head".into(),
            Series::ExpertGemm(gemm) => format!("expert_gemm/{}", gemm.as_str()),
            Series::DenseGemm(width) => format!("dense_gemm/out={width}"),
            Series::Reroute { variant, adapters } => {
                format!("reroute/{}/adapters={adapters}", variant.as_str())
            }
        }
    }

    /// The series a measurement name stands for (`None` for names this tool does not write).
    pub fn parse(name: &str) -> Option<Series> {
        match name {
            "expert_ffn" => return Some(Series::ExpertFfn),
            "non_expert_prefill" => return Some(Series::NonExpertPrefill),
            "non_expert_decode" => return Some(Series::NonExpertDecode),
            "head" => return Some(Series::Head),
            "expert_gemm/w13" => return Some(Series::ExpertGemm(ExpertGemm::W13)),
            "expert_gemm/w2" => return Some(Series::ExpertGemm(ExpertGemm::W2)),
            _ => {}
        }
        if let Some(c) = name.strip_prefix("decode_step/context=") {
            return c.parse().ok().map(Series::DecodeAtContext);
        }
        if let Some(w) = name.strip_prefix("dense_gemm/out=") {
            return w.parse().ok().map(Series::DenseGemm);
        }
        let rest = name.strip_prefix("reroute/")?;
        let (variant, adapters) = rest.split_once("/adapters=")?;
        let variant = match variant {
            "fused" => RerouteVariant::Fused,
            "unfused" => RerouteVariant::Unfused,
            _ => return None,
        };
        Some(Series::Reroute {
            variant,
            adapters: adapters.parse().ok()?,
        })
    }

    /// What `x` counts.
    pub fn x_label(&self) -> &'static str {
        match self {
            Series::ExpertFfn
            | Series::NonExpertPrefill
            | Series::ExpertGemm(_)
            | Series::DenseGemm(_)
            | Series::Reroute { .. } => "tokens",
            _ => "batch",
        }
    }
}

/// One timed point: `[x, median, p10, p90, min, max]`, the repetitions it took and why it
/// stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedPoint {
    pub row: [f64; 6],
    pub repetitions: usize,
    pub stop: Stop,
}

/// Builds the workloads of one model shape, keeping each series' weights.
pub struct Bench {
    shape: MoeModelShape,
    tile: usize,
    decode_context: usize,
    /// The dense and head series run one GPU's shard at this tensor-parallel degree.
    tensor_parallel: usize,
    seed: u64,
    expert: Option<MoeProblem>,
    dense: Option<DecodeProblem>,
    head: Option<DecodeProblem>,
    w13: Option<DecodeProblem>,
    w2: Option<DecodeProblem>,
    /// The `DenseGemm` problem of the series being measured (one width at a time).
    gemm: Option<DecodeProblem>,
}

impl Bench {
    /// Workloads of `shape` at GEMM tile `tile`, decode attention over `decode_context`
    /// cached tokens, inputs from `seed`.
    pub fn new(shape: &MoeModelShape, tile: usize, decode_context: usize, seed: u64) -> Bench {
        Bench {
            shape: shape.clone(),
            tile,
            decode_context,
            tensor_parallel: 1,
            seed,
            expert: None,
            dense: None,
            head: None,
            w13: None,
            w2: None,
            gemm: None,
        }
    }

    /// The dense and head series as one GPU's shard at tensor parallelism `g`
    /// (`DecodeShape::shard`): what a profile with `tensor_parallel = g` holds.
    pub fn with_tensor_parallel(mut self, g: usize) -> Bench {
        self.tensor_parallel = g.max(1);
        self
    }

    /// Output features of the layer's dense part as one GEMM: the layer's matmul parameters
    /// over `hidden` (the whole layer; a shard runs `DecodeShape::shard` of it).
    pub fn dense_out_features(&self) -> usize {
        (self.shape.dense_matmul_params_per_layer() as usize).div_ceil(self.shape.hidden)
    }

    fn decode_shape(&self, out_features: usize) -> DecodeShape {
        DecodeShape {
            hidden: self.shape.hidden,
            out_features,
            n_heads: self.shape.n_attention_heads,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
        }
        .shard(self.tensor_parallel)
    }

    /// One expert GEMM as a decode problem without attention (`k -> n`; the heads do not
    /// matter at context 0).
    fn gemm_shape(&self, gemm: ExpertGemm) -> DecodeShape {
        let (ffn, hidden) = (self.shape.expert_ffn, self.shape.hidden);
        let (k, n) = match gemm {
            ExpertGemm::W13 => (hidden, 2 * ffn),
            ExpertGemm::W2 => (ffn, hidden),
        };
        DecodeShape {
            hidden: k,
            out_features: n,
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
        }
    }

    fn expert_shape(&self) -> MoeShape {
        MoeShape {
            hidden: self.shape.hidden,
            expert_ffn: self.shape.expert_ffn,
            n_experts: 1,
            top_k: 1,
        }
    }

    /// `problem` (weights kept) with fresh inputs for `batch` rows and `context` cached tokens
    /// (`DecodeProblem::with_synthetic_inputs`).
    fn decode_inputs(&self, problem: DecodeProblem, batch: usize, context: usize) -> Workload {
        Workload::Decode(problem.with_synthetic_inputs(batch, context, self.seed))
    }

    /// The workload of `series` at `x`; hand it back with [`Bench::keep`] after timing.
    pub fn workload(&mut self, series: &Series, x: usize) -> Workload {
        let (tile, seed) = (self.tile, self.seed);
        match *series {
            Series::ExpertFfn => {
                let shape = self.expert_shape();
                let mut moe = self
                    .expert
                    .take()
                    .unwrap_or_else(|| MoeProblem::synthetic(shape, tile, seed));
                // Every token to the one expert, inputs as in `decode_inputs`.
                moe.x = synthetic_bf16(x * shape.hidden, 1.0, seed, "bench.x");
                moe.topk_ids = vec![0; x];
                moe.topk_weights = random_weights(x, seed, "bench.weights");
                Workload::Moe(moe)
            }
            Series::NonExpertPrefill | Series::NonExpertDecode | Series::DecodeAtContext(_) => {
                let context = match *series {
                    Series::NonExpertPrefill => 0,
                    Series::DecodeAtContext(c) => c,
                    _ => self.decode_context,
                };
                let shape = self.decode_shape(self.dense_out_features());
                let problem = self
                    .dense
                    .take()
                    .unwrap_or_else(|| DecodeProblem::random(shape, tile, 1, 0, seed, true));
                self.decode_inputs(problem, x, context)
            }
            Series::Head => {
                let shape = self.decode_shape(self.shape.vocab);
                let problem = self
                    .head
                    .take()
                    .unwrap_or_else(|| DecodeProblem::random(shape, tile, 1, 0, seed, true));
                self.decode_inputs(problem, x, 0)
            }
            Series::ExpertGemm(gemm) => {
                let shape = self.gemm_shape(gemm);
                let kept = match gemm {
                    ExpertGemm::W13 => self.w13.take(),
                    ExpertGemm::W2 => self.w2.take(),
                };
                let problem =
                    kept.unwrap_or_else(|| DecodeProblem::random(shape, tile, 1, 0, seed, true));
                self.decode_inputs(problem, x, 0)
            }
            Series::DenseGemm(width) => {
                let shape = self.decode_shape(width);
                let kept = self.gemm.take().filter(|p| p.shape == shape);
                let problem =
                    kept.unwrap_or_else(|| DecodeProblem::random(shape, tile, 1, 0, seed, true));
                self.decode_inputs(problem, x, 0)
            }
            Series::Reroute { variant, adapters } => Workload::Reroute(
                RerouteProblem::random(
                    x,
                    self.shape.n_experts,
                    self.shape.top_k,
                    adapters,
                    TUNED_EXPERTS_PER_ADAPTER,
                    seed,
                ),
                variant,
            ),
        }
    }

    /// The GEMMs the workload of `series` at `x` runs, from the same shapes as
    /// [`Bench::workload`] (without building its inputs): what must fit cuBLAS's arguments.
    pub fn gemms(&self, series: &Series, x: usize) -> Vec<RowMajorGemm> {
        match *series {
            Series::ExpertFfn => self.expert_shape().expert_gemms(x).to_vec(),
            Series::NonExpertPrefill | Series::NonExpertDecode | Series::DecodeAtContext(_) => {
                vec![self.decode_shape(self.dense_out_features()).gemm(x)]
            }
            Series::Head => vec![self.decode_shape(self.shape.vocab).gemm(x)],
            Series::ExpertGemm(gemm) => vec![self.gemm_shape(gemm).gemm(x)],
            Series::DenseGemm(width) => vec![self.decode_shape(width).gemm(x)],
            Series::Reroute { .. } => vec![],
        }
    }

    /// Keeps the weights of a workload of `series` for the next point.
    pub fn keep(&mut self, series: &Series, workload: Workload) {
        match (series, workload) {
            (Series::ExpertFfn, Workload::Moe(p)) => self.expert = Some(p),
            (Series::Head, Workload::Decode(p)) => self.head = Some(p),
            (Series::ExpertGemm(ExpertGemm::W13), Workload::Decode(p)) => self.w13 = Some(p),
            (Series::ExpertGemm(ExpertGemm::W2), Workload::Decode(p)) => self.w2 = Some(p),
            (Series::DenseGemm(_), Workload::Decode(p)) => self.gemm = Some(p),
            (_, Workload::Decode(p)) => self.dense = Some(p),
            _ => {}
        }
    }

    /// Times `series` at `x` on `backend`: `warmup` untimed runs, then repetitions as `rule`
    /// says (the first batch after the warm-up, later batches back to back).
    pub fn time(
        &mut self,
        backend: &mut dyn Backend,
        series: &Series,
        x: usize,
        warmup: usize,
        rule: &StoppingRule,
    ) -> Result<TimedPoint, BackendError> {
        let workload = self.workload(series, x);
        let mut first = true;
        let repeated = repeat_until_precise(rule, |count| {
            let warm = if first { warmup } else { 0 };
            first = false;
            backend.time(&workload, warm, count)
        });
        self.keep(series, workload);
        let Repeated { samples, stop } = repeated?;
        Ok(TimedPoint {
            row: summarize(x as f64, &samples),
            repetitions: samples.len(),
            stop,
        })
    }

    /// A rough size of a point's work, for the estimated time left: the multiply-adds of its
    /// GEMMs with rows padded to whole tiles, its attention's, and a launch's worth (one tile
    /// of the layer's widest GEMM) each. Only ratios between points matter.
    pub fn work(&self, series: &Series, x: usize) -> f64 {
        let s = &self.shape;
        let padded = x.div_ceil(self.tile) * self.tile;
        let attention =
            |context: usize| (x * context * s.n_attention_heads * s.head_dim * 2) as f64;
        let gemm = |out: usize| (padded * s.hidden * out) as f64;
        let launch = (self.tile * s.hidden * self.dense_out_features().max(s.expert_ffn)) as f64;
        launch
            + match *series {
                Series::ExpertFfn => 3.0 * gemm(s.expert_ffn),
                Series::NonExpertPrefill => gemm(self.dense_out_features()),
                Series::NonExpertDecode => {
                    gemm(self.dense_out_features()) + attention(self.decode_context)
                }
                Series::DecodeAtContext(c) => gemm(self.dense_out_features()) + attention(c),
                Series::Head => gemm(s.vocab),
                Series::ExpertGemm(_) => 1.5 * gemm(s.expert_ffn),
                Series::DenseGemm(width) => gemm(width),
                Series::Reroute { adapters, .. } => (x * s.top_k * adapters.max(1)) as f64,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_names_round_trip() {
        for series in [
            Series::ExpertFfn,
            Series::NonExpertPrefill,
            Series::NonExpertDecode,
            Series::DecodeAtContext(1024),
            Series::Head,
            Series::ExpertGemm(ExpertGemm::W13),
            Series::ExpertGemm(ExpertGemm::W2),
            Series::DenseGemm(15_189),
            Series::Reroute {
                variant: RerouteVariant::Unfused,
                adapters: 3,
            },
        ] {
            assert_eq!(Series::parse(&series.name()), Some(series));
        }
        assert_eq!(Series::parse("decode_step"), None);
        assert_eq!(Series::parse("reroute/other/adapters=1"), None);
    }

    /// Every GEMM of the full default calibration of Qwen1.5-MoE-A2.7B (every series, every
    /// count, the output head's 151,936 outputs included) is a valid cuBLAS call. The first
    /// H200 run stopped at the head with "GEMM size = 23084548096 exceeds cuBLAS's int range":
    /// this would have caught it on the CPU.
    #[test]
    fn every_gemm_of_the_full_qwen_calibration_fits_cublas() {
        let shape = MoeModelShape::qwen1_5_moe_a2_7b();
        let plan = crate::pipeline::Plan::full();
        let bench = Bench::new(&shape, plan.tile, plan.decode_context, plan.seed);
        let mut checked = 0;
        for (series, xs) in crate::pipeline::schedule(&plan) {
            for x in xs {
                for gemm in bench.gemms(&series, x) {
                    gemm.column_major()
                        .unwrap_or_else(|e| panic!("{} at {x}: {gemm:?}: {e}", series.name()));
                    checked += 1;
                }
            }
        }
        assert!(checked > 400, "{checked}");
        let head = bench.gemms(&Series::Head, 256);
        assert_eq!((head[0].k, head[0].n), (2048, 151_936));
    }

    #[test]
    fn workloads_have_the_point_shape_and_keep_their_weights() {
        let shape = MoeModelShape::live_tiny_moe();
        let mut bench = Bench::new(&shape, 16, 8, 42);
        let w = bench.workload(&Series::ExpertFfn, 5);
        match &w {
            Workload::Moe(p) => {
                assert_eq!(p.topk_ids, vec![0; 5]);
                assert_eq!(p.x.len(), 5 * shape.hidden);
                assert_eq!(p.w2.len(), shape.expert_ffn * shape.hidden);
                assert_eq!(p.w13.len(), 2 * shape.expert_ffn * shape.hidden);
            }
            other => panic!("{other:?}"),
        }
        bench.keep(&Series::ExpertFfn, w);
        assert!(bench.expert.is_some());
        match bench.workload(&Series::NonExpertDecode, 3) {
            Workload::Decode(p) => {
                assert_eq!((p.batch, p.context), (3, 8));
                assert_eq!(p.shape.out_features, bench.dense_out_features());
            }
            other => panic!("{other:?}"),
        }
        // A padded tile costs as much as a full one in the work estimate.
        assert_eq!(bench.work(&Series::Head, 1), bench.work(&Series::Head, 16));
        assert!(bench.work(&Series::Head, 17) > bench.work(&Series::Head, 16));
    }
}
