//! MOSAIC as a registered `Family`: its tables, what a cell demands, one seed's run through the
//! policies' placement and aggregation gate, and what live mode reads.

use super::{MosaicConfig, MosaicScenario};
use crate::cost::profile::SourceKind;
use crate::family::{Family, LiveDescription, Run};
use crate::metrics::MetricInfo;
use crate::records::RecordSink;
use crate::runner::Policies;
use crate::scenario::file::FigureKind;
use crate::scenario::limits::{Demand, Quantity};
use crate::scenario::validate::{FieldError, LoadCache};
use std::path::Path;

/// The MOSAIC family (mosaic.txt).
pub struct Mosaic;

impl Family for Mosaic {
    type Config = MosaicConfig;
    type Scenario = MosaicScenario;
    const NAME: &'static str = "mosaic";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const FIGURE_KINDS: &'static [FigureKind] =
        &[FigureKind::MosaicTimeline, FigureKind::MosaicDecodeCurves];

    fn validate(
        config: MosaicConfig,
        base_dir: &Path,
        _cache: &mut LoadCache,
    ) -> Result<MosaicScenario, FieldError> {
        config.validate(base_dir)
    }

    fn demands(s: &MosaicScenario) -> Vec<Demand> {
        use Quantity::*;
        let mut d = vec![
            Demand::new(
                Requests,
                f64::from(s.dataset.questions) * 3.0,
                "dataset.questions",
            ),
            Demand::new(Gpus, f64::from(s.n_workers), "cluster.n_workers"),
            Demand::new(
                TokensPerRequest,
                f64::from(s.dataset.prompt.max),
                "dataset.prompt_tokens_mean",
            ),
        ];
        for (i, expert) in s.experts.iter().enumerate() {
            d.push(Demand::new(
                TokensPerRequest,
                f64::from(expert.output.max),
                &format!("experts[{i}].max_output_tokens"),
            ));
        }
        d
    }

    /// MOSAIC has no per-request records: its offline prompts are timed per worker session.
    fn run(
        scenario: &MosaicScenario,
        seed: u64,
        policies: &dyn Policies,
        _records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let output = super::try_simulate(
            scenario,
            seed,
            policies.placement(&scenario.placement).as_mut(),
            policies.aggregation_gate(&scenario.gate).as_mut(),
        )
        .map_err(|e| e.to_string())?;
        // `SimulatedSessionCost` prices the sessions from the measured decode profile when the
        // scenario names one, from the analytic decode model otherwise.
        let source = match scenario.decode_profile {
            Some(_) => SourceKind::Measured,
            None => SourceKind::AnalyticRoofline,
        };
        Ok(Run {
            output,
            cost_source: source.as_str().to_string(),
        })
    }

    fn live_description(s: &MosaicScenario) -> LiveDescription {
        LiveDescription {
            moe_shape: None,
            model: s
                .experts
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            cost_source: match &s.decode_profile {
                Some(p) => format!("measured ({}, {})", p.device, p.path),
                None => format!("analytic-roofline ({} decode model)", s.serving.gpu.name),
            },
        }
    }
}
