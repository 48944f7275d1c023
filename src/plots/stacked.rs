//! `stacked` figures: in each x group one bar per value of `series`, each a stack of the
//! figure's metrics (seed means), e.g. MOSAIC's end-to-end time as expert stage + aggregator per
//! dataset and placement (Figure 6). One panel per value of `panels`.

use super::{Json, Selection, label, short_key};
use figures::{Chart, ChartFigure, StackLayer, StackedBarPanel};

pub(crate) fn build(selection: &Selection<'_>) -> ChartFigure {
    let spec = selection.spec;
    let x_key = spec
        .x
        .as_deref()
        .expect("validated: stacked figures have x");
    let series_key = spec.series.first().map(String::as_str);
    let panels = selection.panels();
    let charts: Vec<Chart> = panels
        .iter()
        .map(|(panel_value, cells)| {
            let in_panel = Selection {
                spec,
                document: selection.document,
                cells: cells.clone(),
            };
            let groups = in_panel.values(x_key);
            let bars: Vec<Option<Json>> = match series_key {
                Some(key) => in_panel.values(key).into_iter().map(Some).collect(),
                None => vec![None],
            };
            let layers = spec
                .metrics
                .iter()
                .map(|metric| StackLayer {
                    label: selection.metric_label(metric),
                    values: groups
                        .iter()
                        .map(|group| {
                            bars.iter()
                                .map(|bar| {
                                    let mut wanted = vec![(x_key, group)];
                                    if let (Some(key), Some(v)) = (series_key, bar) {
                                        wanted.push((key, v));
                                    }
                                    in_panel
                                        .matching(&wanted)
                                        .first()
                                        .and_then(|c| c.mean(metric))
                                        .unwrap_or(0.0)
                                        .max(0.0)
                                })
                                .collect()
                        })
                        .collect(),
                })
                .collect();
            Chart::StackedBars(StackedBarPanel {
                title: selection.panel_name(panel_value.as_ref()),
                x_label: short_key(x_key).to_string(),
                y_label: stack_label(selection),
                groups: groups.iter().map(label).collect(),
                bars: bars
                    .iter()
                    .map(|b| b.as_ref().map(label).unwrap_or_default())
                    .collect(),
                layers,
            })
        })
        .collect();
    ChartFigure::new(String::new(), charts, panels.len())
}

/// The y description of a stack: `total (unit)` when every layer's description ends in the same
/// `(unit)`, else the metric names joined by `+`.
fn stack_label(selection: &Selection<'_>) -> String {
    let units: Vec<Option<String>> = selection
        .spec
        .metrics
        .iter()
        .map(|m| {
            let description = selection.metric_label(m);
            let open = description.rfind('(')?;
            description
                .ends_with(')')
                .then(|| description[open..].to_string())
        })
        .collect();
    match units.first() {
        Some(Some(unit)) if units.iter().all(|u| u.as_ref() == Some(unit)) => {
            format!("total {unit}")
        }
        _ => selection.spec.metrics.join(" + "),
    }
}
