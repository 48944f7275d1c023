//! The token counts and batch sizes a scenario can ask of its profile, so that a calibration
//! for that scenario measures only those (`expertsim-calibrate --for-scenario`, `expertsim
//! live --calibrate`): token counts from 1 to the most tokens one pass can hold, sampled on
//! both sides of every tile boundary in that range (`expertsim_scenario::cost::sampling::token_points`, up to the range's
//! end rounded up to a whole tile, so every count in range lies between two samples of the
//! same staircase step), and batch sizes from 1 to the largest batch. No other context, no
//! rerouting.
//!
//! - CAPS (the serving preset's static replica priced from expected routing): a batch's
//!   prefill holds at most `min(replica.max_num_seqs, n_requests)` prompts of at
//!   most the prompt distribution's `max` (or the trace's longest prompt) tokens, and every
//!   expert receives at most every token once; decode and head batches hold at most that
//!   many requests.
//! - A continuous MoE replica of the serving family (the GEM preset): an engine step holds at
//!   most the scheduler's token budget (`replica.scheduler.chunk_size`, or
//!   `max_num_batched_tokens`) and at most `min(replica.max_num_seqs, n_requests)` sequences of
//!   at most the prompt distribution's `max` tokens each; the mapping search also prices the
//!   routing trace's steps (`experts.trace.tokens_per_step` tokens, or a recorded trace's
//!   largest step total over `top_k`); decode and head batches hold at most
//!   `min(max_num_seqs, n_requests)` sequences. Its dense part and head are measured as one
//!   GPU's tensor-parallel shard of `replica.tensor_parallel`.
//! - ExpertWeave (the serving preset: an MLA model with `[adapters]`): a step holds at most the
//!   token budget (the replica scheduler's `max_num_batched_tokens` / `chunk_size`) and
//!   `max_num_seqs` sequences
//!   (or the arrivals' count) of at most the prompt length's upper end; the model is its
//!   routed-expert geometry (`MlaMoeShape::moe_geometry`), each layer's dense GEMM and the
//!   head are measured at their own widths (`--gemm-widths`), and the configured rerouting
//!   (`adapters.rerouting`) with the scenario's adapter count at the same token counts.

use crate::pipeline::Plan;
use expertsim_scenario::arrivals::ArrivalSpec;
use expertsim_scenario::cost::shape::{DenseModelShape, MlaMoeShape, MoeModelShape};
use expertsim_scenario::scenario::Scenario;
use expertsim_scenario::serving::expert_trace::TraceSpec;
use expertsim_scenario::serving_family::ServingScenario;
use expertsim_scenario::serving_family::adapters::AdapterSpec;
use expertsim_scenario::serving_family::config::{LengthSpec, SchedulerTable, ServedModel};
use expertsim_scenario::serving_family::rerouting::Rerouting;

/// What a calibration for one scenario measures.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioSampling {
    /// The scenario's model shape (with its `[model]` overrides).
    pub shape: MoeModelShape,
    /// The most tokens one pass of the scenario holds.
    pub max_tokens: usize,
    /// The most sequences one decode step or output head holds.
    pub max_batch: usize,
    /// The tensor-parallel degree of the scenario's dense part (GEM: its GPUs), at which the
    /// non-expert and head series are measured as one GPU's shard.
    pub tensor_parallel: usize,
    /// Output widths of the GEMMs the scenario prices at their own width (ExpertWeave).
    pub gemm_widths: Vec<usize>,
    /// The adapter count of the rerouting the scenario prices, at the token counts
    /// (ExpertWeave).
    pub reroute_adapters: Option<usize>,
    /// How the two bounds were derived, for the log.
    pub derivation: String,
}

