//! GEM's profiling cost (gem.txt sections 3.3.2 and 5.4, Figure 18): the kernel time a
//! variability profile takes on one GPU, computed rather than measured. GEM measures the MoE
//! layer at the calibration's tile-boundary token counts (`cost::sampling::token_points` with
//! the roofline's sampling parameters, the grid `expertsim-calibrate` measures), over the range
//! of per-GPU token counts the model's steps can route; the full sweep measures every token
//! count from 1 to `sweep_max_tokens`. Each count costs `repetitions` launches of one GPU's
//! share of the layer (its `n_experts / n_gpus` experts, the count spread evenly over them),
//! each priced by the one MoE-layer entry point (`MoeLayerCost`, launched eagerly from the host
//! as a microbenchmark does). Host-side set-up between counts is not modelled, so both
//! methods' times are lower bounds of a wall clock; their ratio is the sampling's saving.

use super::config::{GemScenario, ProfilingMethod};
use crate::cost::kernel::Timing;
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::cost::roofline::RooflineParams;
use crate::cost::sampling::token_points;
use serde::Serialize;

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

/// The most routed rows one GPU receives in one step of `scenario`: the larger of an engine
/// step's token budget and a routing-trace step, times the experts of its top-k one GPU can
/// hold (each token reaches a GPU at most once per hosted expert it routes to).
pub fn per_gpu_token_range(scenario: &GemScenario) -> usize {
    let tokens = match &scenario.trace {
        super::config::TraceSpec::Synthetic(params) => params.tokens_per_step,
        super::config::TraceSpec::Recorded { .. } => 0,
    }
    .max(scenario.serving.max_num_batched_tokens);
    let experts_per_gpu = (scenario.shape.n_experts / scenario.n_gpus.max(1)).max(1);
    tokens * scenario.shape.top_k.min(experts_per_gpu).max(1)
}

/// The token counts `scenario`'s profiling method measures.
pub fn profiled_counts(scenario: &GemScenario) -> (Vec<usize>, String) {
    let p = &scenario.profiling;
    match p.method {
        ProfilingMethod::FullSweep => (
            (1..=p.sweep_max_tokens).collect(),
            format!("every token count from 1 to {}", p.sweep_max_tokens),
        ),
        ProfilingMethod::TileBoundaries => {
            let r = RooflineParams::default();
            let tile = r.tile_tokens as usize;
            let range = per_gpu_token_range(scenario).div_ceil(tile) * tile;
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

/// The kernel time of `scenario`'s profiling method on one nominal GPU of its cluster.
pub fn profiling_cost(scenario: &GemScenario) -> ProfilingCost {
    let (counts, sampling) = profiled_counts(scenario);
    let layer = MoeLayerCost::new(&scenario.gpu, &scenario.shape, Timing::Eager)
        .with_measured_grouped(&scenario.gpu)
        .0;
    let experts = (scenario.shape.n_experts / scenario.n_gpus.max(1)).max(1);
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
        minutes: nanos * f64::from(scenario.profiling.repetitions) / 60e9,
        sampling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_cache::LoadCache;
    use std::path::Path;

    fn scenario(model: &str, method: &str) -> GemScenario {
        let text = format!(
            "experiment = \"profiling_cost\"\n[model]\nname = \"{model}\"\n\
             [profiling]\nmethod = \"{method}\"\n"
        );
        let config: super::super::GemConfig = toml::from_str(&text).unwrap();
        config
            .validate(Path::new("."), &mut LoadCache::default())
            .unwrap()
    }

    /// Llama-4-Scout (16 experts, top-1, 4 per GPU) routes at most one row per token to a GPU:
    /// its range is the 8192-token step budget, so GEM samples 1 and both sides of the 63
    /// boundaries below 4096 plus 4096 (128 counts), then 5120, 6144, 7168, 8192. The full
    /// sweep measures all 16384 counts, each at least as long as the longest GEM count below
    /// it: the ratio of the times exceeds the ratio of the counts' sums' lower bound.
    #[test]
    fn scout_samples_its_range_and_the_sweep_costs_far_more() {
        let gem = scenario("llama-4-scout", "tile_boundaries");
        assert_eq!(per_gpu_token_range(&gem), 8192);
        let (counts, _) = profiled_counts(&gem);
        assert_eq!(counts.len(), 128 + 4);
        assert_eq!(&counts[counts.len() - 2..], &[7168, 8192]);
        let sweep = scenario("llama-4-scout", "full_sweep");
        let (g, s) = (profiling_cost(&gem), profiling_cost(&sweep));
        assert_eq!((s.counts, s.max_tokens), (16_384, 16_384));
        // Every sweep count n costs at least GEM's count 1, and the sweep holds 16384 counts
        // against GEM's 132, so at the least the ratio is well above 100.
        assert!(
            s.minutes / g.minutes > 100.0,
            "{} vs {}",
            s.minutes,
            g.minutes
        );
        // 500 repetitions: ten times the repetitions, ten times the minutes.
        let mut ten = gem.clone();
        ten.profiling.repetitions *= 10;
        let t = profiling_cost(&ten).minutes;
        assert!((t / g.minutes - 10.0).abs() < 1e-9);
    }

    /// Qwen3-30B-A3B routes a token to up to 8 of a GPU's 32 experts: its range is 8 x 8192,
    /// sampled sparsely past 4096.
    #[test]
    fn a_wide_top_k_widens_the_range_sparsely() {
        let gem = scenario("qwen3-30b-a3b", "tile_boundaries");
        assert_eq!(per_gpu_token_range(&gem), 65_536);
        let (counts, _) = profiled_counts(&gem);
        assert_eq!(counts.len(), 128 + (65_536 - 4096) / 1024);
    }
}
