//! The summary table `expertsim run` prints: one row per sweep cell, the family's headline
//! metrics as means across seeds, and their change against the baseline when there is one; and
//! the lines naming the runs that failed (out of memory, no placement), which make the exit
//! code 3.

use expertsim_scenario::results::ResultsDocument;
use std::fmt::Write;

fn coord_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Formats a value with about four significant digits, whatever its magnitude.
fn number(value: f64) -> String {
    if !value.is_finite() {
        // A metric the runs could not report (nothing served): no number.
        return "n/a".to_string();
    }
    let magnitude = value.abs();
    if magnitude >= 1000.0 || magnitude == 0.0 {
        format!("{value:.1}")
    } else if magnitude >= 10.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// Renders the per-cell summary as an aligned text table.
pub fn table(document: &ResultsDocument) -> String {
    let family = document.scenario.family;
    let headline = family.headline();
    let versus = family.headline_improvements();
    let keys: Vec<&str> = document.sweep.iter().map(|a| a.key.as_str()).collect();
    let mut header: Vec<String> = keys
        .iter()
        .map(|k| k.rsplit('.').next().unwrap_or(k).to_string())
        .collect();
    header.extend(headline.iter().map(|m| m.to_string()));
    // The 95% CI is shown for the metric the baseline comparison leads with.
    let ci_metric = versus.first().or(headline.first());
    if let Some(metric) = ci_metric {
        header.push(format!("±ci95({metric})"));
    }
    if document.baseline.is_some() {
        header.extend(versus.iter().map(|m| format!("{m}_vs_base")));
    }
    let mut rows = vec![header];
    for cell in &document.cells {
        let mut row: Vec<String> = cell.coords.iter().map(|(_, v)| coord_text(v)).collect();
        row.extend(headline.iter().map(|m| number(cell.summary[*m].mean)));
        if let Some(metric) = ci_metric {
            let across = &cell.summary[*metric];
            // One seed gives no interval (its `ci95` is 0 in results.json): say so, not "0.0".
            row.push(if across.n < 2 || !across.mean.is_finite() {
                "-".to_string()
            } else {
                number(across.ci95)
            });
        }
        if document.baseline.is_some() {
            for metric in versus {
                row.push(match &cell.improvement {
                    Some(i) => match i.pct.get(*metric) {
                        Some(pct) => format!("{pct:+.1}%"),
                        // No baseline to be relative to (a zero or missing baseline value).
                        None => "n/a".to_string(),
                    },
                    None => "-".to_string(),
                });
            }
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "{} — {} cells x {} seeds",
        document.scenario.name,
        document.cells.len(),
        document.seeds.len()
    );
    if let Some(b) = &document.baseline {
        let _ = write!(
            out,
            "; changes vs {} = {} (positive = better)",
            b.compare,
            coord_text(&b.baseline)
        );
    }
    out.push('\n');
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (v, w))| {
                if i < keys.len() {
                    format!("{v:<w$}")
                } else {
                    format!("{v:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out.trim_end().to_string()
}

/// Cells listed by name before the rest are only counted.
const FAILED_CELLS_SHOWN: usize = 5;

/// The lines naming every cell with failed runs (its coordinates, how many of its seeds failed
/// and the first reason), at most `FAILED_CELLS_SHOWN` of them, then the count; empty when no
/// run failed.
pub fn failed_runs(document: &ResultsDocument) -> Vec<String> {
    let total: usize = document.cells.iter().map(|c| c.runs.len()).sum();
    let mut failed_runs = 0;
    let mut lines = Vec::new();
    let mut cells = 0;
    for cell in &document.cells {
        let failures: Vec<(u64, &str)> = cell
            .runs
            .iter()
            .filter_map(|r| r.failure().map(|why| (r.seed, why)))
            .collect();
        let Some((seed, why)) = failures.first() else {
            continue;
        };
        failed_runs += failures.len();
        cells += 1;
        if cells <= FAILED_CELLS_SHOWN {
            let at = if cell.coords.is_empty() {
                String::new()
            } else {
                let coords: Vec<String> = cell
                    .coords
                    .iter()
                    .map(|(k, v)| format!("{k} = {}", coord_text(v)))
                    .collect();
                format!(" [{}]", coords.join(", "))
            };
            lines.push(format!(
                "error: run failed{at}, {} of {} seeds (seed {seed}): {why}",
                failures.len(),
                cell.runs.len()
            ));
        }
    }
    if failed_runs > 0 {
        if cells > FAILED_CELLS_SHOWN {
            lines.push(format!(
                "error: ... and {} more cells with failed runs",
                cells - FAILED_CELLS_SHOWN
            ));
        }
        lines.push(format!(
            "error: {failed_runs} of {total} runs failed and report no number (results.json \
             keeps them, with the reason in details.failed or details.error); exit code 3"
        ));
    }
    lines
}
