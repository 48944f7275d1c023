//! Experiments of a serving scenario that serve no request (`[experiment]`, GEM's two): the
//! expected slowest-to-fastest throughput gap among N GPUs (`variability_at_scale`, gem.txt
//! section 6, Figure 19: `serving::variability::variability_at_scale`) and the kernel time of
//! one GPU's variability profile of the scenario's MoE model (`profiling_cost`, section 5.4,
//! Figure 18: `serving::profiling`). A run computes its numbers on those shared pieces
//! directly; every serving metric of it is null.

use super::config::{ReplicaSpec, SchedulerTable, ServedModel};
use crate::cost::gpu::GpuSpec;
use crate::cost::shape::MoeModelShape;
use crate::metrics::RunOutput;
use crate::rng::stream;
use crate::serving::expert_trace::TraceSpec;
use crate::serving::profiling::{
    self, ProfilingMethod, ProfilingTable, d_repetitions, d_sweep_max_tokens,
};
use crate::serving::variability::{ThroughputDistribution, variability_at_scale};
use crate::validate::{FieldError, at_least_one, field_error};
use serde::{Deserialize, Serialize};
use serde_json::json;

fn d_draws() -> usize {
    10_000
}

/// `[experiment]`: what a run computes instead of serving.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ExperimentTable {
    /// The expected gap among `gpus` GPUs drawn from `distribution`, over `draws` Monte-Carlo
    /// draws from `(seed, "gem/scale")`.
    VariabilityAtScale {
        gpus: usize,
        #[serde(default = "d_draws")]
        draws: usize,
        #[serde(default)]
        distribution: ThroughputDistribution,
    },
    /// The kernel time of profiling one GPU of the replica (the model's MoE layer over its
    /// expert-parallel GPUs, on `replica.gpu`) by `method`, `repetitions` launches per count.
    ProfilingCost {
        #[serde(default)]
        method: ProfilingMethod,
        #[serde(default = "d_repetitions")]
        repetitions: u32,
        #[serde(default = "d_sweep_max_tokens")]
        sweep_max_tokens: usize,
    },
}

/// A validated experiment.
#[derive(Clone, Debug, PartialEq)]
pub enum Experiment {
    VariabilityAtScale {
        gpus: usize,
        draws: usize,
        distribution: ThroughputDistribution,
    },
    ProfilingCost {
        profiling: ProfilingTable,
        gpu: Box<GpuSpec>,
        shape: Box<MoeModelShape>,
        /// The expert-parallel GPUs the layer's experts are spread over.
        gpus: usize,
        /// The most routed rows one GPU receives in a step (`per_gpu_token_range`).
        range: usize,
    },
}

impl ExperimentTable {
    /// Checks the table against the scenario's first replica group (its model, GPU, expert
    /// parallelism and step budget) and its expert trace.
    pub fn validate(
        &self,
        model: &ServedModel,
        replica: &ReplicaSpec,
        trace: Option<&TraceSpec>,
    ) -> Result<Experiment, FieldError> {
        match self {
            ExperimentTable::VariabilityAtScale {
                gpus,
                draws,
                distribution,
            } => {
                distribution
                    .check()
                    .map_err(|(f, m)| field_error(&format!("experiment.distribution.{f}"), m))?;
                Ok(Experiment::VariabilityAtScale {
                    gpus: at_least_one("experiment.gpus", *gpus)?,
                    draws: at_least_one("experiment.draws", *draws)?,
                    distribution: distribution.clone(),
                })
            }
            ExperimentTable::ProfilingCost {
                method,
                repetitions,
                sweep_max_tokens,
            } => {
                let profiling = ProfilingTable {
                    method: *method,
                    repetitions: *repetitions,
                    sweep_max_tokens: *sweep_max_tokens,
                };
                profiling.check("experiment")?;
                let Some(shape) = model.experts() else {
                    return Err(field_error(
                        "experiment.kind",
                        "profiling_cost profiles an MoE layer: model.name must be an MoE model",
                    ));
                };
                let budget = match &replica.scheduler {
                    SchedulerTable::Sarathi { chunk_size, .. } => *chunk_size as usize,
                    SchedulerTable::Vllm {
                        max_num_batched_tokens,
                        ..
                    } => *max_num_batched_tokens as usize,
                    SchedulerTable::Orca {
                        max_num_batched_tokens,
                        ..
                    } => max_num_batched_tokens.unwrap_or(0) as usize,
                    SchedulerTable::Static { .. } => 0,
                };
                let trace_step = match trace {
                    Some(TraceSpec::Synthetic(params)) => params.tokens_per_step,
                    _ => 0,
                };
                let step_tokens = budget.max(trace_step);
                if step_tokens == 0 {
                    return Err(field_error(
                        "experiment.kind",
                        "profiling_cost profiles the per-GPU range of a step: give the \
                         replica a token budget (replica.scheduler's chunk_size or \
                         max_num_batched_tokens) or experts.trace",
                    ));
                }
                let gpus = replica.expert_parallel.max(1);
                Ok(Experiment::ProfilingCost {
                    range: profiling::per_gpu_token_range(step_tokens, &shape, gpus),
                    profiling,
                    gpu: Box::new(replica.gpu.clone()),
                    shape: Box::new(shape),
                    gpus,
                })
            }
        }
    }
}

