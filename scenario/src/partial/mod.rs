//! Partial results of a sweep: every finished cell is kept on disk (`<out>/cells/<index>.json`)
//! so an interrupted sweep resumes where it stopped (`resume`), a sweep can be cut into disjoint
//! shards for a cluster's job array (`shard`), and the shards' cells join into the result
//! document a single run writes, byte for byte (`merge`). The `SweepHeader` is everything of the
//! document that does not come from running cells; its fingerprint ties cell files to the
//! scenario they belong to.

pub mod cell_file;
pub mod merge;
pub mod resume;
pub mod shard;

use crate::results::{
    BaselineEcho, CellResult, ResultsDocument, ScenarioEcho, SweepAxisEcho, ToolInfo,
    compute_improvements,
};
use crate::runner::CellRuns;
use crate::scenario::ScenarioPlan;
use serde::{Deserialize, Serialize};

pub use shard::Shard;

/// One sweep cell as the document names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellKey {
    pub id: String,
    pub coords: Vec<(String, serde_json::Value)>,
}

/// The part of a result document that the scenario alone determines: tool, scenario echo,
/// seeds, sweep axes, baseline and the cells' names, in plan order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepHeader {
    pub tool: ToolInfo,
    pub scenario: ScenarioEcho,
    pub seeds: Vec<u64>,
    pub sweep: Vec<SweepAxisEcho>,
    /// `sweep_only`'s entries (absent: every cell of the product).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep_only: Vec<serde_json::Value>,
    pub baseline: Option<BaselineEcho>,
    pub cells: Vec<CellKey>,
}

fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).expect("TOML values convert to JSON")
}

impl SweepHeader {
    pub fn of(plan: &ScenarioPlan) -> Self {
        SweepHeader {
            tool: ToolInfo {
                name: "expertsim".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            scenario: ScenarioEcho {
                name: plan.name.clone(),
                description: plan.description.clone(),
                family: plan.family,
                document: toml_to_json(&toml::Value::Table(plan.document.clone())),
            },
            seeds: plan.seeds.clone(),
            sweep: plan
                .axes
                .iter()
                .map(|a| SweepAxisEcho {
                    key: a.key.clone(),
                    values: a.values.iter().map(toml_to_json).collect(),
                })
                .collect(),
            sweep_only: plan
                .only
                .iter()
                .map(|entry| toml_to_json(&toml::Value::Table(entry.clone())))
                .collect(),
            baseline: plan.report.as_ref().map(|r| BaselineEcho {
                compare: r.compare.clone(),
                baseline: toml_to_json(&r.baseline),
            }),
            cells: plan
                .cells
                .iter()
                .map(|cell| CellKey {
                    id: cell.id.clone(),
                    coords: cell
                        .coords
                        .iter()
                        .map(|(k, v)| (k.clone(), toml_to_json(v)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// The SHA-256 of the header (64 hex digits) identifying the scenario as run (document after
    /// overrides, sweep, seeds, tool version): two different headers cannot be made to share
    /// one. Files the scenario reads (traces, profiles) are not part of it. A hash anyone can
    /// recompute is no signature: `merge` also validates what it uses from a manifest.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let bytes = serde_json::to_vec(self).expect("the header serializes");
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The result document from the runs of every cell, in plan order: per-cell summaries, then
    /// improvements over the baseline cells.
    pub fn assemble(&self, cells: Vec<CellRuns>) -> ResultsDocument {
        assert_eq!(cells.len(), self.cells.len(), "one result per sweep cell");
        let metrics = self.scenario.family.metrics();
        let mut cells: Vec<CellResult> = self
            .cells
            .iter()
            .zip(cells)
            .map(|(key, runs)| {
                CellResult::new(
                    key.id.clone(),
                    key.coords.clone(),
                    runs.cost_model,
                    runs.runs,
                    runs.trace,
                    metrics,
                )
            })
            .collect();
        if let Some(b) = &self.baseline {
            compute_improvements(&mut cells, &b.compare, &b.baseline, metrics);
        }
        ResultsDocument {
            tool: self.tool.clone(),
            scenario: self.scenario.clone(),
            seeds: self.seeds.clone(),
            sweep: self.sweep.clone(),
            sweep_only: self.sweep_only.clone(),
            baseline: self.baseline.clone(),
            cells,
        }
    }
}
