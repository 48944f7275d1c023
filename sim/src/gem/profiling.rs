//! GEM's profiling cost (gem.txt sections 3.3.2 and 5.4, Figure 18) on a gem scenario: the
//! shared computation (`serving::profiling`, which says what is measured and priced) over the
//! scenario's model, GPUs and step.

use super::config::GemScenario;
use crate::serving::profiling;
pub use crate::serving::profiling::ProfilingCost;

/// The most routed rows one GPU receives in one step of `scenario`: the larger of an engine
/// step's token budget and a routing-trace step (`serving::profiling::per_gpu_token_range`).
pub fn per_gpu_token_range(scenario: &GemScenario) -> usize {
    let tokens = match &scenario.trace {
        super::config::TraceSpec::Synthetic(params) => params.tokens_per_step,
        super::config::TraceSpec::Recorded { .. } => 0,
    }
    .max(scenario.serving.max_num_batched_tokens);
    profiling::per_gpu_token_range(tokens, &scenario.shape, scenario.n_gpus)
}

/// The token counts `scenario`'s profiling method measures.
pub fn profiled_counts(scenario: &GemScenario) -> (Vec<usize>, String) {
    profiling::profiled_counts(&scenario.profiling, per_gpu_token_range(scenario))
}

/// The kernel time of `scenario`'s profiling method on one nominal GPU of its cluster.
pub fn profiling_cost(scenario: &GemScenario) -> ProfilingCost {
    profiling::profiling_cost(
        &scenario.profiling,
        &scenario.gpu,
        &scenario.shape,
        scenario.n_gpus,
        per_gpu_token_range(scenario),
    )
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
