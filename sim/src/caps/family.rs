//! CAPS as a registered `Family`: its tables, what a cell demands, one seed's run through the
//! policies' batch selector, and what live mode reads.

use super::config::ExecutionSpec;
use super::{CapsConfig, CapsScenario};
use crate::arrivals::ArrivalSpec;
use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::path::{Path, PathBuf};

/// The CAPS family (caps.txt).
pub struct Caps;

impl Family for Caps {
    type Config = CapsConfig;
    type Scenario = CapsScenario;
    const NAME: &'static str = "caps";
    const DESCRIPTION: &'static str = "CAPS: batch selection that balances expert load in static MoE batches (docs/cost-model.md, docs/reproduction.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const RATE_KEY: Option<&'static str> = Some("arrival.rate_per_s");
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(super::run::CSV_COLUMNS);
    const PROFILE_FIELD: Option<&'static str> = Some("execution.profile");

    fn validate(
        config: CapsConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<CapsScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &CapsScenario) -> Vec<Demand> {
        use Quantity::*;
        let mut d = Vec::new();
        let n = s.workload.n_requests as f64;
        d.push(Demand::new(Requests, n, "workload.n_requests"));
        let span = s.arrival.span_s(s.arrival.requests(n as usize));
        if span > 0.0 {
            let field = match s.arrival {
                ArrivalSpec::Trace { .. } => "arrival.trace.time_scale",
                _ => "arrival.rate_per_s",
            };
            d.push(Demand::new(SimSeconds, span, field));
        }
        // A queueing reference serves one batch at a time: the busy time alone bounds the span
        // from below.
        let service = match &s.execution {
            ExecutionSpec::Constant { service } => Some(service.as_secs_f64()),
            ExecutionSpec::Exponential { mean } => Some(mean.as_secs_f64()),
            ExecutionSpec::CostModel(_) => None,
        };
        if let Some(service) = service {
            let batches = (n / s.scheduler.max_batch_size as f64).ceil();
            d.push(Demand::new(
                SimSeconds,
                batches * service,
                "execution.service_ms",
            ));
        }
        for (path, dist) in [
            ("workload.prompt_tokens", &s.workload.prompt_tokens),
            ("workload.output_tokens", &s.workload.output_tokens),
        ] {
            d.push(Demand::new(
                TokensPerRequest,
                dist.median,
                &format!("{path}.median"),
            ));
            d.push(Demand::new(
                TokensPerRequest,
                f64::from(dist.max),
                &format!("{path}.max"),
            ));
        }
        let (layers, experts) = (s.shape.n_layers as f64, s.shape.n_experts as f64);
        d.push(Demand::new(Layers, layers, "model.n_layers"));
        d.push(Demand::new(Experts, experts, "model.n_experts"));
        let topics = s.workload.n_topics as f64;
        d.push(Demand::new(Topics, topics, "workload.n_topics"));
        d.push(Demand::new(
            RoutingEntries,
            topics * layers * experts,
            "workload.n_topics",
        ));
        d
    }

    fn run(
        scenario: &CapsScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let selector = &mut *policies.batch_selector(&scenario.selector);
        let (output, cost_source) = super::run::run(scenario, seed, selector, records);
        Ok(Run {
            output,
            cost_source,
        })
    }

    fn live_description(scenario: &CapsScenario) -> LiveDescription {
        LiveDescription {
            moe_shape: Some(scenario.shape.clone()),
            model: scenario.shape.name.clone(),
            cost_source: super::run::step_executor(scenario, 0).1,
        }
    }

    fn per_request_csv(scenario: &CapsScenario) -> bool {
        scenario.per_request_csv
    }

    fn trace_replay(s: &CapsScenario) -> Option<(PathBuf, crate::arrivals::TraceStats)> {
        s.arrival
            .trace_stats(usize::try_from(s.workload.n_requests).unwrap_or(usize::MAX))
    }
}