/// The dense models a scenario's steps are priced by a dense-decode profile of (a serving
/// scenario's replica groups when every one serves a dense model, as the Chimera preset's
/// engines and the MOSAIC preset's experts do), in first-use order without repeats; `None` for a scenario
/// priced by a MoE profile. `expertsim-calibrate --for-scenario` measures these (`--dense-models`), at
/// `--scale-widths` / `--scale-layers` and on the `--dense-rows` x `--dense-contexts` grid.
pub fn dense_models(scenario: &Scenario) -> Option<Vec<DenseModelShape>> {
    let s = scenario.get::<ServingScenario>()?;
    if !s
        .groups()
        .all(|(model, _)| matches!(model, ServedModel::Dense(_)))
    {
        return None;
    }
    let shapes = s.groups().filter_map(|(model, _)| match model {
        ServedModel::Dense(shape) => Some(shape.clone()),
        _ => None,
    });
    let mut distinct: Vec<DenseModelShape> = Vec::new();
    for shape in shapes {
        if !distinct.contains(&shape) {
            distinct.push(shape);
        }
    }
    Some(distinct)
}

/// The most prompt tokens one request of `s` holds: its prompt distribution's `max`, or a
/// trace's longest prompt.
fn serving_prompt_max(s: &ServingScenario) -> usize {
    let dist_max = |spec: &LengthSpec| match spec {
        LengthSpec::Distribution(lengths) => lengths.max(),
        LengthSpec::Trace => 1,
    };
    let longest = match &s.arrival {
        ArrivalSpec::Trace { trace, .. } => trace
            .rows()
            .iter()
            .map(|r| r.prompt_tokens.unwrap_or(dist_max(&s.prompt_tokens)))
            .max()
            .unwrap_or(dist_max(&s.prompt_tokens)),
        _ => dist_max(&s.prompt_tokens),
    };
    longest as usize
}

/// The most tokens one engine step of `s`'s replica holds: its scheduler's token budget
/// (`max_num_batched_tokens`, or Sarathi's `chunk_size`); none for orca without a budget or a
/// static replica.
fn token_budget(s: &ServingScenario) -> Option<usize> {
    match &s.replica.scheduler {
        SchedulerTable::Sarathi { chunk_size, .. } => Some(*chunk_size as usize),
        SchedulerTable::Vllm {
            max_num_batched_tokens,
            ..
        } => Some(*max_num_batched_tokens as usize),
        SchedulerTable::Orca {
            max_num_batched_tokens,
            ..
        } => max_num_batched_tokens.map(|b| b as usize),
        SchedulerTable::Static { .. } => None,
    }
}

/// The output widths of an MLA model's GEMMs priced at their own width: each layer's dense
/// part (its non-routed parameters over the hidden size) and the head, sorted, without repeats.
fn own_width_gemms(shape: &MlaMoeShape) -> Vec<usize> {
    let mut widths: Vec<usize> = (0..shape.n_layers)
        .map(|layer| shape.layer_non_routed_params(layer).div_ceil(shape.hidden) as usize)
        .chain([shape.vocab as usize])
        .collect();
    widths.sort_unstable();
    widths.dedup();
    widths
}

/// The ExpertWeave preset (a serving scenario of an MLA model with `[adapters]`): a step holds
/// at most the scheduler's token budget and `min(replica.max_num_seqs, requests)` sequences of
/// at most the longest prompt; the routed-expert geometry, each layer's dense GEMM and the head
/// at their own widths, and `adapters.rerouting` with the adapter count.
fn adapter_sampling(
    s: &ServingScenario,
    shape: &MlaMoeShape,
    adapters: &AdapterSpec,
) -> ScenarioSampling {
    let prompt_max = serving_prompt_max(s);
    let sequences = s.replica.max_num_seqs.min(s.requests()).max(1);
    let whole = sequences.saturating_mul(prompt_max);
    let step = token_budget(s).map_or(whole, |b| whole.min(b));
    let gemm_widths = own_width_gemms(shape);
    ScenarioSampling {
        shape: shape.moe_geometry(),
        max_tokens: step,
        max_batch: sequences,
        tensor_parallel: 1,
        derivation: format!(
            "ExpertWeave: steps of at most {step} tokens (the scheduler's budget, {sequences} \
             sequences x {prompt_max} prompt tokens), its layers' dense GEMMs and head at \
             widths {gemm_widths:?}, {} rerouting with {} adapters",
            match adapters.rerouting {
                Rerouting::Fused => "fused",
                Rerouting::Unfused => "unfused",
            },
            adapters.adapters.len()
        ),
        gemm_widths,
        reroute_adapters: Some(adapters.adapters.len()),
    }
}

