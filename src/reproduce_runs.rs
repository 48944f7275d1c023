//! `expertsim reproduce`'s runs, all families' at once on one pool: every (cell, seed)
//! simulation of every run is one job, the costliest first (`runner::longest_first`), and a run
//! writes its results and figures as soon as its last cell is done, while the other core goes on
//! simulating. A cell an earlier run of the same family, or an earlier cell of the same run,
//! also has (the same resolved scenario, less the keys that cannot change a run, folder and
//! seeds: CAPS's Poisson runs narrow its grids, Chimera's `configurations` its `systems` grid,
//! study (b)'s uniform GPUs ignore the bandwidth share, CAPS's best_fit is greedy_variance) is
//! simulated once and taken by both; cells an interrupted reproduction left on disk are
//! resumed. Results are gathered by index, so every file is the bytes a run after
//! run reproduction writes.

use anyhow::Context;
use expertsim_scenario::partial::resume::{self, PreparedSweep, SweepOptions};
use expertsim_scenario::results::ResultsDocument;
use expertsim_scenario::runner::{self, CellRuns};
use expertsim_scenario::scenario::ScenarioPlan;
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// One run of the reproduction: its family's position (cells are shared within a family only),
/// its plan and its output folder.
pub struct RunSlot<'a> {
    pub family: usize,
    pub plan: &'a ScenarioPlan,
    pub out: PathBuf,
}

/// A cell to simulate: the run that owns it and its index there.
struct Unit {
    slot: usize,
    cell: usize,
    /// Its runs, one per seed as they finish, then the assembled cell until its last reader.
    runs: Vec<Mutex<Option<expertsim_scenario::family::Run>>>,
    seeds_left: AtomicUsize,
    cell_runs: Mutex<Option<CellRuns>>,
    readers_left: AtomicUsize,
    /// The runs that take this cell, once per cell of theirs that does.
    readers: Vec<usize>,
}

/// A run's state while the pool works.
struct Slot {
    prepared: Mutex<Option<PreparedSweep>>,
    /// Its cells taken from units: (cell index, unit).
    takes: Vec<(usize, usize)>,
    units_left: AtomicUsize,
    resumed: usize,
    shared: usize,
    /// The time its own jobs took, summed over the threads that ran them (nanoseconds): with
    /// one pool thread per core, about the CPU time the run cost.
    busy_ns: AtomicU64,
    document: OnceLock<ResultsDocument>,
}

fn options(out: &Path) -> SweepOptions<'_> {
    SweepOptions {
        out,
        shard: None,
        fresh: false,
        per_request_csv: false,
        trace_events: false,
        sets: &[],
    }
}

