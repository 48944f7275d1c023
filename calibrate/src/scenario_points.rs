//! The token counts and batch sizes a scenario can ask of its profile, so that a calibration
//! for that scenario measures only those (`expertsim-calibrate --for-scenario`, `expertsim
//! live --calibrate`): token counts from 1 to the most tokens one pass can hold, sampled on
//! both sides of every tile boundary in that range (`sampler::token_points`, up to the range's
//! end rounded up to a whole tile, so every count in range lies between two samples of the
//! same staircase step), and batch sizes from 1 to the largest batch. No other context, no
//! rerouting.
//!
//! - CAPS: a batch's prefill holds at most `min(max_batch_size, n_requests)` prompts of at
//!   most the prompt distribution's `max` (or the trace's longest prompt) tokens, and every
//!   expert receives at most every token once; decode and head batches hold at most that
//!   many requests.
//! - GEM: an engine step holds at most `max_num_batched_tokens` tokens and at most
//!   `min(max_num_seqs, n_requests)` sequences of at most `prompt_tokens.max` tokens each;
//!   the mapping search also prices the routing trace's steps (`trace.tokens_per_step`
//!   tokens, or a recorded trace's largest step total over `top_k`); decode and head batches
//!   hold at most `min(max_num_seqs, n_requests)` sequences.

use crate::pipeline::Plan;
use sim::arrivals::ArrivalSpec;
use sim::cost::shape::MoeModelShape;
use sim::gem::config::TraceSpec;
use sim::scenario::Scenario;

/// What a calibration for one scenario measures.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioSampling {
    /// The scenario's model shape (with its `[model]` overrides).
    pub shape: MoeModelShape,
    /// The most tokens one pass of the scenario holds.
    pub max_tokens: usize,
    /// The most sequences one decode step or output head holds.
    pub max_batch: usize,
    /// How the two bounds were derived, for the log.
    pub derivation: String,
}

/// The sampling for `scenario`, or why it has none (families whose steps are not priced by a
/// MoE profile).
pub fn for_scenario(scenario: &Scenario) -> Result<ScenarioSampling, String> {
    if let Some(s) = scenario.get::<sim::caps::CapsScenario>() {
        {
            let prompt_max = match &s.arrival {
                ArrivalSpec::Trace { trace, .. } => trace
                    .rows()
                    .iter()
                    .map(|r| r.prompt_tokens.unwrap_or(s.workload.prompt_tokens.max))
                    .max()
                    .unwrap_or(s.workload.prompt_tokens.max),
                _ => s.workload.prompt_tokens.max,
            } as usize;
            let batch = (s.scheduler.max_batch_size as u64).min(s.workload.n_requests) as usize;
            Ok(ScenarioSampling {
                shape: s.shape.clone(),
                max_tokens: batch * prompt_max,
                max_batch: batch,
                derivation: format!(
                    "CAPS: {batch} requests per batch (max_batch_size, n_requests) x {prompt_max} \
                     prompt tokens at most"
                ),
            })
        }
    } else if let Some(s) = scenario.get::<sim::gem::GemScenario>() {
        {
            let sequences = s.serving.max_num_seqs.min(s.n_requests).max(1);
            let step = s
                .serving
                .max_num_batched_tokens
                .min(sequences * s.prompt_tokens.max as usize);
            let trace = match &s.trace {
                TraceSpec::Synthetic(params) => params.tokens_per_step,
                TraceSpec::Recorded { trace, .. } => {
                    (trace.max_step_total() / s.shape.top_k as f64).ceil() as usize
                }
            };
            Ok(ScenarioSampling {
                shape: s.shape.clone(),
                max_tokens: step.max(trace),
                max_batch: sequences,
                derivation: format!(
                    "GEM: engine steps of at most {step} tokens (max_num_batched_tokens, \
                     {sequences} sequences x {} prompt tokens), routing-trace steps of {trace} \
                     tokens, {sequences} sequences per decode step",
                    s.prompt_tokens.max
                ),
            })
        }
    } else {
        match scenario.family().name() {
            "expertweave" => Err("ExpertWeave's profile is measured for its expert width \
             and rerouting (docs/calibration.md: --expert-ffn, --reroute-tokens, --adapters); \
             scenario sampling covers CAPS and GEM"
                .into()),
            "mosaic" => Err("MOSAIC's steps are priced by a dense-decode profile \
             (expertsim-calibrate --dense-models), not a MoE profile"
                .into()),
            "chimera" => {
                Err("Chimera's steps are priced by its analytic engine cost, not a profile".into())
            }
            other => Err(format!(
                "the {other} family's steps are not priced by a MoE profile"
            )),
        }
    }
}