/// The sampling for `scenario`, or why it has none (families whose steps are not priced by a
/// MoE profile).
pub fn for_scenario(scenario: &Scenario) -> Result<ScenarioSampling, String> {
    if let Some(s) = scenario.get::<expertsim_scenario::serving_family::ServingScenario>() {
        if let (ServedModel::Mla(shape), Some(adapters)) = (&s.model, &s.adapters) {
            return Ok(adapter_sampling(s, shape, adapters));
        }
        let prompt_max = serving_prompt_max(s);
        let batch = s.replica.max_num_seqs.min(s.requests()).max(1);
        let static_priced = s.replica.static_cost.as_ref().and_then(|c| c.model());
        let budget = token_budget(s);
        let (shape, budget) = match (&s.model, static_priced, &s.replica.scheduler) {
            // The CAPS preset: one static replica whose batches are priced by an MoE profile.
            (_, Some(_), _) => (
                s.model.experts().expect("a priced static replica is MoE"),
                None,
            ),
            (ServedModel::Moe(shape), None, scheduler)
                if !matches!(scheduler, SchedulerTable::Static { .. }) =>
            {
                (shape.clone(), Some(budget))
            }
            _ if dense_models(scenario).is_some() => {
                return Err(
                    "a serving scenario whose replica groups all serve dense models is priced by \
                     a dense-decode profile of its models (scenario_points::dense_models, \
                     --dense-models), not a MoE profile"
                        .into(),
                );
            }
            _ => {
                return Err(
                    "a serving scenario is priced by a MoE profile only on a continuous replica \
                     of an MoE model or a static replica with replica.scheduler.pricing = \
                     \"expected_routing\", \"cv\" or \"straggler\""
                        .into(),
                );
            }
        };
        if let Some(budget) = budget {
            // A continuous MoE replica (the GEM preset).
            let step = budget.unwrap_or(usize::MAX).min(batch * prompt_max);
            let trace = match &s.expert_trace {
                Some(TraceSpec::Synthetic(params)) => params.tokens_per_step,
                Some(TraceSpec::Recorded { trace, .. }) => {
                    (trace.max_step_total() / shape.top_k as f64).ceil() as usize
                }
                None => 0,
            };
            let tp = s.replica.tensor_parallel;
            return Ok(ScenarioSampling {
                shape,
                max_tokens: step.max(trace),
                max_batch: batch,
                tensor_parallel: tp,
                gemm_widths: vec![],
                reroute_adapters: None,
                derivation: format!(
                    "continuous MoE replica: engine steps of at most {step} tokens (the \
                     scheduler's token budget, {batch} sequences x {prompt_max} prompt tokens), \
                     routing-trace steps of {trace} tokens, {batch} sequences per decode step; \
                     the dense part and head as one GPU's shard of {tp} (tensor parallelism)"
                ),
            });
        }
        Ok(ScenarioSampling {
            shape,
            max_tokens: batch * prompt_max,
            max_batch: batch,
            tensor_parallel: 1,
            gemm_widths: vec![],
            reroute_adapters: None,
            derivation: format!(
                "CAPS preset: {batch} requests per batch (replica.max_num_seqs, n_requests) x \
                 {prompt_max} prompt tokens at most"
            ),
        })
    } else {
        Err(format!(
            "the {} family's steps are not priced by a MoE profile",
            scenario.family().name()
        ))
    }
}

