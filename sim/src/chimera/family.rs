//! Chimera as a registered `Family`: its tables, what a cell demands, one seed's run through the
//! policies' queue policy and router, and what live mode reads.

use super::{ChimeraConfig, ChimeraScenario};
use crate::arrivals::TraceStats;
use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::path::{Path, PathBuf};

/// The Chimera family (chimera.txt).
pub struct Chimera;

impl Family for Chimera {
    type Config = ChimeraConfig;
    type Scenario = ChimeraScenario;
    const NAME: &'static str = "chimera";
    const DESCRIPTION: &'static str = "Chimera: multi-agent workflows over heterogeneous LLM engines, queue policies and semantic routing (docs/chimera.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const RATE_KEY: Option<&'static str> = Some("workload.rps");
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(super::run::CSV_COLUMNS);

    fn validate(
        config: ChimeraConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ChimeraScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &ChimeraScenario) -> Vec<Demand> {
        use Quantity::*;
        let mut d = vec![
            Demand::new(SimSeconds, s.duration_s, "workload.duration_s"),
            Demand::new(Requests, s.rps * s.duration_s, "workload.rps"),
            Demand::new(Gpus, s.engines.len() as f64, "cluster.models"),
        ];
        if let Some((_, stats)) = Self::trace_replay(s) {
            d.extend(stats.token_demands());
        }
        d
    }

    fn run(
        scenario: &ChimeraScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let queue = &mut *policies.queue_policy(&scenario.queue);
        let router = &mut *policies.router(&scenario.routing);
        Ok(Run {
            output: super::run::run_recorded(scenario, seed, queue, router, records),
            cost_source: scenario.source(),
        })
    }

    fn live_description(s: &ChimeraScenario) -> LiveDescription {
        LiveDescription {
            moe_shape: None,
            model: s
                .engines
                .iter()
                .map(|e| e.cost.model.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            cost_source: s.source(),
        }
    }

    fn trace_replay(s: &ChimeraScenario) -> Option<(PathBuf, TraceStats)> {
        s.trace_stats()
    }
}
