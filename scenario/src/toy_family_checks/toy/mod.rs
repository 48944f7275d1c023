//! A toy family, standing for a new family's folder (`toy_family_checks`): its tables, a
//! validated cell, a run that reports one metric, and its quick scenario (`quick.toml` here).

use crate::family::{Family, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::{Better, MetricInfo, RunOutput};
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::validate::limits::{Demand, Quantity};
use crate::validate::{FieldError, positive};
use std::path::Path;

pub struct Toy;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToyConfig {
    pub requests: f64,
}

#[derive(Clone, Debug)]
pub struct ToyCell {
    pub requests: f64,
}

impl Family for Toy {
    type Config = ToyConfig;
    type Scenario = ToyCell;
    const NAME: &'static str = "toy";
    const DESCRIPTION: &'static str = "a toy family (a test of the registry)";
    const METRICS: &'static [MetricInfo] = &[MetricInfo {
        name: "served",
        description: "requests served",
        better: Better::Higher,
    }];
    const HEADLINE: &'static [&'static str] = &["served"];
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = &[];
    const RATE_KEY: Option<&'static str> = Some("requests");
    const QUICK_SCENARIO: &'static str = "scenario/src/toy_family_checks/toy/quick.toml";

    fn validate(
        config: ToyConfig,
        _base_dir: &Path,
        _cache: &mut LoadCache,
    ) -> Result<ToyCell, FieldError> {
        Ok(ToyCell {
            requests: positive("requests", config.requests)?,
        })
    }
    fn demands(cell: &ToyCell) -> Vec<Demand> {
        vec![Demand::new(Quantity::Requests, cell.requests, "requests")]
    }
    fn run(
        cell: &ToyCell,
        seed: u64,
        _policies: &dyn Policies,
        _records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        Ok(Run {
            output: RunOutput {
                scalars: vec![("served".into(), cell.requests + seed as f64)],
                details: serde_json::Value::Null,
            },
            cost_source: "none".into(),
        })
    }
    fn live_description(_cell: &ToyCell) -> LiveDescription {
        LiveDescription {
            moe_shape: None,
            model: "toy".into(),
            cost_source: "none".into(),
        }
    }
}