/// Runs every slot and returns their documents in slot order, or the first failing slot (by
/// index) and its error.
pub fn run_all(slots: &[RunSlot]) -> Result<Vec<ResultsDocument>, (usize, anyhow::Error)> {
    let started = Instant::now();
    // Each run's cells on disk and every cell's key, independently per run.
    let mut prepared: Vec<(PreparedSweep, Vec<String>)> = slots
        .par_iter()
        .map(|slot| {
            let keys = (0..slot.plan.cells.len())
                .map(|i| cell_key(slot.plan, i))
                .collect();
            (resume::prepare(slot.plan, &options(&slot.out)), keys)
        })
        .collect();
    // Which run simulates each cell: the first run of the family that has it, and there its
    // first cell of that key (a grid may name one policy twice: best_fit is greedy_variance).
    enum Source {
        /// A cell a run took from disk: the run and the cell's index there.
        Disk(usize, usize),
        Unit(usize),
    }
    let mut seen: HashMap<(usize, String), Source> = HashMap::new();
    let mut units: Vec<Unit> = Vec::new();
    let mut takes: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut counts = Vec::new();
    for (s, slot) in slots.iter().enumerate() {
        let (before, rest) = prepared.split_at_mut(s);
        let (sweep, keys) = &mut rest[0];
        let resumed = sweep.reused_cells();
        let mut own = Vec::new();
        let mut shared = 0;
        for (i, key) in keys.iter().enumerate() {
            if sweep.is_reused(i) {
                seen.entry((slot.family, key.clone()))
                    .or_insert(Source::Disk(s, i));
                continue;
            }
            match seen.get(&(slot.family, key.clone())) {
                Some(&Source::Disk(s2, i2)) => {
                    let cell = match s2 == s {
                        true => sweep.reused_cell(i2),
                        false => before[s2].0.reused_cell(i2),
                    };
                    let cell = cell.expect("a cell on disk stays").clone();
                    sweep.reuse(i, cell);
                    shared += 1;
                }
                Some(&Source::Unit(u)) => {
                    own.push((i, u));
                    units[u].readers.push(s);
                    shared += 1;
                }
                None => {
                    let u = units.len();
                    let seeds = slot.plan.seeds.len();
                    units.push(Unit {
                        slot: s,
                        cell: i,
                        runs: (0..seeds).map(|_| Mutex::new(None)).collect(),
                        seeds_left: AtomicUsize::new(seeds),
                        cell_runs: Mutex::new(None),
                        readers_left: AtomicUsize::new(0),
                        readers: vec![s],
                    });
                    own.push((i, u));
                    seen.insert((slot.family, key.clone()), Source::Unit(u));
                }
            }
        }
        takes.push(own);
        counts.push((resumed, shared));
    }
    for unit in &mut units {
        *unit.readers_left.get_mut() = unit.readers.len();
    }
    let states: Vec<Slot> = prepared
        .into_iter()
        .zip(takes)
        .zip(counts)
        .map(|(((sweep, _), takes), (resumed, shared))| Slot {
            prepared: Mutex::new(Some(sweep)),
            units_left: AtomicUsize::new(takes.len()),
            takes,
            resumed,
            shared,
            busy_ns: AtomicU64::new(0),
            document: OnceLock::new(),
        })
        .collect();

    let failure: Mutex<Option<(usize, anyhow::Error)>> = Mutex::new(None);
    let fail = |s: usize, error: anyhow::Error| {
        let mut failure = failure.lock().expect("no job panics holding it");
        if failure.as_ref().is_none_or(|(first, _)| s < *first) {
            *failure = Some((s, error));
        }
        false
    };
    // Writes a run whose cells are all done: its results, its figures.
    let finish = |s: usize| -> bool {
        let slot = &slots[s];
        let state = &states[s];
        let sweep = state
            .prepared
            .lock()
            .expect("no job panics holding it")
            .take();
        let sweep = sweep.expect("a run finishes once");
        let ran = state.takes.iter().map(|&(i, u)| {
            let unit = &units[u];
            let mut cell = unit.cell_runs.lock().expect("no job panics holding it");
            let cell = match unit.readers_left.fetch_sub(1, Ordering::AcqRel) {
                1 => cell.take(),
                _ => cell.clone(),
            };
            (
                i,
                cell.expect("a finished unit holds its cell until its last reader"),
            )
        });
        let document = sweep.assemble(ran);
        let written = resume::finish(&document, &slot.out)
            .with_context(|| format!("writing {}", slot.out.join("results.json").display()))
            .and_then(|_| {
                crate::plots::render_all(slot.plan, &document, &slot.out.join("figures"))
            });
        let figures = match written {
            Ok(figures) => figures,
            Err(error) => return fail(s, error),
        };
        eprintln!(
            "{}: {} cells x {} seeds{}{}, done at {:.1} s, its jobs {:.1} s, {} figure files -> {}",
            slot.plan.path.display(),
            slot.plan.cells.len(),
            slot.plan.seeds.len(),
            match state.resumed {
                0 => String::new(),
                n => format!(" ({n} cells resumed)"),
            },
            match state.shared {
                0 => String::new(),
                n => format!(" ({n} cells as an equal cell ran them)"),
            },
            started.elapsed().as_secs_f64(),
            state.busy_ns.load(Ordering::Acquire) as f64 * 1e-9,
            figures.len(),
            slot.out.display()
        );
        let _ = state.document.set(document);
        true
    };
    // Runs with every cell on disk are written first, in parallel.
    (0..slots.len())
        .into_par_iter()
        .filter(|&s| states[s].takes.is_empty())
        .for_each(|s| {
            finish(s);
        });
    // Job `j` is seed `j - first[u]` of unit `u`.
    let mut jobs: Vec<(usize, usize)> = Vec::new();
    let mut costs: Vec<f64> = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        let cost = runner::work_estimate(&slots[unit.slot].plan.cells[unit.cell].scenario);
        for seed in 0..unit.runs.len() {
            jobs.push((u, seed));
            costs.push(cost);
        }
    }
    runner::longest_first(&costs, &|j| {
        if failure.lock().expect("no job panics holding it").is_some() {
            return false;
        }
        let (u, seed) = jobs[j];
        let unit = &units[u];
        let plan = slots[unit.slot].plan;
        let job_started = Instant::now();
        let outcome = runner::run_cell(
            &plan.cells[unit.cell].scenario,
            plan.seeds[seed],
            &strategies::Registry,
            None,
            None,
        );
        let took = u64::try_from(job_started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        states[unit.slot].busy_ns.fetch_add(took, Ordering::AcqRel);
        let run = match outcome {
            Ok(run) => run,
            Err(message) => {
                return fail(
                    unit.slot,
                    anyhow::Error::msg(message).context("running the sweep"),
                );
            }
        };
        *unit.runs[seed].lock().expect("no job panics holding it") = Some(run);
        if unit.seeds_left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return true;
        }
        let runs = unit.runs.iter().map(|run| {
            let run = run.lock().expect("no job panics holding it").take();
            run.expect("every seed of the cell has run")
        });
        let cell = runner::cell_runs(plan, unit.cell, runs);
        let saved = states[unit.slot]
            .prepared
            .lock()
            .expect("no job panics holding it")
            .as_ref()
            .expect("a run is written after its cells")
            .save(&options(&slots[unit.slot].out), unit.cell, &cell);
        if let Err(message) = saved {
            return fail(unit.slot, anyhow::Error::msg(message));
        }
        *unit.cell_runs.lock().expect("no job panics holding it") = Some(cell);
        for &s in &unit.readers {
            if states[s].units_left.fetch_sub(1, Ordering::AcqRel) == 1 && !finish(s) {
                return false;
            }
        }
        true
    });
    if let Some(failed) = failure.into_inner().expect("no job panics holding it") {
        return Err(failed);
    }
    Ok(states
        .into_iter()
        .map(|state| state.document.into_inner().expect("every run finished"))
        .collect())
}

/// What identifies cell `index` of `plan` across runs: the folder its relative paths start
/// from, its seeds and its whole scenario document (the plan's, with the cell's sweep values),
/// less the keys its family says cannot change a run (`Family::drop_inert_keys`).
fn cell_key(plan: &ScenarioPlan, index: usize) -> String {
    let mut document = plan.document.clone();
    for (key, value) in &plan.cells[index].coords {
        expertsim_scenario::scenario::sweep::apply(&mut document, key, value.clone())
            .expect("the loader applied every sweep value to this document");
    }
    plan.family
        .drop_inert_keys(&mut document, &strategies::Registry);
    format!(
        "{}\n{:?}\n{}",
        plan.path.parent().unwrap_or(Path::new("")).display(),
        plan.seeds,
        toml::Value::Table(document)
    )
}
