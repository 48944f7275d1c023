//! GEM as a registered `Family`: its tables, what a cell demands, one seed's run through the
//! policies' expert mapper, and what live mode reads.

use super::config::{Experiment, TraceSpec};
use super::{GemConfig, GemScenario};
use crate::family::FigureKind;
use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::serving::QueuePolicyConfig;
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::path::{Path, PathBuf};

/// The GEM family (gem.txt).
pub struct Gem;

impl Family for Gem {
    type Config = GemConfig;
    type Scenario = GemScenario;
    const NAME: &'static str = "gem";
    const DESCRIPTION: &'static str = "GEM: expert-to-GPU mapping (linear, EPLB, GEM) for expert-parallel serving on GPUs of uneven speed (docs/gem.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const FIGURE_KINDS: &'static [FigureKind] =
        &[FigureKind::GemExpertLoad, FigureKind::GemStaircase];
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(&[]);
    const PROFILE_FIELD: Option<&'static str> = Some("model.profile");

    fn validate(
        config: GemConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<GemScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &GemScenario) -> Vec<Demand> {
        use Quantity::*;
        let mut d = Vec::new();
        let n = s.n_requests as f64;
        d.push(Demand::new(Requests, n, "workload.n_requests"));
        let span = s.arrival.span_s(s.n_requests);
        if span > 0.0 {
            let field = match s.arrival {
                crate::arrivals::ArrivalSpec::Trace { .. } => "arrival.trace.time_scale",
                _ => "arrival.rate_per_s",
            };
            d.push(Demand::new(SimSeconds, span, field));
        }
        for (path, dist) in [
            ("workload.prompt_tokens", &s.prompt_tokens),
            ("workload.output_tokens", &s.output_tokens),
        ] {
            d.push(Demand::new(
                TokensPerRequest,
                f64::from(dist.max),
                &format!("{path}.max"),
            ));
        }
        d.push(Demand::new(Layers, s.shape.n_layers as f64, "model.name"));
        d.push(Demand::new(Experts, s.shape.n_experts as f64, "model.name"));
        d.push(Demand::new(Gpus, s.n_gpus as f64, "cluster.n_gpus"));
        d.extend(
            s.mapper
                .demands(s.shape.n_layers, s.shape.n_experts, "mapper"),
        );
        if s.experiment == Experiment::VariabilityAtScale {
            d.push(Demand::new(
                Samples,
                s.scale.draws as f64 * s.n_gpus as f64,
                "scale.draws",
            ));
        }
        if let TraceSpec::Synthetic(params) = &s.trace {
            let steps = params.observed_steps as f64 + params.unseen_steps as f64;
            d.push(Demand::new(TraceSteps, steps, "trace.unseen_steps"));
            d.push(Demand::new(
                RoutingEntries,
                steps * s.shape.n_layers as f64 * s.shape.n_experts as f64,
                "trace.unseen_steps",
            ));
        }
        d
    }

    fn run(
        scenario: &GemScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let mapper = &mut *policies.expert_mapper(&scenario.mapper);
        // GEM's engine admits first come, first served (vLLM's default).
        let queue = &mut *policies.queue_policy(&QueuePolicyConfig::Fcfs);
        Ok(Run {
            output: super::simulate_recorded(scenario, seed, mapper, queue, records),
            cost_source: scenario.profile.source.kind.as_str().to_string(),
        })
    }

    fn live_description(scenario: &GemScenario) -> LiveDescription {
        LiveDescription {
            moe_shape: Some(scenario.shape.clone()),
            model: scenario.shape.name.clone(),
            cost_source: scenario.profile.source.kind.as_str().to_string(),
        }
    }

    fn trace_replay(s: &GemScenario) -> Option<(PathBuf, crate::arrivals::TraceStats)> {
        s.arrival.trace_stats(s.n_requests)
    }
}
