//! Turns a result document into the figures its scenario asks for (`[[figure]]` tables): one
//! row of panels per metric, one column per value of the `panels` key, one line per value of the
//! `series` key, x = the `x` key, y = mean across seeds with its 95% CI as error bars. Sweep keys
//! the figure does not use give one figure file per combination of their values.

use anyhow::Context;
use figures::{Figure, Panel, Series};
use sim::results::{CellResult, ResultsDocument};
use sim::scenario::ScenarioPlan;
use sim::scenario::file::FigureFile;
use std::path::{Path, PathBuf};

type Json = serde_json::Value;

fn label(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn metric_label(document: &ResultsDocument, metric: &str) -> String {
    document
        .scenario
        .family
        .metrics()
        .iter()
        .find(|m| m.name == metric)
        .map(|m| m.description.to_string())
        .unwrap_or_else(|| metric.to_string())
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Renders every figure of `plan` into `dir`; returns the files written.
pub fn render_all(
    plan: &ScenarioPlan,
    document: &ResultsDocument,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if plan.figures.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for spec in &plan.figures {
        let used: Vec<&str> = [
            Some(spec.x.as_str()),
            Some(spec.series.as_str()),
            spec.panels.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        let others: Vec<&sim::results::SweepAxisEcho> = document
            .sweep
            .iter()
            .filter(|a| !used.contains(&a.key.as_str()))
            .collect();
        // Every combination of the unused keys' values.
        let mut combos: Vec<Vec<(String, Json)>> = vec![vec![]];
        for axis in &others {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    axis.values
                        .iter()
                        .map(move |v| [c.clone(), vec![(axis.key.clone(), v.clone())]].concat())
                })
                .collect();
        }
        for combo in combos {
            let cells: Vec<&CellResult> = document
                .cells
                .iter()
                .filter(|cell| combo.iter().all(|(k, v)| cell.coord(k) == Some(v)))
                .collect();
            let suffix: String = combo
                .iter()
                .map(|(k, v)| {
                    format!(
                        "_{}-{}",
                        sanitize(k.rsplit('.').next().unwrap_or(k)),
                        sanitize(&label(v))
                    )
                })
                .collect();
            let figure = build_figure(spec, document, &cells, &combo);
            let stem = dir.join(format!("{}{}", spec.name, suffix));
            let paths = figures::render(&figure, &stem)
                .with_context(|| format!("rendering figure {}", stem.display()))?;
            written.extend(paths);
        }
    }
    Ok(written)
}

fn axis_values<'a>(document: &'a ResultsDocument, key: &str) -> &'a [Json] {
    document
        .sweep
        .iter()
        .find(|a| a.key == key)
        .map(|a| a.values.as_slice())
        .unwrap_or(&[])
}

fn build_figure(
    spec: &FigureFile,
    document: &ResultsDocument,
    cells: &[&CellResult],
    combo: &[(String, Json)],
) -> Figure {
    let panel_values: Vec<Option<&Json>> = match &spec.panels {
        Some(key) => axis_values(document, key).iter().map(Some).collect(),
        None => vec![None],
    };
    let mut panels = Vec::new();
    for metric in &spec.metrics {
        for panel_value in &panel_values {
            let in_panel: Vec<&&CellResult> = cells
                .iter()
                .filter(|c| match (panel_value, &spec.panels) {
                    (Some(v), Some(key)) => c.coord(key) == Some(*v),
                    _ => true,
                })
                .collect();
            let series = axis_values(document, &spec.series)
                .iter()
                .map(|series_value| {
                    let mut points = Vec::new();
                    let mut errors = Vec::new();
                    for x_value in axis_values(document, &spec.x) {
                        let Some(cell) = in_panel.iter().find(|c| {
                            c.coord(&spec.series) == Some(series_value)
                                && c.coord(&spec.x) == Some(x_value)
                        }) else {
                            continue;
                        };
                        let Some(x) = x_value.as_f64() else { continue };
                        let summary = &cell.summary[metric.as_str()];
                        points.push((x, summary.mean));
                        errors.push(summary.ci95);
                    }
                    Series {
                        label: label(series_value),
                        points,
                        y_err: Some(errors),
                    }
                })
                .collect();
            let title = match panel_value {
                Some(v) => format!("{} — {}", metric_label(document, metric), label(v)),
                None => metric_label(document, metric),
            };
            panels.push(Panel {
                title,
                x_label: spec.x.rsplit('.').next().unwrap_or(&spec.x).to_string(),
                y_label: metric_label(document, metric),
                series,
                log_y: spec.log_y,
            });
        }
    }
    let mut title = if spec.title.is_empty() {
        spec.name.clone()
    } else {
        spec.title.clone()
    };
    if !combo.is_empty() {
        title = format!(
            "{title} ({})",
            combo
                .iter()
                .map(|(k, v)| format!("{k} = {}", label(v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Figure {
        title,
        panels,
        columns: panel_values.len(),
    }
}
