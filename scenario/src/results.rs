//! The result document of a run or sweep (config echo, seeds, per-run metrics, per-cell mean, std
//! and 95% CI across seeds, improvement over a baseline), and atomic file writing. The document
//! holds no wall-clock time or host detail, so the same scenario and seed give identical bytes.

use crate::metrics::{AcrossSeeds, Better, MetricInfo, RunOutput};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultsDocument {
    pub tool: ToolInfo,
    pub scenario: ScenarioEcho,
    pub seeds: Vec<u64>,
    pub sweep: Vec<SweepAxisEcho>,
    /// `sweep_only`: which cells of the sweep's product were kept (absent: every cell).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep_only: Vec<serde_json::Value>,
    pub baseline: Option<BaselineEcho>,
    pub cells: Vec<CellResult>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioEcho {
    pub name: String,
    pub description: String,
    #[serde(deserialize_with = "crate::registry::deserialize_family")]
    pub family: crate::family::FamilyId,
    /// The scenario document after `--set` overrides, without its `[sweep]` table.
    pub document: serde_json::Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepAxisEcho {
    pub key: String,
    pub values: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineEcho {
    pub compare: String,
    pub baseline: serde_json::Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub id: String,
    /// The cell's value of each sweep key, in sweep order.
    pub coords: Vec<(String, serde_json::Value)>,
    /// Where step times come from: "analytic-roofline", "measured", or a reference model.
    pub cost_model: String,
    pub runs: Vec<RunResult>,
    /// The trace the cell replayed and what the replay offered (trace arrivals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceReplayed>,
    /// Each scalar metric across seeds.
    pub summary: BTreeMap<String, AcrossSeeds>,
    /// Relative to the baseline cell (same coordinates, compare key = baseline), on seed means.
    pub improvement: Option<Improvement>,
}

/// The trace file a cell replayed (its file name: the scenario echo holds the path as written)
/// and the statistics of the replayed requests: rate, burstiness, length distributions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceReplayed {
    pub file: String,
    #[serde(flatten)]
    pub stats: crate::arrivals::TraceStats,
}

impl TraceReplayed {
    /// What `scenario` replays, when its arrivals are a trace.
    pub fn of(scenario: &crate::family::Scenario) -> Option<TraceReplayed> {
        scenario.trace_replay().map(|(path, stats)| TraceReplayed {
            file: path.file_name().map_or_else(
                || path.display().to_string(),
                |f| f.to_string_lossy().into(),
            ),
            stats,
        })
    }
}

/// One seed of one cell: the family's scalar metrics and its detail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub seed: u64,
    #[serde(deserialize_with = "scalars_reading_null_as_nan")]
    pub scalars: BTreeMap<String, f64>,
    pub details: serde_json::Value,
}

/// Improvement of every scalar metric over the baseline cell, in percent of the baseline's mean,
/// signed so that positive is better (lower for latencies, higher for throughput).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Improvement {
    pub baseline_cell: String,
    pub pct: BTreeMap<String, f64>,
}

/// JSON has no NaN or infinity (`serde_json` writes them as `null`): reads `null` back as NaN, so
/// runs read from a cell file write the same bytes again.
fn scalars_reading_null_as_nan<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(deserializer)?;
    Ok(raw
        .into_iter()
        .map(|(name, value)| (name, value.unwrap_or(f64::NAN)))
        .collect())
}

impl RunResult {
    /// Why the run failed (`details.failed`: out of memory, a failed check; `details.error`:
    /// no placement), when it did: such a run reports no number.
    pub fn failure(&self) -> Option<&str> {
        ["failed", "error"]
            .iter()
            .find_map(|key| self.details.get(key)?.as_str())
    }

    pub fn new(seed: u64, output: RunOutput) -> Self {
        RunResult {
            seed,
            scalars: output.scalars.into_iter().collect(),
            details: output.details,
        }
    }
}

impl CellResult {
    /// Builds a cell from its runs, computing the across-seed summary of every listed metric.
    pub fn new(
        id: String,
        coords: Vec<(String, serde_json::Value)>,
        cost_model: String,
        runs: Vec<RunResult>,
        trace: Option<TraceReplayed>,
        metrics: &[MetricInfo],
    ) -> Self {
        let summary = metrics
            .iter()
            .map(|m| {
                let values: Vec<f64> = runs
                    .iter()
                    .map(|r| {
                        *r.scalars
                            .get(m.name)
                            .unwrap_or_else(|| panic!("a run did not report metric {}", m.name))
                    })
                    .collect();
                (m.name.to_string(), AcrossSeeds::of(&values))
            })
            .collect();
        CellResult {
            id,
            coords,
            cost_model,
            runs,
            trace,
            summary,
            improvement: None,
        }
    }

    pub fn mean(&self, metric: &str) -> Option<f64> {
        self.summary.get(metric).map(|s| s.mean)
    }

