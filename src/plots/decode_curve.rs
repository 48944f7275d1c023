//! `decode_curve` figures (MOSAIC's Figure 3b): per replica group, its decode step latency and
//! the tokens per second it emits against the batch, as the group's own step cost prices them
//! (`details.decode_curves`, recorded with `[output] decode_curves = true`); per value of
//! `panels` a row of two panels, latency and throughput, one line per group labelled by its
//! model (the name after its organisation).

use super::{Json, Selection, first_details, label};
use anyhow::Context;
use figures::{Chart, ChartFigure, Panel, Series};

/// Per group of a run's `details.decode_curves`, its (batch, step ms) and (batch, tokens/s)
/// lines, labelled by model (with the group's index where two groups serve one model).
pub(crate) fn curves(decode_curves: &Json) -> anyhow::Result<(Vec<Series>, Vec<Series>)> {
    let groups = decode_curves.as_array().context(
        "the run has no details.decode_curves (a serving run records them with [output] \
         decode_curves = true)",
    )?;
    let (mut latency, mut throughput) = (Vec::new(), Vec::new());
    for (g, group) in groups.iter().enumerate() {
        let model = group["model"]
            .as_str()
            .context("a decode curve without a model")?;
        let short = model.rsplit('/').next().unwrap_or(model);
        let twice = groups
            .iter()
            .filter(|o| o["model"].as_str() == Some(model))
            .count()
            > 1;
        let name = if twice {
            format!("{short} (group {g})")
        } else {
            short.to_string()
        };
        let point = |p: &Json, key: &str| {
            Ok::<_, anyhow::Error>((
                p["batch"]
                    .as_f64()
                    .context("a decode curve point without batch")?,
                p[key]
                    .as_f64()
                    .with_context(|| format!("a decode curve point without {key}"))?,
            ))
        };
        let points = group["points"]
            .as_array()
            .context("a decode curve without points")?;
        for (key, out) in [("step_ms", &mut latency), ("tokens_per_s", &mut throughput)] {
            out.push(Series {
                label: name.clone(),
                points: points
                    .iter()
                    .map(|p| point(p, key))
                    .collect::<anyhow::Result<_>>()?,
                y_err: None,
            });
        }
    }
    Ok((latency, throughput))
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let panels = selection.panels();
    let mut charts = Vec::new();
    for (panel_value, cells) in &panels {
        let cell = cells.first().context("a panel without cells")?;
        let details = first_details(cell)?;
        let (latency, throughput) =
            curves(&details["decode_curves"]).with_context(|| format!("cell {}", cell.id))?;
        let first = &details["decode_curves"][0];
        let x_label = format!(
            "sequences in the step, {} cached tokens each ({})",
            first["context_tokens"],
            label(&first["gpu"])
        );
        let name = match panel_value {
            Some(v) => format!("{}: ", label(v)),
            None => String::new(),
        };
        for (title, y_label, series) in [
            (
                format!("{name}decode step"),
                "decode step latency (ms)",
                latency,
            ),
            (
                format!("{name}decode throughput"),
                "decode throughput (tokens/s)",
                throughput,
            ),
        ] {
            charts.push(Chart::Line(Panel {
                title,
                x_label: x_label.clone(),
                y_label: y_label.to_string(),
                series,
                log_y: selection.spec.log_y,
            }));
        }
    }
    Ok(ChartFigure::new(String::new(), charts, 2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_line_per_group_in_each_panel_two_groups_of_one_model_told_apart() {
        let detail = json!([
            {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "A100-80GB", "context_tokens": 1024,
             "points": [{"batch": 1, "step_ms": 10.0, "tokens_per_s": 100.0},
                        {"batch": 2, "step_ms": 10.5, "tokens_per_s": 190.5}]},
            {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "A100-80GB",
             "context_tokens": 1024,
             "points": [{"batch": 1, "step_ms": 11.0, "tokens_per_s": 90.9}]},
            {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "A100-80GB", "context_tokens": 1024,
             "points": [{"batch": 1, "step_ms": 10.0, "tokens_per_s": 100.0}]},
        ]);
        let (latency, throughput) = curves(&detail).unwrap();
        let labels: Vec<&str> = latency.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "Qwen2.5-7B-Instruct (group 0)",
                "Llama-3.1-8B-Instruct",
                "Qwen2.5-7B-Instruct (group 2)"
            ]
        );
        assert_eq!(latency[0].points, vec![(1.0, 10.0), (2.0, 10.5)]);
        assert_eq!(throughput[0].points, vec![(1.0, 100.0), (2.0, 190.5)]);
        let e = curves(&json!(null)).unwrap_err().to_string();
        assert!(e.contains("decode_curves = true"), "{e}");
        let e = curves(&json!([{"model": "m", "points": [{"batch": 1}]}]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("step_ms"), "{e}");
    }
}
