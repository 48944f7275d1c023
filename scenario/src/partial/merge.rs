//! Shard manifests and their merge. A finished shard writes `<out>/partial-K-of-N.json` (the
//! scenario fingerprint, the sweep header, its cells, and the scenario file and overrides it ran
//! with) beside its cell files; `merge` checks that the given shards come from one scenario and
//! hold every cell exactly once, and assembles the document a single run writes.

use super::cell_file::{self, Unusable};
use super::{Shard, SweepHeader};
use crate::results::ResultsDocument;
use crate::runner::CellRuns;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub const MANIFEST_FORMAT: &str = "expertsim-shard/1";

/// The largest shard manifest read (a sweep header and a cell list: kilobytes to a few MB).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What a finished shard leaves beside its cell files.
#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub fingerprint: String,
    pub shard: Shard,
    /// The scenario file and `--set` overrides the shard ran with (`merge` renders figures from
    /// them).
    pub scenario_path: PathBuf,
    pub sets: Vec<String>,
    /// The cells the shard ran, 0-based plan order.
    pub cells: Vec<usize>,
    pub header: SweepHeader,
}

fn manifest_name(shard: Shard) -> String {
    format!("partial-{}-of-{}.json", shard.index, shard.count)
}

fn is_manifest_name(name: &str) -> bool {
    name.starts_with("partial-") && name.ends_with(".json") && name.contains("-of-")
}

impl Manifest {
    /// Writes the manifest into `out` atomically; returns its path.
    pub fn write(&self, out: &Path) -> std::io::Result<PathBuf> {
        let path = out.join(manifest_name(self.shard));
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        bytes.push(b'\n');
        crate::results::write_atomic(&path, &bytes)?;
        Ok(path)
    }

    /// Reads and checks the manifest at `path`, trusting nothing in it: a regular file of at
    /// most `MAX_MANIFEST_BYTES`, the format, a shard `K/N` with `1 <= K <= N`, the fingerprint
    /// of its header, the cell list of that shard, and a scenario name that is one file-name
    /// component (it names the default output folder).
    fn read(path: &Path) -> Result<Manifest, String> {
        let bytes = crate::input::read_input_bytes(path, MAX_MANIFEST_BYTES)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a shard manifest: {e}", path.display()))?;
        let shard = manifest.shard;
        if !(shard.count >= 1 && (1..=shard.count).contains(&shard.index)) {
            return Err(format!(
                "{}: shard {}/{} is not K/N with 1 <= K <= N",
                path.display(),
                shard.index,
                shard.count
            ));
        }
        crate::validate::file_name_component(
            "header.scenario.name",
            &manifest.header.scenario.name,
        )
        .map_err(|e| format!("{}: {}: {}", path.display(), e.path, e.message))?;
        if manifest.format != MANIFEST_FORMAT {
            return Err(format!(
                "{}: format {:?}, expected {MANIFEST_FORMAT:?}",
                path.display(),
                manifest.format
            ));
        }
        if manifest.header.fingerprint() != manifest.fingerprint {
            return Err(format!(
                "{}: the recorded fingerprint does not match its sweep header (edited?)",
                path.display()
            ));
        }
        if manifest.cells != manifest.shard.cells(manifest.header.cells.len()) {
            return Err(format!(
                "{}: its cell list is not that of shard {}",
                path.display(),
                manifest.shard
            ));
        }
        Ok(manifest)
    }
}

/// The merged document and where its scenario came from.
pub struct Merged {
    pub document: ResultsDocument,
    pub fingerprint: String,
    pub scenario_path: PathBuf,
    pub sets: Vec<String>,
    /// The manifests merged, in the order read.
    pub manifests: Vec<PathBuf>,
}

/// The shard manifests in `dir`, sorted by name.
fn manifests_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| is_manifest_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(format!(
            "{}: no shard manifest (partial-K-of-N.json); a shard writes one when it finishes \
             (expertsim run SCENARIO --shard K/N --out {})",
            dir.display(),
            dir.display()
        ));
    }
    Ok(found)
}

