//! The result document of a run or sweep (config echo, seeds, per-run metrics, per-cell mean, std
//! and 95% CI across seeds, improvement over a baseline), and atomic file writing. The document
//! holds no wall-clock time or host detail, so the same scenario and seed give identical bytes.

use crate::metrics::{AcrossSeeds, RunMetrics, SCALAR_METRICS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultsDocument {
    pub tool: ToolInfo,
    pub scenario: ScenarioEcho,
    pub seeds: Vec<u64>,
    pub sweep: Vec<SweepAxisEcho>,
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
    /// Where batch times come from: "analytic-roofline", "measured", or a reference model.
    pub cost_model: String,
    pub runs: Vec<RunResult>,
    /// Each scalar metric across seeds.
    pub summary: BTreeMap<String, AcrossSeeds>,
    /// Relative to the baseline cell (same coordinates, compare key = baseline), on seed means.
    pub improvement: Option<Improvement>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub seed: u64,
    pub metrics: RunMetrics,
}

/// Improvements in percent, positive = better than the baseline (the CAPS table's convention).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Improvement {
    pub baseline_cell: String,
    pub p99_reduction_pct: f64,
    pub p50_reduction_pct: f64,
    pub mean_latency_reduction_pct: f64,
    pub throughput_gain_pct: f64,
    pub imbalance_reduction_pct: f64,
}

impl CellResult {
    /// Builds a cell from its runs, computing the across-seed summary of every scalar metric.
    pub fn new(
        id: String,
        coords: Vec<(String, serde_json::Value)>,
        cost_model: String,
        runs: Vec<RunResult>,
    ) -> Self {
        let summary = SCALAR_METRICS
            .iter()
            .map(|(name, _)| {
                let values: Vec<f64> = runs
                    .iter()
                    .map(|r| r.metrics.scalar(name).expect("listed metric"))
                    .collect();
                (name.to_string(), AcrossSeeds::of(&values))
            })
            .collect();
        CellResult {
            id,
            coords,
            cost_model,
            runs,
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

fn reduction_pct(baseline: f64, value: f64) -> f64 {
    if baseline == 0.0 {
        0.0
    } else {
        (baseline - value) / baseline * 100.0
    }
}

/// Fills `improvement` of every cell against the cell that differs only in `compare` = `baseline`.
pub fn compute_improvements(cells: &mut [CellResult], compare: &str, baseline: &serde_json::Value) {
    let key_without = |cell: &CellResult| -> Vec<(String, serde_json::Value)> {
        cell.coords
            .iter()
            .filter(|(k, _)| k != compare)
            .cloned()
            .collect()
    };
    let baselines: Vec<(Vec<(String, serde_json::Value)>, usize)> = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.coord(compare) == Some(baseline))
        .map(|(i, c)| (key_without(c), i))
        .collect();
    let found: Vec<Option<usize>> = cells
        .iter()
        .map(|c| {
            baselines
                .iter()
                .find(|(k, _)| *k == key_without(c))
                .map(|(_, i)| *i)
        })
        .collect();
    let snapshot: Vec<(String, f64, f64, f64, f64, f64)> = cells
        .iter()
        .map(|c| {
            let m = |name| c.mean(name).expect("summary has every scalar");
            (
                c.id.clone(),
                m("latency_p99_ms"),
                m("latency_p50_ms"),
                m("latency_mean_ms"),
                m("throughput_rps"),
                m("imbalance"),
            )
        })
        .collect();
    for (cell, base_idx) in cells.iter_mut().zip(found) {
        let Some(b) = base_idx else { continue };
        let base = &snapshot[b];
        let m = |name| cell.mean(name).expect("summary has every scalar");
        cell.improvement = Some(Improvement {
            baseline_cell: base.0.clone(),
            p99_reduction_pct: reduction_pct(base.1, m("latency_p99_ms")),
            p50_reduction_pct: reduction_pct(base.2, m("latency_p50_ms")),
            mean_latency_reduction_pct: reduction_pct(base.3, m("latency_mean_ms")),
            throughput_gain_pct: -reduction_pct(base.4, m("throughput_rps")),
            imbalance_reduction_pct: reduction_pct(base.5, m("imbalance")),
        });
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader never sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
        file.sync_all()?;
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
    use crate::metrics::LatencySummary;

    fn metrics(p99: f64, throughput: f64) -> RunMetrics {
        let latency = LatencySummary {
            mean_ms: p99 / 2.0,
            p50_ms: p99 / 3.0,
            p90_ms: p99,
            p99_ms: p99,
            max_ms: p99,
        };
        RunMetrics {
            n_requests: 10,
            n_batches: 2,
            latency: latency.clone(),
            queue_wait: latency,
            throughput_rps: throughput,
            makespan_s: 1.0,
            mean_batch_size: 5.0,
            imbalance: 2.0,
            load_cv: 0.5,
            mean_batch_time_ms: 1.0,
            utilization: 0.5,
            queue_depth_mean: 1.0,
            queue_depth_max: 3,
            queue_depth_series: vec![],
        }
    }

    fn cell(strategy: &str, rate: i64, p99: f64, throughput: f64) -> CellResult {
        let coords = vec![
            ("rate".to_string(), serde_json::json!(rate)),
            ("strategy".to_string(), serde_json::json!(strategy)),
        ];
        CellResult::new(
            format!("{strategy}@{rate}"),
            coords,
            "test".into(),
            vec![RunResult {
                seed: 1,
                metrics: metrics(p99, throughput),
            }],
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
        compute_improvements(&mut cells, "strategy", &serde_json::json!("fcfs"));
        let gv1 = cells[1].improvement.as_ref().unwrap();
        assert_eq!(gv1.baseline_cell, "fcfs@1");
        assert!((gv1.p99_reduction_pct - 25.0).abs() < 1e-9);
        assert!((gv1.throughput_gain_pct - 10.0).abs() < 1e-9);
        assert!((cells[3].improvement.as_ref().unwrap().p99_reduction_pct - 75.0).abs() < 1e-9);
        assert_eq!(
            cells[0].improvement.as_ref().unwrap().p99_reduction_pct,
            0.0
        );
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
