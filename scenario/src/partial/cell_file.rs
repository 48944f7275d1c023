//! One finished sweep cell on disk, `<out>/cells/<index>.json`: the runs of all its seeds, the
//! scenario fingerprint and the cell's id. Written through a temporary file and a rename, so a
//! cell file is either complete or absent, whenever the process is stopped. It is not synced to
//! disk: after a power loss a cell file may be empty, which `read` finds unusable, so the cell
//! reruns.

use super::SweepHeader;
use crate::results::{RunResult, write_atomic_unsynced};
use crate::runner::CellRuns;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// The cell file's layout and what its runs' details hold. 2: the serving family's expert detail
/// carries its per-GPU `staircase` only with `[output] staircase` (a `/1` file has it in every
/// traced MoE run, so resuming from one would mix the two in one `results.json`: it reruns).
const FORMAT: &str = "expertsim-cell/2";

/// Borrowed when written (a cell's runs are not copied to be serialized), owned when read.
#[derive(Debug, Serialize, Deserialize)]
struct CellFile<'a> {
    format: Cow<'a, str>,
    fingerprint: Cow<'a, str>,
    index: usize,
    id: Cow<'a, str>,
    /// Whether the runs also wrote their per-request CSVs.
    per_request_csv: bool,
    cost_model: Cow<'a, str>,
    runs: Cow<'a, [RunResult]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<Cow<'a, crate::results::TraceReplayed>>,
}

/// The folder of cell files under a result directory.
pub fn cells_dir(out: &Path) -> PathBuf {
    out.join("cells")
}

/// The file of cell `index` under a result directory.
pub fn path(out: &Path, index: usize) -> PathBuf {
    cells_dir(out).join(format!("{index}.json"))
}

/// Writes cell `index` of the sweep `header` describes, atomically.
pub fn write(
    out: &Path,
    header: &SweepHeader,
    fingerprint: &str,
    index: usize,
    per_request_csv: bool,
    cell: &CellRuns,
) -> std::io::Result<()> {
    let file = CellFile {
        format: Cow::Borrowed(FORMAT),
        fingerprint: Cow::Borrowed(fingerprint),
        index,
        id: Cow::Borrowed(&header.cells[index].id),
        per_request_csv,
        cost_model: Cow::Borrowed(&cell.cost_model),
        runs: Cow::Borrowed(&cell.runs),
        trace: cell.trace.as_ref().map(Cow::Borrowed),
    };
    let bytes = serde_json::to_vec(&file).expect("a cell serializes");
    write_atomic_unsynced(&path(out, index), &bytes)
}

/// Why a cell file cannot stand for cell `index` of a sweep.
#[derive(Debug, PartialEq)]
pub enum Unusable {
    Absent,
    /// Present but from another scenario, another tool version, or not readable: the message says.
    Stale(String),
}

/// Reads cell `index` of the sweep `header` (with fingerprint `fingerprint`) from `out`, checking
/// that it belongs to this sweep: same fingerprint, index and id, the plan's seeds in order, every
/// metric of the family, and per-request CSVs when `need_csv`.
pub fn read(
    out: &Path,
    header: &SweepHeader,
    fingerprint: &str,
    index: usize,
    need_csv: bool,
) -> Result<CellRuns, Unusable> {
    let path = path(out, index);
    let bytes = match crate::input::read_input_bytes(&path, crate::input::MAX_INPUT_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::Absent),
        Err(e) => return Err(Unusable::Stale(format!("{}: {e}", path.display()))),
    };
    let stale = |why: String| Unusable::Stale(format!("{}: {why}", path.display()));
    let file: CellFile<'static> =
        serde_json::from_slice(&bytes).map_err(|e| stale(format!("not a cell file ({e})")))?;
    if file.format != FORMAT {
        return Err(stale(format!(
            "format {:?}, expected {FORMAT:?}",
            file.format
        )));
    }
    if file.fingerprint != fingerprint {
        return Err(stale(format!(
            "scenario fingerprint {} differs from {fingerprint}",
            file.fingerprint
        )));
    }
    let expected_id = &header.cells[index].id;
    if file.index != index || &file.id != expected_id {
        return Err(stale(format!(
            "holds cell {} ({}), expected cell {index} ({expected_id})",
            file.index, file.id
        )));
    }
    let seeds: Vec<u64> = file.runs.iter().map(|r| r.seed).collect();
    if seeds != header.seeds {
        return Err(stale(format!(
            "seeds {seeds:?}, expected {:?}",
            header.seeds
        )));
    }
    let metrics = header.scenario.family.metrics();
    if let Some(missing) = metrics
        .iter()
        .find(|m| file.runs.iter().any(|r| !r.scalars.contains_key(m.name)))
    {
        return Err(stale(format!("a run lacks metric {}", missing.name)));
    }
    // Every number is one a run can report: finite (or `null`, a metric the run could not
    // measure), and not negative unless the metric is a signed change.
    for run in file.runs.iter() {
        if let Some((name, value)) = run.scalars.iter().find(|&(name, &v)| {
            v.is_infinite() || (v < 0.0 && !crate::metrics::SIGNED_METRICS.contains(&name.as_str()))
        }) {
            return Err(stale(format!(
                "seed {}: {name} = {value} is not a value a run reports",
                run.seed
            )));
        }
    }
    if need_csv && !file.per_request_csv {
        return Err(stale("written without per-request CSVs".into()));
    }
    Ok(CellRuns {
        cost_model: file.cost_model.into_owned(),
        runs: file.runs.into_owned(),
        trace: file.trace.map(Cow::into_owned),
    })
}

#[cfg(test)]
mod signed_metrics_tests {
    // `metrics::SIGNED_METRICS` is `expertsim-core`'s, which knows no family: held here, where
    // the registry is reachable.
    #[test]
    fn every_signed_metric_is_a_metric_of_a_family() {
        for name in crate::metrics::SIGNED_METRICS {
            assert!(
                crate::registry::families().any(|f| f.metrics().iter().any(|m| m.name == *name)),
                "{name} is no family's metric"
            );
        }
    }
}
