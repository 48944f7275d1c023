//! Runs the cells of a loaded scenario plan: every (cell, seed) pair is one independent
//! simulation, run in parallel with rayon and gathered in plan order, so the result does not
//! depend on thread timing. Each family's runs go through the same path; policies come from a
//! `policies::Policies` registry the caller provides (the `strategies` crate), since `expertsim-scenario` knows
//! no policy.
//! `partial` decides which cells to run (shards, resumed sweeps) and assembles the document.

use crate::family::Run;
use crate::policies::Policies;
use crate::results::{RunResult, write_atomic};
use crate::scenario::{Scenario, ScenarioPlan};
use rayon::prelude::*;
use std::path::Path;

/// Runs one seed of one cell through its registered family; `csv` receives the per-request
/// records when the family has them (`Family::CSV_COLUMNS`), `trace_events` a Chrome
/// trace-event file of the steps when the family writes them (`Family::TRACE_EVENTS`). A run
/// that ran out of simulated time (`engine::guarded`) is an error.
pub fn run_cell(
    scenario: &Scenario,
    seed: u64,
    policies: &dyn Policies,
    csv: Option<&Path>,
    trace_events: Option<&Path>,
) -> Result<Run, String> {
    let family = scenario.family();
    let csv = csv.filter(|_| family.csv_columns().is_some());
    let columns = family.csv_columns().unwrap_or_default();
    let trace_events = trace_events.filter(|_| family.writes_trace_events());
    crate::records::with_csv(csv, family.name(), columns, |records| {
        crate::engine::guarded(|| match trace_events {
            Some(path) => family
                .registered()
                .run_traced(scenario, seed, policies, records, path),
            None => family.registered().run(scenario, seed, policies, records),
        })
        .unwrap_or_else(|e| Err(format!("seed {seed}: {e}")))
    })?
}

/// The runs of one finished cell, in the plan's seed order, and where its step costs came from.
#[derive(Clone, Debug, PartialEq)]
pub struct CellRuns {
    pub cost_model: String,
    pub runs: Vec<RunResult>,
    /// The trace the cell replayed and its statistics (trace arrivals only).
    pub trace: Option<crate::results::TraceReplayed>,
}

/// Runs every seed of each cell of `plan` listed in `cell_indices`. `csv_dir`, when given,
/// receives one per-request CSV per run (`<cell index>_seed<seed>.csv`), `trace_dir` one
/// trace-event file per run of a family that writes them (`<cell index>_seed<seed>.json`).
/// `on_run_done` is called
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
            let outcomes: Vec<Result<Run, String>> = plan
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
                let run = outcome?;
                runs.push(RunResult::new(seed, run.output));
                cost_model = run.cost_source;
            }
            let cell = CellRuns {
                cost_model,
                runs,
                trace: crate::results::TraceReplayed::of(scenario),
            };
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
