//! MOSAIC as a registered `Family`: its tables, what a cell demands, one seed's run through the
//! policies' placement and aggregation gate, and what live mode reads.

use super::{MosaicConfig, MosaicScenario, SessionPricing, SimulatedPricing};
use crate::family::FigureKind;
use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::serving::QueuePolicyConfig;
use crate::serving::{CostSource, NotingSource, StepCost};
use crate::time::SimDuration;
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

/// The MOSAIC family (mosaic.txt).
pub struct Mosaic;

impl Family for Mosaic {
    type Config = MosaicConfig;
    type Scenario = MosaicScenario;
    const NAME: &'static str = "mosaic";
    const DESCRIPTION: &'static str = "MOSAIC: mixture-of-agents model placement (ILP, round-robin, ...) and the aggregation gate (docs/mosaic.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const FIGURE_KINDS: &'static [FigureKind] =
        &[FigureKind::MosaicTimeline, FigureKind::MosaicDecodeCurves];

    fn validate(
        config: MosaicConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<MosaicScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &MosaicScenario) -> Vec<Demand> {
        use Quantity::*;
        let mut d = vec![
            Demand::new(
                Requests,
                f64::from(s.dataset.questions) * 3.0,
                "dataset.questions",
            ),
            // The calibration sweep's largest session (its sizes double up to it).
            Demand::new(
                Requests,
                f64::from(s.calibration.sweep_max_prompts),
                "calibration.sweep_max_prompts",
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
    /// The run's cost source is the one its expert sessions' steps reported, named after the
    /// measured set when `serving.measured` names one (as Chimera's and GEM's are).
    fn run(
        scenario: &MosaicScenario,
        seed: u64,
        policies: &dyn Policies,
        _records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        let mut pricing = SourceNoting {
            pricing: SimulatedPricing::of(scenario),
            n_experts: scenario.experts.len(),
            least_measured: Rc::new(Cell::new(None)),
        };
        let output = super::try_simulate_on(
            scenario,
            seed,
            policies.placement(&scenario.placement).as_mut(),
            policies.aggregation_gate(&scenario.gate).as_mut(),
            // Each session admits its prompts first come, first served (vLLM's default).
            policies.queue_policy(&QueuePolicyConfig::Fcfs).as_mut(),
            &mut pricing,
        )
        .map_err(|e| e.to_string())?;
        let reported = pricing
            .least_measured
            .get()
            .map_or("none", CostSource::cost_model_name);
        Ok(Run {
            output,
            cost_source: match &scenario.measured {
                Some(_) => scenario.cost_source(),
                None => reported.to_string(),
            },
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
            cost_source: match (&s.decode_profile, &s.measured) {
                (None, None) => format!("analytic-roofline ({} decode model)", s.serving.gpu.name),
                _ => s.cost_source(),
            },
        }
    }
}

/// The scenario's simulated prices, noting the least measured `StepTime::source` among the
/// expert sessions' steps (the aggregator is always priced by the roofline, whatever prices the
/// experts, so its steps do not say what priced the run).
struct SourceNoting<'a> {
    pricing: SimulatedPricing<'a>,
    n_experts: usize,
    least_measured: Rc<Cell<Option<CostSource>>>,
}

impl<'a> SessionPricing<'a> for SourceNoting<'a> {
    fn load(&mut self, unit: usize, model: usize) -> SimDuration {
        self.pricing.load(unit, model)
    }

    fn steps(&mut self, unit: usize, model: usize) -> Box<dyn StepCost + 'a> {
        let steps = self.pricing.steps(unit, model);
        if model < self.n_experts {
            Box::new(NotingSource::new(steps, &self.least_measured))
        } else {
            steps
        }
    }
}
