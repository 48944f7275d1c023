//! Runs the cells of a loaded scenario plan: every (cell, seed) pair is one independent
//! simulation, run in parallel on rayon's pool, the costliest first (`longest_first`, by
//! `work_estimate`), and gathered in plan order, so the result does not depend on thread timing.
//! Each family's runs go through the same path; policies come from a `policies::Policies`
//! registry the caller provides (the `strategies` crate), since `expertsim-scenario` knows no
//! policy. `partial` decides which cells to run (shards, resumed sweeps) and assembles the
//! document.

use crate::family::Run;
use crate::policies::Policies;
use crate::results::{RunResult, write_atomic};
use crate::scenario::{Scenario, ScenarioPlan};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

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
/// `on_run_done` is called after each run (progress bars), `on_cell_done` as soon as all seeds
/// of a cell have finished (it can persist the cell; its error stops the sweep). The (cell,
/// seed) runs go to the cores costliest first (`longest_first`, by `work_estimate`). Every
/// run's random streams derive from its own seed only, so a cell's result does not depend on
/// which other cells run alongside it or when. Returns the cells in the order of
/// `cell_indices`.
pub fn run_cells(
    plan: &ScenarioPlan,
    policies: &dyn Policies,
    cell_indices: &[usize],
    csv_dir: Option<&Path>,
    trace_dir: Option<&Path>,
    on_run_done: &(dyn Fn() + Sync),
    on_cell_done: &(dyn Fn(usize, &CellRuns) -> Result<(), String> + Sync),
) -> Result<Vec<CellRuns>, String> {
    let seeds = plan.seeds.len();
    let costs: Vec<f64> = cell_indices
        .iter()
        .flat_map(|&cell| std::iter::repeat_n(work_estimate(&plan.cells[cell].scenario), seeds))
        .collect();
    // Job `j` is seed `j % seeds` of the cell at position `j / seeds` of `cell_indices`.
    let runs: Vec<Mutex<Option<Run>>> = costs.iter().map(|_| Mutex::new(None)).collect();
    let waiting: Vec<AtomicUsize> = cell_indices
        .iter()
        .map(|_| AtomicUsize::new(seeds))
        .collect();
    let cells: Vec<OnceLock<CellRuns>> = cell_indices.iter().map(|_| OnceLock::new()).collect();
    let failure: Mutex<Option<(usize, String)>> = Mutex::new(None);
    let fail = |position: usize, message: String| {
        let mut failure = failure.lock().expect("no job panics holding it");
        if failure.as_ref().is_none_or(|(p, _)| position < *p) {
            *failure = Some((position, message));
        }
        false
    };
    longest_first(&costs, &|job| {
        let (position, seed) = (job / seeds, job % seeds);
        let cell_idx = cell_indices[position];
        let scenario = &plan.cells[cell_idx].scenario;
        let seed_value = plan.seeds[seed];
        let csv = csv_dir.map(|dir| dir.join(format!("{cell_idx:04}_seed{seed_value}.csv")));
        let trace = trace_dir.map(|dir| dir.join(format!("{cell_idx:04}_seed{seed_value}.json")));
        let outcome = run_cell(
            scenario,
            seed_value,
            policies,
            csv.as_deref(),
            trace.as_deref(),
        );
        on_run_done();
        match outcome {
            Ok(run) => *runs[job].lock().expect("no job panics holding it") = Some(run),
            Err(message) => return fail(position, message),
        }
        if waiting[position].fetch_sub(1, Ordering::AcqRel) != 1 {
            return true;
        }
        let first = position * seeds;
        let cell = cell_runs(
            plan,
            cell_idx,
            runs[first..first + seeds]
                .iter()
                .map(|run| run.lock().expect("no job panics holding it").take())
                .map(|run| run.expect("every seed of the cell has run")),
        );
        if let Err(message) = on_cell_done(cell_idx, &cell) {
            return fail(position, message);
        }
        cells[position].set(cell).expect("a cell finishes once");
        true
    });
    if let Some((_, message)) = failure.into_inner().expect("no job panics holding it") {
        return Err(message);
    }
    Ok(cells
        .into_iter()
        .map(|cell| cell.into_inner().expect("every cell finished"))
        .collect())
}

