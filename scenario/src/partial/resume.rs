//! A sweep that survives interruption: before running, the cells already on disk under
//! `<out>/cells/` with this scenario's fingerprint are taken as done (unless `fresh`); each cell
//! that finishes is written there at once. A whole sweep then writes `results.json` (temporary
//! file + rename) and removes its cell files; a shard keeps them and writes its manifest for
//! `merge`. A cell's runs depend only on the scenario and their seeds, so reused and fresh cells
//! give the same bytes as one uninterrupted run.

use super::cell_file::{self, Unusable};
use super::merge::Manifest;
use super::{Shard, SweepHeader};
use crate::policies::Policies;
use crate::results::ResultsDocument;
use crate::runner::{self, CellRuns};
use crate::scenario::ScenarioPlan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to run a sweep.
pub struct SweepOptions<'a> {
    /// The result directory: `results.json`, `cells/`, `requests/`, shard manifests.
    pub out: &'a Path,
    /// Run only this slice of the cells and write a partial result.
    pub shard: Option<Shard>,
    /// Ignore (and overwrite) cell files left by an earlier run.
    pub fresh: bool,
    /// Write per-request CSVs under `<out>/requests/`.
    pub per_request_csv: bool,
    /// Write a trace-event file per run under `<out>/trace_events/` (the serving family).
    pub trace_events: bool,
    /// The `--set` overrides the plan was loaded with (a shard's manifest records them).
    pub sets: &'a [String],
}

/// A sweep with its cells split into those found on disk and those still to run.
pub struct PreparedSweep {
    header: SweepHeader,
    fingerprint: String,
    /// The cells this run is responsible for (all of them, or one shard's), in plan order.
    selected: Vec<usize>,
    reused: BTreeMap<usize, CellRuns>,
    /// Cell files present but not usable, with the reason.
    pub stale: Vec<String>,
}

/// What a finished sweep produced.
pub enum SweepOutcome {
    /// Every cell ran: the document to write with `finish`.
    Complete(Box<ResultsDocument>),
    /// One shard ran: its manifest and how many cells it holds.
    Shard { manifest: PathBuf, cells: usize },
}

/// Splits the cells `options` selects into those already done under `options.out` and the rest.
pub fn prepare(plan: &ScenarioPlan, options: &SweepOptions) -> PreparedSweep {
    let header = SweepHeader::of(plan);
    let fingerprint = header.fingerprint();
    let selected: Vec<usize> = match options.shard {
        Some(shard) => shard.cells(plan.cells.len()),
        None => (0..plan.cells.len()).collect(),
    };
    let mut reused = BTreeMap::new();
    let mut stale = Vec::new();
    if !options.fresh {
        for &index in &selected {
            match cell_file::read(
                options.out,
                &header,
                &fingerprint,
                index,
                options.per_request_csv,
            ) {
                Ok(cell) => {
                    reused.insert(index, cell);
                }
                Err(Unusable::Absent) => {}
                Err(Unusable::Stale(why)) => stale.push(why),
            }
        }
    }
    PreparedSweep {
        header,
        fingerprint,
        selected,
        reused,
        stale,
    }
}

impl PreparedSweep {
    /// Cells taken from disk.
    pub fn reused_cells(&self) -> usize {
        self.reused.len()
    }

    /// Takes `cell` as the finished runs of cell `index`, instead of running it (the same cell
    /// and seeds, run by another sweep of this process).
    pub fn reuse(&mut self, index: usize, cell: CellRuns) {
        assert_eq!(cell.runs.len(), self.header.seeds.len(), "one run per seed");
        self.reused.insert(index, cell);
    }

    /// Cell `index`'s runs, when taken from disk (or `reuse`).
    pub fn reused_cell(&self, index: usize) -> Option<&CellRuns> {
        self.reused.get(&index)
    }

    /// Whether cell `index` is taken from disk (or `reuse`).
    pub fn is_reused(&self, index: usize) -> bool {
        self.reused.contains_key(&index)
    }