impl ScenarioSampling {
    /// `plan` narrowed to this scenario: the tile rule up to `max_tokens` (rounded up to a
    /// whole tile), every batch size up to `max_batch` as `expertsim_scenario::cost::sampling::batch_points` takes them,
    /// no sparse tail, no other context, no rerouting.
    pub fn apply(&self, plan: &mut Plan) {
        let tile = plan.tile.max(1);
        plan.dense_limit = self.max_tokens.max(1).div_ceil(tile) * tile;
        plan.sparse_step = 0;
        plan.sparse_limit = 0;
        plan.max_batch = self.max_batch.max(1);
        plan.tensor_parallel = self.tensor_parallel.max(1);
        plan.head_batches = None;
        plan.contexts.clear();
        plan.context_batches.clear();
        plan.gemm_widths = self.gemm_widths.clone();
        match self.reroute_adapters {
            Some(adapters) => {
                plan.reroute_tokens =
                    expertsim_scenario::cost::sampling::token_points(tile, plan.dense_limit, 0, 0);
                plan.adapters = vec![adapters];
            }
            None => {
                plan.reroute_tokens.clear();
                plan.adapters.clear();
            }
        }
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
        let plan = expertsim_scenario::scenario::load(&root.join(path), &sets).unwrap();
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
                "expert_gemm/w13",
                "expert_gemm/w2",
                "non_expert_prefill",
                "non_expert_decode",
                "head"
            ]
        );
        assert_eq!(plan.tensor_parallel, 1);
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
                "workload.prompt_tokens={ kind = \"log_normal\", median = 24, sigma = 0.4, max = 50 }",
            ],
        );
        let sampling = for_scenario(&scenario).unwrap();
        assert_eq!((sampling.max_tokens, sampling.max_batch), (150, 3));
        let mut plan = Plan::full();
        sampling.apply(&mut plan);
        let tokens = &schedule(&plan)[0].1;
        assert_eq!(tokens, &vec![1, 64, 65, 128, 129, 192]);
    }

    /// The live GEM case (a continuous MoE replica): 16 requests of at most 64 prompt tokens
    /// (steps of at most 1024 tokens, under the 8192-token chunk), but the synthetic routing
    /// trace's steps hold 2048 tokens (experts.trace.tokens_per_step), so tokens go to 2048; 16
    /// sequences at most. A smaller chunk bounds the step.
    #[test]
    fn live_gem_covers_its_routing_trace_steps() {
        let sampling = for_scenario(&load("scenarios/live/gem.toml", &[])).unwrap();
        assert_eq!((sampling.max_tokens, sampling.max_batch), (2048, 16));
        assert_eq!(sampling.shape, MoeModelShape::live_tiny_moe());
        // Its dense part runs as one GPU's shard of 4.
        assert_eq!(sampling.tensor_parallel, 4);
        let narrow = load(
            "scenarios/live/gem.toml",
            &["experts.trace.tokens_per_step=100"],
        );
        assert_eq!(for_scenario(&narrow).unwrap().max_tokens, 1024);
        let chunked = load(
            "scenarios/live/gem.toml",
            &[
                "experts.trace.tokens_per_step=100",
                "replica.scheduler.chunk_size=300",
            ],
        );
        assert_eq!(for_scenario(&chunked).unwrap().max_tokens, 300);
    }

    /// The live ExpertWeave case (the serving family's preset): at most 16 sequences
    /// (replica.max_num_seqs) of at most 42 prompt tokens (32 x 1.3); the routed geometry of
    /// live-tiny-mla; its dense layer's, MoE layers' and head's widths; fused rerouting with its
    /// 3 adapters.
    #[test]
    fn live_expertweave_measures_its_widths_and_rerouting() {
        let scenario = load("scenarios/live/expertweave.toml", &[]);
        let sampling = for_scenario(&scenario).unwrap();
        let shape = MlaMoeShape::live_tiny_mla();
        assert_eq!(sampling.shape, shape.moe_geometry());
        assert_eq!(sampling.max_batch, 16);
        let widths: Vec<usize> = (0..shape.n_layers)
            .map(|l| shape.layer_non_routed_params(l).div_ceil(shape.hidden) as usize)
            .collect();
        for w in widths.iter().chain([&(shape.vocab as usize)]) {
            assert!(sampling.gemm_widths.contains(w), "{w}: {sampling:?}");
        }
        assert_eq!(sampling.reroute_adapters, Some(3));
        let mut plan = Plan::full();
        sampling.apply(&mut plan);
        let names: Vec<String> = schedule(&plan).iter().map(|(s, _)| s.name()).collect();
        assert!(
            names.contains(&"reroute/fused/adapters=3".to_string()),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n.starts_with("dense_gemm/out=")),
            "{names:?}"
        );
    }

    /// The ExpertWeave preset's Figure 7 file narrowed to its unfused 2048-token cell: one
    /// adapter (gate-math), at most 256 sequences (`replica.max_num_seqs`; the horizon bounds
    /// no count), steps of at most the orca budget's 8192 tokens (256 x 2048 above it), or
    /// 1000 when the budget says so; the routed geometry and widths of esft-vanilla-16b.
    #[test]
    fn the_expertweave_preset_reads_its_adapters_and_budget() {
        let sets = [
            "workload.prompt_tokens.value=2048",
            "adapters.rerouting=\"unfused\"",
            "adapters.memory.kind=\"virtual_weight_tensor\"",
        ];
        let sampling = for_scenario(&load("scenarios/expertweave/rerouting.toml", &sets)).unwrap();
        let shape = MlaMoeShape::esft_vanilla_16b();
        assert_eq!(sampling.shape, shape.moe_geometry());
        assert_eq!((sampling.max_tokens, sampling.max_batch), (8192, 256));
        assert_eq!(sampling.reroute_adapters, Some(1));
        assert!(sampling.gemm_widths.contains(&(shape.vocab as usize)));
        let mut plan = Plan::full();
        sampling.apply(&mut plan);
        let names: Vec<String> = schedule(&plan).iter().map(|(s, _)| s.name()).collect();
        assert!(
            names.contains(&"reroute/unfused/adapters=1".to_string()),
            "{names:?}"
        );
        let budget = [
            &sets[..],
            &["replica.scheduler.max_num_batched_tokens=1000"],
        ]
        .concat();
        let narrow = for_scenario(&load("scenarios/expertweave/rerouting.toml", &budget)).unwrap();
        assert_eq!(narrow.max_tokens, 1000);
    }

    #[test]
    fn families_without_a_moe_profile_say_why() {
        let message = for_scenario(&load("scenarios/live/mosaic.toml", &[])).unwrap_err();
        assert!(message.contains("--dense-models"), "{message}");
    }

    /// MOSAIC's experts and Chimera's engines (serving replica groups) are the dense models
    /// their scenarios calibrate, in group order.
    #[test]
    fn dense_families_name_their_models() {
        let names = |path: &str| -> Vec<String> {
            dense_models(&load(path, &[]))
                .unwrap()
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        let mosaic = names("scenarios/live/mosaic.toml");
        assert_eq!(mosaic.len(), 3, "{mosaic:?}");
        assert!(mosaic[0].contains("Qwen2.5-7B"), "{mosaic:?}");
        assert!(
            mosaic[1].to_lowercase().contains("llama-3.1-8b"),
            "{mosaic:?}"
        );
        assert!(mosaic[2].to_lowercase().contains("granite"), "{mosaic:?}");
        // The Chimera preset's two replica groups (serving family), in group order.
        let chimera = names("scenarios/live/chimera.toml");
        assert_eq!(chimera.len(), 2, "{chimera:?}");
        assert!(chimera[0].contains("Qwen2.5-1.5B"), "{chimera:?}");
        assert!(chimera[1].contains("Qwen2.5-7B"), "{chimera:?}");
        assert!(dense_models(&load("scenarios/live/caps.toml", &[])).is_none());
    }
}