/// Cell `cell_idx` of `plan` from its runs, one per seed in the plan's seed order.
pub fn cell_runs(
    plan: &ScenarioPlan,
    cell_idx: usize,
    runs: impl Iterator<Item = Run>,
) -> CellRuns {
    let scenario = &plan.cells[cell_idx].scenario;
    let mut results = Vec::with_capacity(plan.seeds.len());
    let mut cost_model = String::new();
    for (&seed, run) in plan.seeds.iter().zip(runs) {
        results.push(RunResult::new(seed, run.output));
        cost_model = run.cost_source;
    }
    CellRuns {
        cost_model,
        runs: results,
        trace: crate::results::TraceReplayed::of(scenario),
    }
}

/// What one run of `scenario` is expected to cost, to start the costly runs first: the tokens
/// it offers, its requests times the longest prompt and output it may draw, from its
/// `demands` (requests alone where it names no lengths). Only the order of the runs depends on
/// it, never a result.
pub fn work_estimate(scenario: &Scenario) -> f64 {
    use crate::validate::limits::Quantity;
    let demands = scenario.demands();
    let of = |quantity: Quantity| demands.iter().filter(move |d| d.quantity == quantity);
    let requests = of(Quantity::Requests).map(|d| d.value).fold(0.0, f64::max);
    let tokens: f64 = of(Quantity::TokensPerRequest).map(|d| d.value).sum();
    requests * tokens.max(1.0)
}

/// Runs `work(j)` for every job `j` of `costs` on rayon's pool, costliest first: each worker
/// takes the costliest job no one has taken yet (greedy list scheduling), so a long job does
/// not start last and leave the other cores idle while it finishes. Jobs of equal cost start
/// in index order. Once `work` returns false, no further job starts.
pub fn longest_first(costs: &[f64], work: &(dyn Fn(usize) -> bool + Sync)) {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let worker = || {
        while !stop.load(Ordering::Acquire) {
            let Some(&job) = order.get(next.fetch_add(1, Ordering::AcqRel)) else {
                break;
            };
            if !work(job) {
                stop.store(true, Ordering::Release);
            }
        }
    };
    rayon::scope(|s| {
        for _ in 0..rayon::current_num_threads().min(order.len()) {
            s.spawn(|_| worker());
        }
    });
}

/// Writes `document` to `path` in the results layout (`results_layout`), atomically.
pub fn write_results(
    document: &crate::results::ResultsDocument,
    path: &Path,
) -> std::io::Result<()> {
    let mut bytes = crate::results_layout::to_vec(document).expect("results serialize");
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::longest_first;
    use std::sync::Mutex;

    fn order_on(threads: usize, costs: &[f64], stop_at: Option<usize>) -> Vec<usize> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let started = Mutex::new(Vec::new());
        pool.install(|| {
            longest_first(costs, &|job| {
                started.lock().unwrap().push(job);
                Some(job) != stop_at
            })
        });
        started.into_inner().unwrap()
    }

    #[test]
    fn one_worker_takes_the_costliest_job_first_and_equal_costs_in_index_order() {
        let costs = [1.0, 5.0, 2.0, 5.0, 0.5, 2.0];
        assert_eq!(order_on(1, &costs, None), vec![1, 3, 2, 5, 0, 4]);
    }

    #[test]
    fn several_workers_run_every_job_once() {
        let costs: Vec<f64> = (0..200).map(|i| f64::from(i % 7)).collect();
        let mut started = order_on(4, &costs, None);
        started.sort_unstable();
        assert_eq!(started, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_job_stops_the_jobs_not_yet_started() {
        let costs = [3.0, 2.0, 1.0, 0.0];
        assert_eq!(order_on(1, &costs, Some(1)), vec![0, 1]);
    }
}
