//! `metric` figures: one row of panels per metric, one column per value of `panels`, one line
//! (numeric x) or bar set (categorical x) per value of `series`, y = the metric's mean across
//! seeds with its 95% CI. `improvement` figures reuse the same grid with another y.

use super::labels::key_label;
use super::{Json, Selection, label};
use expertsim_scenario::results::CellResult;
use expertsim_scenario::scenario::file::FigureFile;
use figures::{BarPanel, BarSeries, Chart, ChartFigure, Panel, Series};

/// One y value of a cell for a metric, with its error-bar half-width; `None` leaves it out.
pub(crate) type ValueOf<'f> = dyn Fn(&CellResult, &str) -> Option<(f64, f64)> + 'f;

pub(crate) fn build(selection: &Selection<'_>) -> ChartFigure {
    let spec = selection.spec;
    if !spec.with_improvement {
        let mut figure = absolute(selection);
        figure.caption = Some(caption(selection, ""));
        return figure;
    }
    // One row of absolute values and one of the change against the baseline per metric.
    let mut charts = Vec::new();
    let mut columns = 1;
    for metric in &spec.metrics {
        let one = FigureFile {
            metrics: vec![metric.clone()],
            ..spec.clone()
        };
        let sub = Selection {
            spec: &one,
            document: selection.document,
            cells: selection.cells.clone(),
        };
        let rows = absolute(&sub);
        columns = rows.columns;
        charts.extend(rows.charts);
        if let Ok(change) = super::improvement::build(&sub) {
            charts.extend(change.charts);
        }
    }
    let mut figure = ChartFigure::new(String::new(), charts, columns);
    figure.caption = Some(caption(
        selection,
        "; change: against the baseline's seed mean, positive = better",
    ));
    figure
}

/// What the whiskers are, with the seed count of the result document.
pub(crate) fn whisker_caption(selection: &Selection<'_>) -> String {
    match selection.document.seeds.len() {
        1 => "one seed per point: no confidence interval".to_string(),
        n => format!("whiskers: 95% confidence interval of the mean over {n} seeds (Student t)"),
    }
}

/// The metric rows with each cell's mean and 95% CI.
fn absolute(selection: &Selection<'_>) -> ChartFigure {
    let mean = |cell: &CellResult, metric: &str| {
        if out_of_memory(cell) {
            return None;
        }
        // A cell whose runs reported no value (NaN) is left out, not drawn at 0.
        cell.summary
            .get(metric)
            .filter(|s| s.mean.is_finite())
            .map(|s| (s.mean, if s.ci95.is_finite() { s.ci95 } else { 0.0 }))
    };
    let spec = selection.spec;
    let y_label = |metric: &str| match &spec.y_label {
        Some(label) => label.clone(),
        None => selection.metric_label(metric),
    };
    grid(selection, &mean, &y_label, &|metric| {
        selection.metric_label(metric)
    })
}

