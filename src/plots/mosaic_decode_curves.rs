//! `mosaic_decode_curves` figures: decode throughput vs prompts in flight for every model of the
//! pool, from the decode-cost curves the MOSAIC run uses (`details.models[].decode_curve`); one
//! panel per value of `panels`.

use super::{Selection, first_details, label};
use anyhow::Context;
use figures::{Chart, ChartFigure, Panel, Series};

/// One line per model: `(batch, tokens_per_s)` points labelled `name (family)`.
pub(crate) fn model_curves(models: &serde_json::Value) -> anyhow::Result<Vec<Series>> {
    models
        .as_array()
        .context("details.models is not a list")?
        .iter()
        .map(|model| {
            let points = model["decode_curve"]
                .as_array()
                .context("a model without decode_curve")?
                .iter()
                .map(|p| {
                    Ok((
                        p["batch"]
                            .as_f64()
                            .context("decode_curve point without batch")?,
                        p["tokens_per_s"]
                            .as_f64()
                            .context("decode_curve point without tokens_per_s")?,
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(Series {
                label: format!("{} ({})", label(&model["name"]), label(&model["family"])),
                points,
                y_err: None,
            })
        })
        .collect()
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let panels = selection.panels();
    let charts = panels
        .iter()
        .map(|(panel_value, cells)| {
            let cell = cells.first().context("a panel without cells")?;
            let details = first_details(cell)?;
            Ok(Chart::Line(Panel {
                title: selection.panel_name(panel_value.as_ref()),
                x_label: "prompts in flight".to_string(),
                y_label: "decode throughput (tokens/s)".to_string(),
                series: model_curves(&details["models"])?,
                log_y: selection.spec.log_y,
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ChartFigure::new(String::new(), charts, panels.len().min(3)))
}