impl ScenarioSampling {
    /// `plan` narrowed to this scenario: the tile rule up to `max_tokens` (rounded up to a
    /// whole tile), every batch size up to `max_batch` as `sampler::batch_points` takes them,
    /// no sparse tail, no other context, no rerouting.
    pub fn apply(&self, plan: &mut Plan) {
        let tile = plan.tile.max(1);
        plan.dense_limit = self.max_tokens.max(1).div_ceil(tile) * tile;
        plan.sparse_step = 0;
        plan.sparse_limit = 0;
        plan.max_batch = self.max_batch.max(1);
        plan.head_batches = None;
        plan.contexts.clear();
        plan.context_batches.clear();
        plan.reroute_tokens.clear();
        plan.adapters.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Series;
    use crate::pipeline::schedule;
    use std::path::Path;

    fn load(path: &str, sets: &[&str]) -> Scenario {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let plan = sim::scenario::load(&root.join(path), &sets).unwrap();
        plan.cells[0].scenario.clone()
    }

    /// The live CAPS case: max_batch_size 4, 40 requests, prompts of at most 64 tokens, tile
    /// 64. By hand: 4 x 64 = 256 tokens, so tokens 1, 64, 65, 128, 129, 192, 193, 256 (both
    /// sides of each boundary below 256, and 256); batches 1, 2, 3, 4.
    #[test]
    fn live_caps_samples_its_batches_and_their_tile_boundaries() {
        let sampling = for_scenario(&load("scenarios/live/caps.toml", &[])).unwrap();
        assert_eq!((sampling.max_tokens, sampling.max_batch), (256, 4));
        assert_eq!(sampling.shape, MoeModelShape::live_tiny_moe());
        let mut plan = Plan::full();
        sampling.apply(&mut plan);
        let series = schedule(&plan);
        let names: Vec<String> = series.iter().map(|(s, _)| s.name()).collect();
        assert_eq!(
            names,
            [
                "expert_ffn",
                "non_expert_prefill",
                "non_expert_decode",
                "head"
            ]
        );
        let xs = |which: Series| series.iter().find(|(s, _)| *s == which).unwrap().1.clone();
        let tokens = vec![1, 64, 65, 128, 129, 192, 193, 256];
        assert_eq!(xs(Series::ExpertFfn), tokens);
        assert_eq!(xs(Series::NonExpertPrefill), tokens);
        assert_eq!(xs(Series::NonExpertDecode), vec![1, 2, 3, 4]);
        assert_eq!(xs(Series::Head), vec![1, 2, 3, 4]);
    }

    /// A range that ends inside a tile is rounded up to it: 3 requests x 50 tokens = 150 ->
    /// samples up to 192, so 150 lies between 129 and 192 on one staircase step. Fewer
    /// requests than max_batch_size bound the batch.
    #[test]
    fn a_range_inside_a_tile_rounds_up_to_the_tile() {
        let scenario = load(
            "scenarios/live/caps.toml",
            &[
                "workload.n_requests=3",
                "workload.prompt_tokens={ median = 24, sigma = 0.4, max = 50 }",
            ],
        );
        let sampling = for_scenario(&scenario).unwrap();
        assert_eq!((sampling.max_tokens, sampling.max_batch), (150, 3));
        let mut plan = Plan::full();
        sampling.apply(&mut plan);
        let tokens = &schedule(&plan)[0].1;
        assert_eq!(tokens, &vec![1, 64, 65, 128, 129, 192]);
    }

    /// The live GEM case: 16 requests of at most 64 prompt tokens (steps of at most 1024
    /// tokens, under max_num_batched_tokens 8192), but the synthetic routing trace's steps hold
    /// 2048 tokens (the default tokens_per_step), so tokens go to 2048; 16 sequences at most.
    #[test]
    fn live_gem_covers_its_routing_trace_steps() {
        let sampling = for_scenario(&load("scenarios/live/gem.toml", &[])).unwrap();
        assert_eq!((sampling.max_tokens, sampling.max_batch), (2048, 16));
        let narrow = load("scenarios/live/gem.toml", &["trace.tokens_per_step=100"]);
        assert_eq!(for_scenario(&narrow).unwrap().max_tokens, 1024);
    }

    #[test]
    fn families_without_a_moe_profile_say_why() {
        let message = for_scenario(&load("scenarios/live/mosaic.toml", &[])).unwrap_err();
        assert!(message.contains("--dense-models"), "{message}");
    }
}
