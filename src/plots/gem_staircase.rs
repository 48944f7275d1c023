//! `gem_staircase` figures: per GPU, the latency of one MoE layer vs the tokens routed to it
//! (the tile-size staircase of the cost profile in use, scaled by the GPU's speed factor), as
//! the run's expert detail (`plots::expert_details`: `staircase`, recorded with `[output]
//! staircase = true`) carries it; per value of `panels` a row of two panels: the whole range
//! and the first 1024 tokens, where the tile steps show.

use super::{Selection, expert_details, label};
use anyhow::Context;
use figures::{Chart, ChartFigure, Panel, Series};

/// Tokens shown in the zoomed panel, where the tile steps of the staircase are visible.
const ZOOM_TOKENS: f64 = 1024.0;

/// One line per GPU from a run's `staircase` detail: `(label, points)`.
pub(crate) fn gpu_curves(staircase: &serde_json::Value) -> anyhow::Result<Vec<Series>> {
    staircase
        .as_array()
        .context("the expert detail's staircase is not a list")?
        .iter()
        .map(|gpu| {
            let index = gpu["gpu"].as_u64().context("staircase entry without gpu")?;
            let speed = gpu["speed"]
                .as_f64()
                .context("staircase entry without speed")?;
            let points: Vec<(f64, f64)> = serde_json::from_value(gpu["samples_tokens_us"].clone())
                .context("staircase samples_tokens_us")?;
            Ok(Series {
                label: format!("GPU{index} (speed {speed:.2})"),
                points,
                y_err: None,
            })
        })
        .collect()
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let panels = selection.panels();
    let mut charts = Vec::new();
    for (panel_value, cells) in &panels {
        let cell = cells.first().context("a panel without cells")?;
        let deployment = expert_details(cell)?;
        let source = label(&deployment["cost_source"]);
        let name = match panel_value {
            Some(v) => label(v),
            None => format!(
                "{} on {}",
                label(&deployment["model"]),
                label(&deployment["gpu"])
            ),
        };
        let staircase = deployment.get("staircase").with_context(|| {
            format!(
                "cell {}: the expert detail has no staircase (a `gem_staircase` figure needs \
                 `[output] staircase = true` in its scenario)",
                cell.id
            )
        })?;
        let curves = gpu_curves(staircase)?;
        let zoomed = curves
            .iter()
            .map(|s| Series {
                points: s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| p.0 <= ZOOM_TOKENS)
                    .collect(),
                ..s.clone()
            })
            .collect();
        for (title, series) in [
            (format!("{name} ({source})"), curves),
            (format!("{name}: up to {ZOOM_TOKENS} tokens"), zoomed),
        ] {
            charts.push(Chart::Line(Panel {
                title,
                x_label: "tokens routed to the GPU in one MoE layer".to_string(),
                y_label: "MoE layer latency (µs)".to_string(),
                series,
                log_y: selection.spec.log_y,
            }));
        }
    }
    Ok(ChartFigure::new(String::new(), charts, 2))
}