/// Joins the shards found in `dirs` (each holding one or more `partial-K-of-N.json` and their
/// `cells/`) into the result document of the whole sweep. Refuses shards of different scenarios,
/// a cell held twice, a missing cell or an unreadable cell file; the message names the files.
pub fn merge(dirs: &[PathBuf]) -> Result<Merged, String> {
    let mut manifests: Vec<(PathBuf, PathBuf, Manifest)> = Vec::new();
    for dir in dirs {
        for path in manifests_in(dir)? {
            let same_file = |(_, seen, _): &(PathBuf, PathBuf, Manifest)| {
                std::fs::canonicalize(seen).ok() == std::fs::canonicalize(&path).ok()
            };
            if manifests.iter().any(same_file) {
                return Err(format!(
                    "{} is given twice: each shard must be merged once",
                    path.display()
                ));
            }
            let manifest = Manifest::read(&path)?;
            manifests.push((dir.clone(), path, manifest));
        }
    }
    let Some((_, first_path, first)) = manifests.first() else {
        return Err("no shard directory given".into());
    };
    for (_, path, manifest) in &manifests[1..] {
        if manifest.fingerprint != first.fingerprint {
            return Err(format!(
                "{} (scenario {:?}, fingerprint {}) and {} (scenario {:?}, fingerprint {}) come \
                 from different sweeps (scenario, overrides, seeds or tool version differ)",
                path.display(),
                manifest.header.scenario.name,
                manifest.fingerprint,
                first_path.display(),
                first.header.scenario.name,
                first.fingerprint
            ));
        }
    }
    let header = first.header.clone();
    let n_cells = header.cells.len();
    let mut owner: Vec<Option<usize>> = vec![None; n_cells];
    for (m, (_, path, manifest)) in manifests.iter().enumerate() {
        for &cell in &manifest.cells {
            if let Some(other) = owner[cell] {
                let (_, other_path, other_manifest) = &manifests[other];
                return Err(format!(
                    "cell {cell} ({}) is in both {} (shard {}) and {} (shard {}): each cell must \
                     come from exactly one shard",
                    header.cells[cell].id,
                    other_path.display(),
                    other_manifest.shard,
                    path.display(),
                    manifest.shard
                ));
            }
            owner[cell] = Some(m);
        }
    }
    let missing: Vec<usize> = (0..n_cells).filter(|&c| owner[c].is_none()).collect();
    if !missing.is_empty() {
        let counts: BTreeSet<usize> = manifests.iter().map(|(_, _, m)| m.shard.count).collect();
        let hint = match counts.iter().collect::<Vec<_>>()[..] {
            [&count] => {
                let absent: BTreeSet<Shard> =
                    missing.iter().map(|&c| Shard::holding(c, count)).collect();
                let names: Vec<String> = absent.iter().map(Shard::to_string).collect();
                format!("; shard {} not given or not finished", names.join(", "))
            }
            _ => String::new(),
        };
        let listed: Vec<String> = missing.iter().take(10).map(usize::to_string).collect();
        return Err(format!(
            "{} of {n_cells} cells missing (cell {}{}){hint}",
            missing.len(),
            listed.join(", "),
            if missing.len() > 10 { ", ..." } else { "" }
        ));
    }
    let fingerprint = first.fingerprint.clone();
    let cells: Vec<CellRuns> = owner
        .iter()
        .enumerate()
        .map(|(cell, m)| {
            let (dir, _, _) = &manifests[m.expect("every cell has an owner")];
            cell_file::read(dir, &header, &fingerprint, cell, false).map_err(|why| match why {
                Unusable::Absent => format!(
                    "{}: missing, although its shard's manifest lists it",
                    cell_file::path(dir, cell).display()
                ),
                Unusable::Stale(why) => why,
            })
        })
        .collect::<Result<_, _>>()?;
    let (_, _, first) = &manifests[0];
    Ok(Merged {
        document: header.assemble(cells),
        scenario_path: first.scenario_path.clone(),
        sets: first.sets.clone(),
        fingerprint,
        manifests: manifests.into_iter().map(|(_, path, _)| path).collect(),
    })
}
