//! Runs the cells of a loaded scenario plan: every (cell, seed) pair is one independent
//! simulation, run in parallel with rayon and gathered in plan order, so the result does not
//! depend on thread timing. Each family's runs go through the same path; policies come from a
//! `Policies` registry the caller provides (the `strategies` crate), since `sim` knows no policy.
//! `partial` decides which cells to run (shards, resumed sweeps) and assembles the document.

use crate::caps::batch::{BatchSelector, BatchSelectorConfig};
use crate::chimera::{QueuePolicy, QueuePolicyConfig, Router, RouterConfig};
use crate::expertweave::{AdapterMemory, MemoryConfig};
use crate::gem::{ExpertMapper, MapperConfig};
use crate::metrics::RunOutput;
use crate::mosaic::{AggregationGate, GateConfig, Placement, PlacementConfig};
use crate::results::{RunResult, write_atomic};
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

/// Runs one seed of one cell; `csv` receives per-request records where the family has them
/// (every family but MOSAIC, whose offline prompts are timed per worker session), and
/// `trace_events` a Chrome trace-event file of the steps where the family writes one (the
/// serving family). Returns the run's output and the cost-model source.
pub fn run_cell(
    scenario: &Scenario,
    seed: u64,
    policies: &dyn Policies,
    csv: Option<&Path>,
    trace_events: Option<&Path>,
) -> Result<(RunOutput, String), String> {
    match scenario {
        Scenario::Caps(s) => {
            crate::caps::run::run(s, seed, policies.batch_selector(&s.selector).as_mut(), csv)
        }
        Scenario::Gem(s) => {
            let mapper = &mut *policies.expert_mapper(&s.mapper);
            // GEM's engine admits first come, first served (vLLM's default).
            let queue = &mut *policies.queue_policy(&QueuePolicyConfig::Fcfs);
            let output = crate::records::with_csv(csv, "gem", &[], |sink| {
                crate::gem::simulate_recorded(s, seed, mapper, queue, sink)
            })?;
            Ok((output, s.profile.source.kind.as_str().to_string()))
        }
        Scenario::Mosaic(s) => crate::mosaic::try_simulate(
            s,
            seed,
            policies.placement(&s.placement).as_mut(),
            policies.aggregation_gate(&s.gate).as_mut(),
        )
        .map(|output| (output, MOSAIC_COST_MODEL.to_string()))
        .map_err(|e| e.to_string()),
        Scenario::Chimera(s) => {
            let (queue, router) = (
                &mut *policies.queue_policy(&s.queue),
                &mut *policies.router(&s.routing),
            );
            let output = crate::records::with_csv(
                csv,
                "chimera",
                crate::chimera::run::CSV_COLUMNS,
                |sink| crate::chimera::run::run_recorded(s, seed, queue, router, sink),
            )?;
            Ok((output, s.source()))
        }
        Scenario::Expertweave(s) => {
            let memory = &mut *policies.adapter_memory(&s.memory);
            let output = crate::records::with_csv(
                csv,
                "expertweave",
                crate::expertweave::run::CSV_COLUMNS,
                |sink| crate::expertweave::run_recorded(s, seed, memory, sink),
            )?;
            Ok((output, EXPERTWEAVE_COST_MODEL.to_string()))
        }
        Scenario::Serving(s) => {
            let (queue, router) = (
                &mut *policies.queue_policy(&s.queue),
                &mut *policies.router(&s.router),
            );
            let output = crate::records::with_csv(
                csv,
                "serving",
                crate::serving_family::CSV_COLUMNS,
                |sink| {
                    crate::serving_family::run_recorded(s, seed, queue, router, sink, trace_events)
                },
            )??;
            Ok((output, SERVING_COST_MODEL.to_string()))
        }
    }
}

/// The runs of one finished cell, in the plan's seed order, and where its step costs came from.
#[derive(Clone, Debug, PartialEq)]
pub struct CellRuns {
    pub cost_model: String,
    pub runs: Vec<RunResult>,
}

/// Runs every seed of each cell of `plan` listed in `cell_indices`. `csv_dir`, when given,
/// receives one per-request CSV per run (`<cell index>_seed<seed>.csv`), `trace_dir` one
/// trace-event file per run of a family that writes them (`<cell index>_seed<seed>.json`). `on_run_done` is called
/// after each run (progress bars), `on_cell_done` as soon as all seeds of a cell have finished
/// (it can persist the cell; its error stops the sweep). Every run's random streams derive from
/// its own seed only, so a cell's result does not depend on which other cells run alongside it.
/// Returns the cells in the order of `cell_indices`.
pub fn run_cells(
    plan: &ScenarioPlan,
    policies: &dyn Policies,
    cell_indices: &[usize],
    csv_dir: Option<&Path>,
    trace_dir: Option<&Path>,
    on_run_done: &(dyn Fn() + Sync),
    on_cell_done: &(dyn Fn(usize, &CellRuns) -> Result<(), String> + Sync),
) -> Result<Vec<CellRuns>, String> {
    cell_indices
        .par_iter()
        .map(|&cell_idx| {
            let scenario = &plan.cells[cell_idx].scenario;
            let outcomes: Vec<Result<(RunOutput, String), String>> = plan
                .seeds
                .par_iter()
                .map(|&seed| {
                    let csv = csv_dir.map(|dir| dir.join(format!("{cell_idx:04}_seed{seed}.csv")));
                    let trace =
                        trace_dir.map(|dir| dir.join(format!("{cell_idx:04}_seed{seed}.json")));
                    let out = run_cell(scenario, seed, policies, csv.as_deref(), trace.as_deref());
                    on_run_done();
                    out
                })
                .collect();
            let mut runs = Vec::with_capacity(plan.seeds.len());
            let mut cost_model = String::new();
            for (&seed, outcome) in plan.seeds.iter().zip(outcomes) {
                let (output, source) = outcome?;
                runs.push(RunResult::new(seed, output));
                cost_model = source;
            }
            let cell = CellRuns { cost_model, runs };
            on_cell_done(cell_idx, &cell)?;
            Ok(cell)
        })
        .collect()
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
/// The serving family prices every step on the cost model's roofline and `moe_layer`.
const SERVING_COST_MODEL: &str = "analytic-roofline";
