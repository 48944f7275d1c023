//! The kernel time of a GPU-variability profile (gem.txt sections 3.3.2 and 5.4, Figure 18;
//! moved from the gem family, shared by any scenario: the serving family's `[experiment]`
//! `profiling_cost`), computed rather than measured. GEM measures the MoE layer at the
//! calibration's tile-boundary token counts (`cost::sampling::token_points` with the roofline's
//! sampling parameters, the grid `expertsim-calibrate` measures), over the range of per-GPU
//! token counts the model's steps can route; the full sweep measures every token count from 1
//! to `sweep_max_tokens`. Each count costs `repetitions` launches of one GPU's share of the
//! layer (its `n_experts / gpus` experts, the count spread evenly over them), each priced by
//! the one MoE-layer entry point (`MoeLayerCost`, launched eagerly from the host as a
//! microbenchmark does). Host-side set-up between counts is not modelled, so both methods'
//! times are lower bounds of a wall clock; their ratio is the sampling's saving.

use crate::cost::gpu::GpuSpec;
use crate::cost::kernel::Timing;
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::cost::roofline::RooflineParams;
use crate::cost::sampling::token_points;
use crate::cost::shape::MoeModelShape;
use serde::{Deserialize, Serialize};

/// The most token counts a full profiling sweep prices (one MoE-layer price each).
pub const MAX_SWEEP_TOKENS: usize = 1 << 20;

/// Which token counts a variability profile measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfilingMethod {
    /// GEM's: the calibration's tile-boundary counts over the model's per-GPU range.
    #[default]
    TileBoundaries,
    /// Every token count from 1 to `sweep_max_tokens`.
    FullSweep,
}

pub fn d_repetitions() -> u32 {
    500
}
pub fn d_sweep_max_tokens() -> usize {
    16_384
}

/// How a profile is taken (gem's `[profiling]` table, the serving family's
/// `experiment.{method, repetitions, sweep_max_tokens}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilingTable {
    #[serde(default)]
    pub method: ProfilingMethod,
    /// Kernel launches measured per token count (section 3.3.2: "500 kernel launches per
    /// count", "62 token counts with 500 measurements each").
    #[serde(default = "d_repetitions")]
    pub repetitions: u32,
    /// The full sweep's last count (section 5.4: "sweeps token counts from 1 to 16K").
    #[serde(default = "d_sweep_max_tokens")]
    pub sweep_max_tokens: usize,
}

impl Default for ProfilingTable {
    fn default() -> Self {
        ProfilingTable {
            method: ProfilingMethod::default(),
            repetitions: d_repetitions(),
            sweep_max_tokens: d_sweep_max_tokens(),
        }
    }
}

impl ProfilingTable {
    /// The field (`prefix.<key>`) that is out of range, if one is.
    pub fn check(&self, prefix: &str) -> Result<(), crate::validate::FieldError> {
        if self.repetitions == 0 {
            return Err(crate::validate::field_error(
                &format!("{prefix}.repetitions"),
                "must be at least 1",
            ));
        }
        if !(1..=MAX_SWEEP_TOKENS).contains(&self.sweep_max_tokens) {
            return Err(crate::validate::field_error(
                &format!("{prefix}.sweep_max_tokens"),
                format!(
                    "= {} must be between 1 and {MAX_SWEEP_TOKENS} (one MoE-layer price per count)",
                    self.sweep_max_tokens
                ),
            ));
        }
        Ok(())
    }
}

/// One profiling method's cost for one model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfilingCost {
    /// The token counts measured, in order.
    pub counts: usize,
    /// The largest token count measured.
    pub max_tokens: usize,
    /// Kernel time of every measurement, minutes.
    pub minutes: f64,
    /// How the counts were chosen, in words.
    pub sampling: String,
}

/// The most routed rows one of `gpus` GPUs receives in a step of `step_tokens` tokens (the
/// larger of an engine step's token budget and a routing-trace step): the tokens times the
/// experts of its top-k one GPU can hold (each token reaches a GPU at most once per hosted
/// expert it routes to).
pub fn per_gpu_token_range(step_tokens: usize, shape: &MoeModelShape, gpus: usize) -> usize {
    let experts_per_gpu = (shape.n_experts / gpus.max(1)).max(1);
    step_tokens * shape.top_k.min(experts_per_gpu).max(1)
}

/// The token counts `profiling`'s method measures over a per-GPU range of `range` tokens.
pub fn profiled_counts(profiling: &ProfilingTable, range: usize) -> (Vec<usize>, String) {
    match profiling.method {
        ProfilingMethod::FullSweep => (
            (1..=profiling.sweep_max_tokens).collect(),
            format!("every token count from 1 to {}", profiling.sweep_max_tokens),
        ),
        ProfilingMethod::TileBoundaries => {
            let r = RooflineParams::default();
            let tile = r.tile_tokens as usize;
            let range = range.div_ceil(tile) * tile;
            let dense = (r.dense_sample_limit as usize).min(range);
            let sparse = r.sparse_sample_step as usize;
            (
                token_points(tile, dense, sparse, range),
                format!(
                    "both sides of every {tile}-token tile boundary up to {dense}, then every \
                     {sparse} up to {range} (the per-GPU range of the model's steps)"
                ),
            )
        }
    }
}

/// The kernel time of `profiling`'s method on one nominal `gpu` of `gpus` serving `shape`
/// (expert parallelism over all of them), over a per-GPU range of `range` tokens.
pub fn profiling_cost(
    profiling: &ProfilingTable,
    gpu: &GpuSpec,
    shape: &MoeModelShape,
    gpus: usize,
    range: usize,
) -> ProfilingCost {
    let (counts, sampling) = profiled_counts(profiling, range);
    let layer = MoeLayerCost::new(gpu, shape, Timing::Eager)
        .with_measured_grouped(gpu)
        .0;
    let experts = (shape.n_experts / gpus.max(1)).max(1);
    let nanos: f64 = counts
        .iter()
        .map(|&n| {
            let rows = ExpertRows::Even {
                tokens: n as u64,
                experts,
            };
            layer.gpu(rows, SpeedFactors::NOMINAL).nanos
        })
        .sum();
    ProfilingCost {
        counts: counts.len(),
        max_tokens: counts.last().copied().unwrap_or(0),
        minutes: nanos * f64::from(profiling.repetitions) / 60e9,
        sampling,
    }
}
