//! ExpertWeave as a registered `Family`: its tables, what a cell demands, one seed's run through
//! the policies' adapter-memory manager, and what live mode reads.

use super::{ExpertWeaveConfig, ExpertWeaveScenario};
use crate::cost::profile::SourceKind;
use crate::family::{Family, LiveDescription, Run};
use crate::metrics::MetricInfo;
use crate::records::RecordSink;
use crate::runner::Policies;
use crate::scenario::file::FigureKind;
use crate::scenario::limits::{Demand, Quantity};
use crate::scenario::validate::{FieldError, LoadCache};
use std::path::Path;

/// The ExpertWeave family (expertweave.txt).
pub struct ExpertWeave;

impl Family for ExpertWeave {
    type Config = ExpertWeaveConfig;
    type Scenario = ExpertWeaveScenario;
    const NAME: &'static str = "expertweave";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const RATE_KEY: Option<&'static str> = Some("workload.rate_rps");
    const FIGURE_KINDS: &'static [FigureKind] = &[FigureKind::ExpertweaveMemory];
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(super::run::CSV_COLUMNS);
    const PROFILE_FIELD: Option<&'static str> = Some("cost.profile");

    fn validate(
        config: ExpertWeaveConfig,
        base_dir: &Path,
        _cache: &mut LoadCache,
    ) -> Result<ExpertWeaveScenario, FieldError> {
        config.validate(base_dir)
    }

    fn demands(s: &ExpertWeaveScenario) -> Vec<Demand> {
        use Quantity::*;
        let w = &s.workload;
        // Lengths spread up to (1 + length_spread) times their mean.
        let spread = 1.0 + w.length_spread;
        vec![
            Demand::new(SimSeconds, w.horizon_s, "workload.horizon_s"),
            Demand::new(Requests, w.rate_rps * w.horizon_s, "workload.rate_rps"),
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
        ]
    }

    fn run(
        scenario: &ExpertWeaveScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let memory = &mut *policies.adapter_memory(&scenario.memory);
        // `run_recorded` prices steps from the measured profile when `[cost] profile` names
        // one, by the roofline otherwise.
        let source = match scenario.profile {
            Some(_) => SourceKind::Measured,
            None => SourceKind::AnalyticRoofline,
        };
        Ok(Run {
            output: super::run_recorded(scenario, seed, memory, records),
            cost_source: source.as_str().to_string(),
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