    pub fn coord(&self, key: &str) -> Option<&serde_json::Value> {
        self.coords.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// The change from `baseline` to `value` in percent of the baseline, positive when better;
/// None (missing, not 0) when there is no baseline to be relative to: a zero or non-finite
/// baseline, or a non-finite value (a run that reported none).
pub fn improvement_pct(baseline: f64, value: f64, better: Better) -> Option<f64> {
    if baseline == 0.0 || !baseline.is_finite() || !value.is_finite() {
        return None;
    }
    let change = (value - baseline) / baseline.abs() * 100.0;
    // `+ 0.0` turns the -0.0 of an unchanged lower-is-better metric into 0.0.
    Some(match better {
        Better::Lower => -change + 0.0,
        Better::Higher => change + 0.0,
    })
}

/// Fills `improvement` of every cell against the cell that differs only in `compare` = `baseline`.
pub fn compute_improvements(
    cells: &mut [CellResult],
    compare: &str,
    baseline: &serde_json::Value,
    metrics: &[MetricInfo],
) {
    let others = |cell: &CellResult| -> Vec<(String, serde_json::Value)> {
        cell.coords
            .iter()
            .filter(|(k, _)| k != compare)
            .cloned()
            .collect()
    };
    let baseline_of: Vec<Option<usize>> = cells
        .iter()
        .map(|cell| {
            cells
                .iter()
                .position(|b| b.coord(compare) == Some(baseline) && others(b) == others(cell))
        })
        .collect();
    let snapshot: Vec<(String, BTreeMap<String, f64>)> = cells
        .iter()
        .map(|c| {
            (
                c.id.clone(),
                c.summary.iter().map(|(k, v)| (k.clone(), v.mean)).collect(),
            )
        })
        .collect();
    for (cell, base) in cells.iter_mut().zip(baseline_of) {
        let Some(b) = base else { continue };
        let (baseline_cell, base_means) = &snapshot[b];
        // A metric without a baseline to compare to is left out: missing, not 0.
        let pct = metrics
            .iter()
            .filter_map(|m| {
                improvement_pct(base_means[m.name], cell.summary[m.name].mean, m.better)
                    .map(|pct| (m.name.to_string(), pct))
            })
            .collect();
        cell.improvement = Some(Improvement {
            baseline_cell: baseline_cell.clone(),
            pct,
        });
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader never sees a half-written file; the data is on disk when this returns.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_through_rename(path, bytes, true)
}

/// Like `write_atomic` without waiting for the disk (`fsync`): a process killed at any point
/// leaves the old file or the new one, but after a power loss the file may be empty. For files
/// whose loss only costs recomputation (a sweep's finished cells).
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_through_rename(path, bytes, false)
}

/// What a run, merge, capacity search or live run writes into its output folder; none of these
/// may already be a symbolic link there (a write would land wherever it points).
const OUTPUT_ENTRIES: &[&str] = &[
    "results.json",
    "cells",
    "figures",
    "requests",
    "trace_events",
    "capacity.json",
    "fidelity.json",
    "calibrated-profile.json",
];

/// Checks the output folder `out` before anything runs or is written into it: not the root of
/// the file system, not a file, no symbolic link among the entries a run writes (or its shard
/// manifests), `results.json` a file if present, and no result of a scenario other than
/// `scenario` in it (two scenarios sharing one folder would overwrite each other's results).
pub fn check_output_folder(out: &Path, scenario: &str) -> Result<(), String> {
    let shown = out.display();
    if out.parent().is_none() || std::fs::canonicalize(out).is_ok_and(|p| p.parent().is_none()) {
        return Err(format!(
            "{shown} is the root of the file system; give a folder of its own"
        ));
    }
    let metadata = match std::fs::metadata(out) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    if !metadata.is_dir() {
        return Err(format!("{shown} is a file, not a folder"));
    }
    let entries = std::fs::read_dir(out).map_err(|e| format!("{shown}: {e}"))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let written = OUTPUT_ENTRIES.contains(&name.as_str()) || name.starts_with("partial-");
        let path = entry.path();
        if !written {
            continue;
        }
        let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        // Inside a folder the run writes to (figures/, cells/, ...), a link is refused too.
        let inner_link = || -> Option<PathBuf> {
            std::fs::read_dir(&path)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
        };
        if let Some(link) = link.then(|| path.clone()).or_else(inner_link) {
            return Err(format!(
                "{} is a symbolic link; the run would write through it (remove it)",
                link.display()
            ));
        }
        let holds = match name.as_str() {
            "results.json" => {
                if !path.is_file() {
                    return Err(format!("{} is not a file", path.display()));
                }
                Some(scenario_of(&path, |d: ScenarioNamed| d.scenario.name))
            }
            _ if name.starts_with("partial-") && name.ends_with(".json") => {
                Some(scenario_of(&path, |d: ManifestNamed| {
                    d.header.scenario.name
                }))
            }
            _ => None,
        };
        match holds {
            Some(Ok(other)) if other != scenario => {
                return Err(format!(
                    "{} holds the results of scenario {other:?}, not {scenario:?}; give another \
                     --out (or remove them)",
                    path.display()
                ));
            }
            Some(Err(why)) => {
                return Err(format!(
                    "{} is not a result of expertsim ({why}); give another --out (or remove it)",
                    path.display()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct NameOnly {
    name: String,
}
#[derive(Deserialize)]
struct ScenarioNamed {
    scenario: NameOnly,
}
#[derive(Deserialize)]
struct ManifestNamed {
    header: ScenarioNamed,
}

/// The scenario name a result file at `path` records, read through `name_of`.
fn scenario_of<T: serde::de::DeserializeOwned>(
    path: &Path,
    name_of: impl Fn(T) -> String,
) -> Result<String, String> {
    let file = crate::input::open_input(path).map_err(|e| e.to_string())?;
    let document: T =
        serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| e.to_string())?;
    Ok(name_of(document))
}

fn write_through_rename(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("result");
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if sync {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_folder_is_checked_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            check_output_folder(Path::new("/"), "a")
                .unwrap_err()
                .contains("root")
        );
        assert!(check_output_folder(&dir.path().join("new"), "a").is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(
            check_output_folder(&file, "a")
                .unwrap_err()
                .contains("is a file")
        );
        let out = dir.path().join("out");
        std::fs::create_dir_all(out.join("results.json")).unwrap();
        assert!(
            check_output_folder(&out, "a")
                .unwrap_err()
                .contains("not a file")
        );
        std::fs::remove_dir(out.join("results.json")).unwrap();
        std::fs::write(out.join("results.json"), br#"{"scenario": {"name": "b"}}"#).unwrap();
        assert!(check_output_folder(&out, "b").is_ok());
        let err = check_output_folder(&out, "a").unwrap_err();
        assert!(err.contains("scenario \"b\""), "{err}");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path(), out.join("figures")).unwrap();
            let err = check_output_folder(&out, "b").unwrap_err();
            assert!(err.contains("symbolic link"), "{err}");
        }
    }

    const METRICS: &[MetricInfo] = &[
        MetricInfo {
            name: "p99",
            description: "P99",
            better: Better::Lower,
        },
        MetricInfo {
            name: "throughput",
            description: "throughput",
            better: Better::Higher,
        },
    ];

    fn cell(strategy: &str, rate: i64, p99: f64, throughput: f64) -> CellResult {
        let coords = vec![
            ("rate".to_string(), serde_json::json!(rate)),
            ("strategy".to_string(), serde_json::json!(strategy)),
        ];
        let output = RunOutput {
            scalars: vec![("p99".into(), p99), ("throughput".into(), throughput)],
            details: serde_json::Value::Null,
        };
        CellResult::new(
            format!("{strategy}@{rate}"),
            coords,
            "test".into(),
            vec![RunResult::new(1, output)],
            None,
            METRICS,
        )
    }

    #[test]
    fn improvements_compare_against_the_matching_baseline_cell() {
        let mut cells = vec![
            cell("fcfs", 1, 200.0, 100.0),
            cell("gv", 1, 150.0, 110.0),
            cell("fcfs", 2, 400.0, 100.0),
            cell("gv", 2, 100.0, 100.0),
        ];
        compute_improvements(&mut cells, "strategy", &serde_json::json!("fcfs"), METRICS);
        let gv1 = cells[1].improvement.as_ref().unwrap();
        assert_eq!(gv1.baseline_cell, "fcfs@1");
        assert!(
            (gv1.pct["p99"] - 25.0).abs() < 1e-9,
            "lower is better: 200 -> 150 is +25%"
        );
        assert!(
            (gv1.pct["throughput"] - 10.0).abs() < 1e-9,
            "higher is better: 100 -> 110 is +10%"
        );
        assert!((cells[3].improvement.as_ref().unwrap().pct["p99"] - 75.0).abs() < 1e-9);
        assert_eq!(cells[0].improvement.as_ref().unwrap().pct["p99"], 0.0);
    }

    /// Against a zero baseline (an out-of-memory count of 0, a run that served nothing) there is
    /// no relative change: the metric is missing from the improvement, not 0%.
    #[test]
    fn an_improvement_against_a_zero_baseline_is_missing() {
        assert_eq!(improvement_pct(0.0, 5.0, Better::Lower), None);
        assert_eq!(improvement_pct(f64::NAN, 5.0, Better::Lower), None);
        assert_eq!(improvement_pct(10.0, f64::NAN, Better::Lower), None);
        assert_eq!(improvement_pct(10.0, 5.0, Better::Lower), Some(50.0));
        let mut cells = vec![cell("fcfs", 1, 0.0, 100.0), cell("gv", 1, 150.0, 110.0)];
        compute_improvements(&mut cells, "strategy", &serde_json::json!("fcfs"), METRICS);
        let gv = cells[1].improvement.as_ref().unwrap();
        assert!(!gv.pct.contains_key("p99"), "{:?}", gv.pct);
        assert!((gv.pct["throughput"] - 10.0).abs() < 1e-9);
    }

    #[test]
    fn atomic_write_leaves_only_the_final_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/results.json");
        write_atomic(&path, b"{}").unwrap();
        write_atomic(&path, b"{\"a\":1}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("results.json")]);
    }
}
