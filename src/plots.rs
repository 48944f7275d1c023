//! Turns a result document into the figures its scenario asks for (`[[figure]]` tables): one
//! row of panels per metric, one column per value of the `panels` key, one line per value of the
//! `series` key, x = the `x` key, y = mean across seeds with its 95% CI as error bars. Sweep keys
//! the figure does not use give one figure file per combination of their values.

use anyhow::Context;
use figures::{BarPanel, BarSeries, Chart, ChartFigure, Panel, Series};
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
            spec.series.as_deref(),
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
) -> ChartFigure {
    let panel_values: Vec<Option<&Json>> = match &spec.panels {
        Some(key) => axis_values(document, key).iter().map(Some).collect(),
        None => vec![None],
    };
    // No series key: one line (or bar set) per figure, named after the metric.
    let series_values: Vec<Option<&Json>> = match &spec.series {
        Some(key) => axis_values(document, key).iter().map(Some).collect(),
        None => vec![None],
    };
    let x_values = axis_values(document, &spec.x);
    let numeric_x = x_values.iter().all(|v| v.as_f64().is_some());
    let x_label = spec.x.rsplit('.').next().unwrap_or(&spec.x).to_string();
    let mut charts: Vec<Chart> = Vec::new();
    for metric in &spec.metrics {
        for panel_value in &panel_values {
            let in_panel: Vec<&&CellResult> = cells
                .iter()
                .filter(|c| match (panel_value, &spec.panels) {
                    (Some(v), Some(key)) => c.coord(key) == Some(*v),
                    _ => true,
                })
                .collect();
            // The cell of one series value at one x value, if the sweep has it.
            let find = |series_value: Option<&Json>, x_value: &Json| {
                in_panel.iter().find(|c| {
                    c.coord(&spec.x) == Some(x_value)
                        && match (series_value, &spec.series) {
                            (Some(v), Some(key)) => c.coord(key) == Some(v),
                            _ => true,
                        }
                })
            };
            let series_label = |series_value: Option<&Json>| match series_value {
                Some(v) => label(v),
                None => metric.clone(),
            };
            let title = match panel_value {
                Some(v) => format!("{} — {}", metric_label(document, metric), label(v)),
                None => metric_label(document, metric),
            };
            if numeric_x {
                let series = series_values
                    .iter()
                    .map(|series_value| {
                        let mut points = Vec::new();
                        let mut errors = Vec::new();
                        for x_value in x_values {
                            let Some(cell) = find(*series_value, x_value) else {
                                continue;
                            };
                            let summary = &cell.summary[metric.as_str()];
                            points.push((x_value.as_f64().expect("numeric x"), summary.mean));
                            errors.push(summary.ci95);
                        }
                        Series {
                            label: series_label(*series_value),
                            points,
                            y_err: Some(errors),
                        }
                    })
                    .collect();
                charts.push(Chart::Line(Panel {
                    title,
                    x_label: x_label.clone(),
                    y_label: metric_label(document, metric),
                    series,
                    log_y: spec.log_y,
                }));
            } else {
                // Categorical x (policy names, datasets): grouped bars, one group per x value.
                let series = series_values
                    .iter()
                    .map(|series_value| {
                        let summaries: Vec<_> = x_values
                            .iter()
                            .map(|x| find(*series_value, x).map(|c| &c.summary[metric.as_str()]))
                            .collect();
                        BarSeries {
                            label: series_label(*series_value),
                            values: summaries
                                .iter()
                                .map(|s| s.map_or(0.0, |s| s.mean))
                                .collect(),
                            y_err: Some(
                                summaries
                                    .iter()
                                    .map(|s| s.map_or(0.0, |s| s.ci95))
                                    .collect(),
                            ),
                        }
                    })
                    .collect();
                charts.push(Chart::Bars(BarPanel {
                    title,
                    x_label: x_label.clone(),
                    y_label: metric_label(document, metric),
                    groups: x_values.iter().map(label).collect(),
                    series,
                }));
            }
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
    ChartFigure::new(title, charts, panel_values.len())
}
