//! The summary table `expertsim run` prints: one row per sweep cell, means across seeds.

use sim::results::ResultsDocument;
use std::fmt::Write;

fn coord_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Renders the per-cell summary (P50/P99 latency, throughput, imbalance, and the P99 change
/// against the baseline when the scenario names one) as an aligned text table.
pub fn table(document: &ResultsDocument) -> String {
    let keys: Vec<&str> = document.sweep.iter().map(|a| a.key.as_str()).collect();
    let mut header: Vec<String> = keys
        .iter()
        .map(|k| k.rsplit('.').next().unwrap_or(k).to_string())
        .collect();
    header.extend(["p50_ms", "p99_ms", "±ci95", "thru_rps", "imbalance"].map(String::from));
    if document.baseline.is_some() {
        header.extend(["p99_vs_base", "thru_vs_base"].map(String::from));
    }
    let mut rows = vec![header];
    for cell in &document.cells {
        let mut row: Vec<String> = cell.coords.iter().map(|(_, v)| coord_text(v)).collect();
        let s = |m: &str| &cell.summary[m];
        row.push(format!("{:.1}", s("latency_p50_ms").mean));
        row.push(format!("{:.1}", s("latency_p99_ms").mean));
        row.push(format!("{:.1}", s("latency_p99_ms").ci95));
        row.push(format!("{:.2}", s("throughput_rps").mean));
        row.push(format!("{:.3}", s("imbalance").mean));
        if document.baseline.is_some() {
            match &cell.improvement {
                Some(i) => {
                    row.push(format!("{:+.1}%", i.p99_reduction_pct));
                    row.push(format!("{:+.1}%", i.throughput_gain_pct));
                }
                None => row.extend(["-".to_string(), "-".to_string()]),
            }
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    if let Some(b) = &document.baseline {
        let _ = writeln!(
            out,
            "{} — {} cells x {} seeds; improvements vs {} = {}",
            document.scenario.name,
            document.cells.len(),
            document.seeds.len(),
            b.compare,
            coord_text(&b.baseline)
        );
    } else {
        let _ = writeln!(
            out,
            "{} — {} cells x {} seeds",
            document.scenario.name,
            document.cells.len(),
            document.seeds.len()
        );
    }
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