    /// Simulations left to run.
    pub fn runs_to_do(&self) -> usize {
        (self.selected.len() - self.reused.len()) * self.header.seeds.len()
    }

    /// The cells left to run (selected, neither on disk nor taken with `reuse`), in plan order.
    pub fn pending(&self) -> Vec<usize> {
        self.selected
            .iter()
            .copied()
            .filter(|i| !self.reused.contains_key(i))
            .collect()
    }

    /// Writes finished cell `index` to `<out>/cells/`, for a later run to resume from.
    pub fn save(
        &self,
        options: &SweepOptions,
        index: usize,
        cell: &CellRuns,
    ) -> Result<(), String> {
        let out = options.out;
        cell_file::write(
            out,
            &self.header,
            &self.fingerprint,
            index,
            options.per_request_csv,
            cell,
        )
        .map_err(|e| format!("writing {}: {e}", cell_file::path(out, index).display()))
    }

    /// The whole sweep's document, from the cells `pending` named (`ran`, in any order) and the
    /// cells taken from disk or `reuse`.
    pub fn assemble(self, ran: impl IntoIterator<Item = (usize, CellRuns)>) -> ResultsDocument {
        assert!(
            self.selected.len() == self.header.cells.len(),
            "a whole sweep"
        );
        let mut done = self.reused;
        done.extend(ran);
        assert_eq!(done.len(), self.selected.len(), "every cell ran");
        self.header.assemble(done.into_values().collect())
    }

    /// Runs the remaining cells, writing each to `<out>/cells/` as it finishes.
    pub fn run(
        self,
        plan: &ScenarioPlan,
        policies: &dyn Policies,
        options: &SweepOptions,
        on_run_done: &(dyn Fn() + Sync),
    ) -> Result<SweepOutcome, String> {
        let out = options.out;
        let to_run = self.pending();
        let requests_dir = out.join("requests");
        let csv_dir = options.per_request_csv.then_some(requests_dir.as_path());
        let save = |index: usize, cell: &CellRuns| self.save(options, index, cell);
        let trace_dir = out.join("trace_events");
        let trace_dir = options.trace_events.then_some(trace_dir.as_path());
        let ran = runner::run_cells(
            plan,
            policies,
            &to_run,
            csv_dir,
            trace_dir,
            on_run_done,
            &save,
        )?;
        let ran = to_run.into_iter().zip(ran);
        match options.shard {
            None => Ok(SweepOutcome::Complete(Box::new(self.assemble(ran)))),
            Some(shard) => {
                let manifest = Manifest {
                    format: super::merge::MANIFEST_FORMAT.into(),
                    fingerprint: self.fingerprint,
                    shard,
                    scenario_path: std::fs::canonicalize(&plan.path)
                        .unwrap_or_else(|_| plan.path.clone()),
                    sets: options.sets.to_vec(),
                    cells: self.selected,
                    header: self.header,
                };
                let path = manifest
                    .write(out)
                    .map_err(|e| format!("writing the shard manifest in {}: {e}", out.display()))?;
                Ok(SweepOutcome::Shard {
                    manifest: path,
                    cells: manifest.cells.len(),
                })
            }
        }
    }
}

/// Writes a whole sweep's `results.json` under `out` atomically, then removes the cell files it
/// was assembled from; returns the path written.
pub fn finish(document: &ResultsDocument, out: &Path) -> std::io::Result<PathBuf> {
    let results = out.join("results.json");
    runner::write_results(document, &results)?;
    for index in 0..document.cells.len() {
        match std::fs::remove_file(cell_file::path(out, index)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    // Temporary files of a process killed mid-write; the folder goes when nothing else is left.
    let cells = cell_file::cells_dir(out);
    if let Ok(entries) = std::fs::read_dir(&cells) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().contains(".json.tmp-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let _ = std::fs::remove_dir(&cells);
    }
    Ok(results)
}
