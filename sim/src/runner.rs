//! Runs a loaded scenario plan: every (cell, seed) pair is one independent simulation, run in
//! parallel with rayon and gathered in plan order, so the result does not depend on thread
//! timing. Each family's runs go through the same path; policies come from a `Policies` registry
//! the caller provides (the `strategies` crate), since `sim` knows no policy.

use crate::batch::{BatchSelector, BatchSelectorConfig};
use crate::chimera::{QueuePolicy, QueuePolicyConfig, Router, RouterConfig};
use crate::expertweave::{AdapterMemory, MemoryConfig};
use crate::gem::{ExpertMapper, MapperConfig};
use crate::metrics::RunOutput;
use crate::mosaic::{AggregationGate, GateConfig, Placement, PlacementConfig};
use crate::results::{
    BaselineEcho, CellResult, ResultsDocument, RunResult, ScenarioEcho, SweepAxisEcho, ToolInfo,
    compute_improvements, write_atomic,
};
use crate::scenario::{Scenario, ScenarioPlan};
use rayon::prelude::*;
use std::path::Path;

/// Builds the policy objects scenarios name; one method per extension point.
pub trait Policies: Sync {
    fn batch_selector(&self, config: &BatchSelectorConfig) -> Box<dyn BatchSelector>;
    fn expert_mapper(&self, config: &MapperConfig) -> Box<dyn ExpertMapper>;
    fn placement(&self, config: &PlacementConfig) -> Box<dyn Placement>;
    fn aggregation_gate(&self, config: &GateConfig) -> Box<dyn AggregationGate>;
    fn queue_policy(&self, config: &QueuePolicyConfig) -> Box<dyn QueuePolicy>;
    fn router(&self, config: &RouterConfig) -> Box<dyn Router>;
    fn adapter_memory(&self, config: &MemoryConfig) -> Box<dyn AdapterMemory>;
}

/// Runs one seed of one cell; `csv` receives per-request records where the family has them.
/// Returns the run's output and the cost-model source.
pub fn run_cell(
    scenario: &Scenario,
    seed: u64,
    policies: &dyn Policies,
    csv: Option<&Path>,
) -> Result<(RunOutput, String), String> {
    match scenario {
        Scenario::Caps(s) => {
            crate::caps::run::run(s, seed, policies.batch_selector(&s.selector).as_mut(), csv)
        }
        Scenario::Gem(s) => Ok((
            crate::gem::simulate(s, seed, policies.expert_mapper(&s.mapper).as_mut()),
            s.profile.source.kind.as_str().to_string(),
        )),
        Scenario::Mosaic(s) => crate::mosaic::try_simulate(
            s,
            seed,
            policies.placement(&s.placement).as_mut(),
            policies.aggregation_gate(&s.gate).as_mut(),
        )
        .map(|output| (output, MOSAIC_COST_MODEL.to_string()))
        .map_err(|e| e.to_string()),
        Scenario::Chimera(s) => Ok((
            crate::chimera::run::run(
                s,
                seed,
                policies.queue_policy(&s.queue).as_mut(),
                policies.router(&s.routing).as_mut(),
            ),
            s.source(),
        )),
        Scenario::Expertweave(s) => Ok((
            crate::expertweave::run(s, seed, policies.adapter_memory(&s.memory).as_mut()),
            EXPERTWEAVE_COST_MODEL.to_string(),
        )),
    }
}

fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).expect("TOML values convert to JSON")
}

/// Runs every cell and seed of `plan`. `csv_dir`, when given, receives one per-request CSV per
/// run (`<cell index>_seed<seed>.csv`).
/// `on_run_done` is called after each run (progress bars).
pub fn run_plan(
    plan: &ScenarioPlan,
    policies: &dyn Policies,
    csv_dir: Option<&Path>,
    on_run_done: &(dyn Fn() + Sync),
) -> Result<ResultsDocument, String> {
    let jobs: Vec<(usize, u64)> = (0..plan.cells.len())
        .flat_map(|c| plan.seeds.iter().map(move |s| (c, *s)))
        .collect();
    let outcomes: Vec<Result<(RunOutput, String), String>> = jobs
        .par_iter()
        .map(|&(cell_idx, seed)| {
            let scenario = &plan.cells[cell_idx].scenario;
            let csv = csv_dir.map(|dir| dir.join(format!("{cell_idx:04}_seed{seed}.csv")));
            let out = run_cell(scenario, seed, policies, csv.as_deref());
            on_run_done();
            out
        })
        .collect();

    let metrics = plan.family.metrics();
    let mut outcomes = outcomes.into_iter();
    let mut cells = Vec::with_capacity(plan.cells.len());
    for cell in &plan.cells {
        let mut runs = Vec::with_capacity(plan.seeds.len());
        let mut source = String::new();
        for &seed in &plan.seeds {
            let (output, run_source) = outcomes.next().expect("one outcome per job")?;
            runs.push(RunResult::new(seed, output));
            source = run_source;
        }
        let coords = cell
            .coords
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect();
        cells.push(CellResult::new(
            cell.id.clone(),
            coords,
            source,
            runs,
            metrics,
        ));
    }
    let baseline = plan.report.as_ref().map(|r| BaselineEcho {
        compare: r.compare.clone(),
        baseline: toml_to_json(&r.baseline),
    });
    if let Some(b) = &baseline {
        compute_improvements(&mut cells, &b.compare, &b.baseline, metrics);
    }
    Ok(ResultsDocument {
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
        baseline,
        cells,
    })
}

/// Writes `document` as pretty JSON to `path`, atomically.
pub fn write_results(
    document: &crate::results::ResultsDocument,
    path: &Path,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(document).expect("results serialize");
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Where MOSAIC and ExpertWeave step costs come from: analytic models from datasheet rates.
const MOSAIC_COST_MODEL: &str = "analytic-roofline";
const EXPERTWEAVE_COST_MODEL: &str = "analytic-roofline";
