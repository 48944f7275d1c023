//! `improvement` figures: the `metric` grid with y = the change against the `[report]` baseline
//! in percent of the baseline (positive = better, e.g. GEM's latency reduction vs linear), the
//! baseline value itself left out.

use super::{Selection, metric};
use anyhow::Context;
use expertsim_scenario::results::CellResult;
use figures::ChartFigure;

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let baseline = selection
        .document
        .baseline
        .as_ref()
        .context("an improvement figure needs the result's [report] baseline")?;
    let cells: Vec<&CellResult> = selection
        .cells
        .iter()
        .copied()
        .filter(|c| c.coord(&baseline.compare) != Some(&baseline.baseline))
        .collect();
    let without_baseline = Selection {
        spec: selection.spec,
        document: selection.document,
        cells,
    };
    let change = |cell: &CellResult, metric: &str| {
        cell.improvement
            .as_ref()
            .and_then(|i| i.pct.get(metric))
            .map(|pct| (*pct, 0.0))
    };
    let against = super::label(&baseline.baseline);
    let mut figure = metric::grid(
        &without_baseline,
        &change,
        &|_| format!("improvement over {against} (%)"),
        &|metric| {
            format!(
                "{}: change vs {against} (%)",
                super::labels::without_unit(&selection.metric_label(metric))
            )
        },
    );
    figure.caption = Some(format!(
        "change of each cell's seed mean against {against}'s, in percent; positive = better"
    ));
    Ok(figure)
}
