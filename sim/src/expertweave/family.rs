//! ExpertWeave as a registered `Family`: its tables, what a cell demands, one seed's run through
//! the policies' adapter-memory manager, and what live mode reads.

use super::{ExpertWeaveConfig, ExpertWeaveScenario};
use crate::arrivals::{ArrivalSpec, TraceStats};
use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::serving::QueuePolicyConfig;
use crate::serving::{CostSource, NotingSource, StepCost};
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The ExpertWeave family (expertweave.txt).
pub struct ExpertWeave;

impl Family for ExpertWeave {
    type Config = ExpertWeaveConfig;
    type Scenario = ExpertWeaveScenario;
    const NAME: &'static str = "expertweave";
    const DESCRIPTION: &'static str = "ExpertWeave: many ESFT adapters served on one MoE base model, memory managers and rerouting (docs/expertweave.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const RATE_KEY: Option<&'static str> = Some("arrival.rate_per_s");
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(super::run::CSV_COLUMNS);
    const PROFILE_FIELD: Option<&'static str> = Some("cost.profile");

    fn validate(
        config: ExpertWeaveConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ExpertWeaveScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &ExpertWeaveScenario) -> Vec<Demand> {
        use Quantity::*;
        let w = &s.workload;
        // Offline, the batch; otherwise what arrives over the horizon.
        let horizon_s = w.horizon_s.unwrap_or(0.0);
        let requests = match &s.arrival {
            ArrivalSpec::Offline => {
                Demand::new(Requests, s.max_arrivals as f64, "workload.n_requests")
            }
            ArrivalSpec::Poisson { rate_per_s } | ArrivalSpec::Bursty { rate_per_s, .. } => {
                Demand::new(Requests, rate_per_s * horizon_s, "arrival.rate_per_s")
            }
            _ => Demand::new(Requests, s.max_arrivals as f64, "workload.horizon_s"),
        };
        // Lengths spread up to (1 + length_spread) times their mean.
        let spread = 1.0 + w.length_spread;
        let trace = s.arrival.trace_stats(s.max_arrivals);
        let trace_tokens = trace
            .into_iter()
            .flat_map(|(_, stats)| stats.token_demands());
        let mut d = vec![
            Demand::new(SimSeconds, horizon_s, "workload.horizon_s"),
            requests,
            Demand::new(
                TokensPerRequest,
                w.prompt_tokens as f64 * spread,
                "workload.prompt_tokens",
            ),
            Demand::new(
                TokensPerRequest,
                w.output_tokens as f64 * spread,
                "workload.output_tokens",
            ),
            Demand::new(Gpus, s.device.n_devices as f64, "device.n_devices"),
            Demand::new(Adapters, s.adapters.len() as f64, "adapters.count"),
        ];
        d.extend(trace_tokens);
        d
    }

    fn trace_replay(s: &ExpertWeaveScenario) -> Option<(PathBuf, TraceStats)> {
        s.arrival.trace_stats(s.max_arrivals)
    }

    /// The run's cost source is the least measured one its steps reported (the measured
    /// profile's when `[cost] profile` names one, the roofline's otherwise); a run that priced no
    /// step (out of memory) names the source the scenario configures.
    fn run(
        scenario: &ExpertWeaveScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let memory = &mut *policies.adapter_memory(&scenario.memory);
        // Each instance admits first come, first served.
        let queue = &mut *policies.queue_policy(&QueuePolicyConfig::Fcfs);
        let plan = match super::plan(scenario, memory) {
            Ok(plan) => plan,
            Err(output) => {
                return Ok(Run {
                    output,
                    cost_source: super::run::cost_source(scenario).to_string(),
                });
            }
        };
        let popularity = scenario.popularity();
        let least_measured = Rc::new(Cell::new(None));
        let mut costs: Vec<Box<dyn StepCost + '_>> =
            super::simulated_costs(scenario, &plan, &popularity)
                .into_iter()
                .map(|steps| {
                    Box::new(NotingSource::new(steps, &least_measured)) as Box<dyn StepCost + '_>
                })
                .collect();
        let output = super::serve(
            scenario,
            seed,
            memory.kind(),
            &plan,
            queue,
            &mut costs,
            records,
        );
        let reported: Option<CostSource> = least_measured.get();
        Ok(Run {
            output,
            cost_source: match reported {
                Some(source) => source.cost_model_name().to_string(),
                None => super::run::cost_source(scenario).to_string(),
            },
        })
    }

    fn live_description(s: &ExpertWeaveScenario) -> LiveDescription {
        let shape = s.shape.moe_geometry();
        LiveDescription {
            model: shape.name.clone(),
            moe_shape: Some(shape),
            cost_source: match &s.profile {
                Some(p) => format!("measured ({})", p.device),
                None => "analytic-roofline".into(),
            },
        }
    }
}