/// The figure's caption: what the whiskers are, `more` after it, and the cells left out because
/// they ran out of memory (once for the figure, not in each panel's title, where it would not fit).
fn caption(selection: &Selection<'_>, more: &str) -> String {
    let left_out: Vec<String> = selection
        .cells
        .iter()
        .filter(|c| out_of_memory(c))
        .map(|c| {
            c.coords
                .iter()
                .map(|(_, v)| label(v))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let mut caption = whisker_caption(selection);
    caption.push_str(more);
    if !left_out.is_empty() {
        caption.push_str(&format!(
            "; out of memory, left out: {}",
            left_out.join(", ")
        ));
    }
    caption
}

/// Whether every run of the cell reports `out_of_memory` (ExpertWeave): it served nothing, so
/// its zeros are left out of the lines rather than drawn as values.
fn out_of_memory(cell: &CellResult) -> bool {
    !cell.runs.is_empty()
        && cell
            .runs
            .iter()
            .all(|r| r.scalars.get("out_of_memory").is_some_and(|v| *v > 0.0))
}

/// The metric x panel grid with `value` on y, `y_label(metric)` as the y description and
/// `title_of(metric)` heading each panel (before its panel value).
pub(crate) fn grid(
    selection: &Selection<'_>,
    value: &ValueOf<'_>,
    y_label: &dyn Fn(&str) -> String,
    title_of: &dyn Fn(&str) -> String,
) -> ChartFigure {
    let spec = selection.spec;
    let x_key = spec.x.as_deref().expect("validated: metric figures have x");
    let series_key = spec.series.first().map(String::as_str);
    let x_label = spec.x_label.clone().unwrap_or_else(|| key_label(x_key));
    let panels = selection.panels();
    let mut charts: Vec<Chart> = Vec::new();
    for metric in &spec.metrics {
        for (panel_value, cells) in &panels {
            let in_panel = Selection {
                spec,
                document: selection.document,
                cells: cells.clone(),
            };
            let x_values = in_panel.values(x_key);
            let series_values: Vec<Option<Json>> = match series_key {
                Some(key) => in_panel.values(key).into_iter().map(Some).collect(),
                None => vec![None],
            };
            let find = |series_value: &Option<Json>, x_value: &Json| -> Option<(f64, f64)> {
                let mut wanted = vec![(x_key, x_value)];
                if let (Some(key), Some(v)) = (series_key, series_value) {
                    wanted.push((key, v));
                }
                in_panel
                    .matching(&wanted)
                    .first()
                    .and_then(|cell| value(cell, metric))
            };
            // Without a series key a panel has one series, which its title names: unlabelled,
            // it gets no legend entry (the metric's raw key was one).
            let series_label = |series_value: &Option<Json>| match series_value {
                Some(v) => label(v),
                None => String::new(),
            };
            let title = match panel_value {
                Some(v) => format!("{} — {}", title_of(metric), selection.panel_name(Some(v))),
                None => title_of(metric),
            };
            let numeric_x = !spec.categorical_x && x_values.iter().all(|v| v.as_f64().is_some());
            if numeric_x {
                let series = series_values
                    .iter()
                    .map(|sv| {
                        let (points, errors) = x_values
                            .iter()
                            .filter_map(|x| {
                                find(sv, x).map(|(y, e)| ((x.as_f64().expect("numeric"), y), e))
                            })
                            .unzip();
                        Series {
                            label: series_label(sv),
                            points,
                            y_err: Some(errors),
                        }
                    })
                    .filter(|s| !s.points.is_empty())
                    .collect();
                charts.push(Chart::Line(Panel {
                    title,
                    x_label: x_label.clone(),
                    y_label: y_label(metric),
                    series,
                    log_y: spec.log_y,
                }));
            } else {
                let series = series_values
                    .iter()
                    .map(|sv| {
                        let found: Vec<Option<(f64, f64)>> =
                            x_values.iter().map(|x| find(sv, x)).collect();
                        BarSeries {
                            label: series_label(sv),
                            values: found.iter().map(|f| f.map_or(0.0, |f| f.0)).collect(),
                            y_err: Some(found.iter().map(|f| f.map_or(0.0, |f| f.1)).collect()),
                        }
                    })
                    .collect();
                charts.push(Chart::Bars(BarPanel {
                    title,
                    x_label: x_label.clone(),
                    y_label: y_label(metric),
                    groups: x_values.iter().map(label).collect(),
                    series,
                }));
            }
        }
    }
    ChartFigure::new(String::new(), charts, panels.len())
}

/// Series whose values coincide in every chart of `figure` (two selectors giving identical
/// numbers) would hide one line under the other: each later one is relabelled
/// `label (= earlier label)` in every chart, so the legend says why only one shows.
pub(crate) fn name_coinciding_series(figure: &mut ChartFigure) {
    // Each label's values, chart by chart (bit patterns, so equal means identical).
    type PerChart = Vec<(usize, Vec<u64>)>;
    let mut values: Vec<(String, PerChart)> = Vec::new();
    for (c, chart) in figure.charts.iter().enumerate() {
        let series: Vec<(&String, Vec<u64>)> = match chart {
            Chart::Line(p) => p
                .series
                .iter()
                .map(|s| {
                    let bits = s
                        .points
                        .iter()
                        .flat_map(|(x, y)| [x.to_bits(), y.to_bits()])
                        .collect();
                    (&s.label, bits)
                })
                .collect(),
            Chart::Bars(p) => p
                .series
                .iter()
                .map(|s| (&s.label, s.values.iter().map(|v| v.to_bits()).collect()))
                .collect(),
            _ => continue,
        };
        for (label, bits) in series {
            match values.iter_mut().find(|(l, _)| l == label) {
                Some((_, charts)) => charts.push((c, bits)),
                None => values.push((label.clone(), vec![(c, bits)])),
            }
        }
    }
    let mut renamed: Vec<(String, String)> = Vec::new();
    for (i, (label, charts)) in values.iter().enumerate() {
        if let Some((earlier, _)) = values[..i]
            .iter()
            .find(|(_, other)| other == charts && !charts.is_empty())
        {
            renamed.push((label.clone(), format!("{label} (= {earlier})")));
        }
    }
    if renamed.is_empty() {
        return;
    }
    let rename = |label: &mut String| {
        if let Some((_, new)) = renamed.iter().find(|(old, _)| old == label) {
            *label = new.clone();
        }
    };
    for chart in &mut figure.charts {
        match chart {
            Chart::Line(p) => p.series.iter_mut().for_each(|s| rename(&mut s.label)),
            Chart::Bars(p) => p.series.iter_mut().for_each(|s| rename(&mut s.label)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(label: &str, ys: &[f64]) -> Series {
        Series {
            label: label.into(),
            points: ys.iter().enumerate().map(|(i, y)| (i as f64, *y)).collect(),
            y_err: None,
        }
    }

    #[test]
    fn a_series_identical_to_an_earlier_one_in_every_chart_says_so() {
        let chart = |b_last: f64| {
            Chart::Line(Panel {
                series: vec![
                    line("a", &[1.0, 2.0]),
                    line("b", &[3.0, b_last]),
                    line("c", &[3.0, 4.0]),
                ],
                ..Panel::default()
            })
        };
        let mut figure = ChartFigure::new(String::new(), vec![chart(4.0), chart(4.0)], 2);
        name_coinciding_series(&mut figure);
        let labels = |f: &ChartFigure, i: usize| match &f.charts[i] {
            Chart::Line(p) => p.series.iter().map(|s| s.label.clone()).collect::<Vec<_>>(),
            _ => unreachable!(),
        };
        assert_eq!(labels(&figure, 0), ["a", "b", "c (= b)"]);
        assert_eq!(labels(&figure, 1), ["a", "b", "c (= b)"]);
        // Equal in one panel only: different numbers, no note.
        let mut figure = ChartFigure::new(String::new(), vec![chart(4.0), chart(5.0)], 2);
        name_coinciding_series(&mut figure);
        assert_eq!(labels(&figure, 1), ["a", "b", "c"]);
    }
}