impl Experiment {
    /// Random draws the run takes (for the scenario's demands): the gap's draws x GPUs.
    pub fn samples(&self) -> Option<(f64, f64)> {
        match self {
            Experiment::VariabilityAtScale { gpus, draws, .. } => {
                Some((*draws as f64 * *gpus as f64, *gpus as f64))
            }
            Experiment::ProfilingCost { .. } => None,
        }
    }

    /// The run of seed `seed`: the serving metrics null, the experiment's own set.
    pub fn run(&self, seed: u64) -> RunOutput {
        let (set, details): (Vec<(&str, f64)>, _) = match self {
            Experiment::VariabilityAtScale {
                gpus,
                draws,
                distribution,
            } => {
                let point = variability_at_scale(
                    distribution,
                    &[*gpus],
                    *draws,
                    &mut stream(seed, "gem/scale"),
                )
                .remove(0);
                (
                    vec![
                        ("gap_vs_fastest", point.gap_vs_fastest),
                        ("gap_vs_slowest", point.gap_vs_slowest),
                    ],
                    json!({
                        "experiment": "variability_at_scale",
                        "note": "serving metrics are not computed by this experiment and are null",
                        "draws": draws,
                        "distribution": distribution,
                        "sigmas": distribution.sigmas(),
                        "scale": point,
                    }),
                )
            }
            Experiment::ProfilingCost {
                profiling,
                gpu,
                shape,
                gpus,
                range,
            } => {
                let cost = profiling::profiling_cost(profiling, gpu, shape, *gpus, *range);
                (
                    vec![
                        ("profiling_min", cost.minutes),
                        ("profiled_counts", cost.counts as f64),
                    ],
                    json!({
                        "experiment": "profiling_cost",
                        "note": "serving metrics are not computed by this experiment and are null",
                        "repetitions": profiling.repetitions,
                        "profiling": cost,
                    }),
                )
            }
        };
        RunOutput {
            scalars: super::TABLE
                .iter()
                .map(|m| {
                    let value = set.iter().find(|(name, _)| *name == m.name);
                    (m.name.to_string(), value.map_or(f64::NAN, |(_, v)| *v))
                })
                .collect(),
            details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_cache::LoadCache;
    use crate::serving_family::{ServingConfig, ServingScenario};
    use std::path::Path;

    /// GEM's replica (4 H200s, expert parallelism 4, an 8192-token step) of `model` with the
    /// experiment table `experiment`.
    fn scenario(model: &str, experiment: &str) -> Result<ServingScenario, FieldError> {
        scenario_on(
            model,
            "gpus = 4\ntensor_parallel = 4\nexpert_parallel = 4",
            experiment,
        )
    }

    fn scenario_on(
        model: &str,
        parallel: &str,
        experiment: &str,
    ) -> Result<ServingScenario, FieldError> {
        let text = format!(
            "experiment = {experiment}\n[model]\nname = \"{model}\"\n\
             [replica]\ngpu = \"H200\"\n{parallel}\n\
             scheduler = {{ kind = \"sarathi\", chunk_size = 8192, kv = \"unbounded\" }}\n\
             [workload]\nn_requests = 1\ndataset = \"sharegpt\"\n\
             [arrival]\npattern = \"offline\"\n"
        );
        let config: ServingConfig = toml::from_str(&text).unwrap();
        config.validate(Path::new("."), &mut LoadCache::default())
    }

    fn run(s: &ServingScenario, seed: u64) -> RunOutput {
        s.experiment.as_ref().expect("an experiment").run(seed)
    }

    /// The gap is the shared Monte-Carlo's on `(seed, "gem/scale")`, grows from 4 to 64 GPUs,
    /// and nothing is served (the serving metrics are null).
    #[test]
    fn the_gap_is_the_shared_draws_and_grows_with_the_gpus() {
        let of = |gpus: usize| {
            let s = scenario(
                "mixtral-8x7b",
                &format!("{{ kind = \"variability_at_scale\", gpus = {gpus}, draws = 2000 }}"),
            )
            .unwrap();
            run(&s, 3)
        };
        let (four, many) = (of(4), of(64));
        let expected = variability_at_scale(
            &ThroughputDistribution::default(),
            &[4],
            2000,
            &mut stream(3, "gem/scale"),
        )
        .remove(0);
        assert_eq!(four.scalar("gap_vs_slowest"), Some(expected.gap_vs_slowest));
        assert_eq!(four.scalar("gap_vs_fastest"), Some(expected.gap_vs_fastest));
        assert!(many.scalar("gap_vs_slowest").unwrap() > expected.gap_vs_slowest);
        assert!(four.scalar("e2e_mean_ms").unwrap().is_nan());
        assert!(four.scalar("profiling_min").unwrap().is_nan());
        assert_eq!(four.scalars.len(), crate::serving_family::TABLE.len());
        let bad = scenario(
            "mixtral-8x7b",
            "{ kind = \"variability_at_scale\", gpus = 0 }",
        );
        assert_eq!(bad.unwrap_err().path, "experiment.gpus");
    }

    /// Llama-4-Scout (16 experts, top-1, 4 per GPU at expert parallelism 4) routes at most one
    /// row per token to a GPU: its range is the replica's 8192-token step, sampled at 132 tile
    /// counts; the full sweep's 16384 counts cost over 100 times as much. A dense model and
    /// bad counts are refused naming the key.
    #[test]
    fn profiling_cost_profiles_the_replicas_expert_parallel_step() {
        let gem = scenario("llama-4-scout", "{ kind = \"profiling_cost\" }").unwrap();
        let Some(Experiment::ProfilingCost { range, .. }) = &gem.experiment else {
            panic!("a profiling experiment");
        };
        assert_eq!(*range, 8192);
        let g = run(&gem, 1);
        assert_eq!(g.scalar("profiled_counts"), Some(132.0));
        let sweep = scenario(
            "llama-4-scout",
            "{ kind = \"profiling_cost\", method = \"full_sweep\" }",
        )
        .unwrap();
        let s = run(&sweep, 1);
        assert_eq!(s.scalar("profiled_counts"), Some(16_384.0));
        let ratio = s.scalar("profiling_min").unwrap() / g.scalar("profiling_min").unwrap();
        assert!(ratio > 100.0, "{ratio}");
        assert!(g.scalar("gap_vs_slowest").unwrap().is_nan());
        let dense = scenario_on("llama-2-7b", "gpus = 1", "{ kind = \"profiling_cost\" }");
        assert_eq!(dense.unwrap_err().path, "experiment.kind");
        let none = scenario(
            "llama-4-scout",
            "{ kind = \"profiling_cost\", repetitions = 0 }",
        );
        assert_eq!(none.unwrap_err().path, "experiment.repetitions");
    }
}
