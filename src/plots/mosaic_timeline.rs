//! `mosaic_timeline` figures (like MOSAIC's Figure 5): per worker, the expert stage's load,
//! generate and idle segments labelled by model, one panel per value of `panels` stacked
//! vertically on a shared time axis (round-robin above the ILP), from `details.timelines`.

use super::{Selection, first_details, label};
use anyhow::Context;
use figures::{Chart, ChartFigure, Segment, TimelinePanel};

/// Rows (`worker w`) and segments of a run's `timelines` detail (`[worker][segment]` with
/// `kind`, `model`, `start_s`, `end_s`).
pub(crate) fn worker_rows(
    timelines: &serde_json::Value,
) -> anyhow::Result<(Vec<String>, Vec<Segment>)> {
    let workers = timelines
        .as_array()
        .context("details.timelines is not a list")?;
    let mut segments = Vec::new();
    for (row, worker) in workers.iter().enumerate() {
        for segment in worker
            .as_array()
            .context("a worker timeline is not a list")?
        {
            let kind = label(&segment["kind"]);
            segments.push(Segment {
                row,
                start: segment["start_s"]
                    .as_f64()
                    .context("segment without start_s")?,
                end: segment["end_s"].as_f64().context("segment without end_s")?,
                label: if kind == "idle" {
                    String::new()
                } else {
                    label(&segment["model"])
                },
                kind,
            });
        }
    }
    let rows = (0..workers.len()).map(|w| format!("worker {w}")).collect();
    Ok((rows, segments))
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let charts = selection
        .panels()
        .iter()
        .map(|(panel_value, cells)| {
            let cell = cells.first().context("a panel without cells")?;
            let details = first_details(cell)?;
            let (rows, segments) = worker_rows(&details["timelines"])?;
            // The drawn run's own makespan (the cell mean spans seeds).
            let run = cell.runs.first().context("a cell without runs")?;
            let makespan = run.scalars.get("expert_makespan_s").copied().unwrap_or(0.0);
            let name = panel_value
                .as_ref()
                .map(label)
                .unwrap_or_else(|| label(&details["placement"]));
            Ok(Chart::Timeline(TimelinePanel {
                title: format!("{name}: expert stage {makespan:.0} s (seed {})", run.seed),
                x_label: "time (s)".to_string(),
                y_label: String::new(),
                rows,
                segments,
                range: None,
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ChartFigure::new(String::new(), charts, 1)
        .with_color("load", [0xE6, 0x9F, 0x00])
        .with_color("generate", [0x00, 0x72, 0xB2])
        .with_color("idle", [0xD0, 0xD0, 0xD0]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_row_per_worker_and_idle_segments_unlabelled() {
        let timelines = json!([
            [
                {"kind": "load", "model": "QwenR1", "start_s": 0.0, "end_s": 38.0},
                {"kind": "generate", "model": "QwenR1", "start_s": 38.0, "end_s": 90.0},
            ],
            [
                {"kind": "load", "model": "Gemma", "start_s": 0.0, "end_s": 46.0},
                {"kind": "idle", "model": null, "start_s": 46.0, "end_s": 90.0},
            ],
        ]);
        let (rows, segments) = worker_rows(&timelines).unwrap();
        assert_eq!(rows, vec!["worker 0", "worker 1"]);
        assert_eq!(segments.len(), 4);
        assert_eq!(segments[1].label, "QwenR1");
        assert_eq!((segments[3].row, segments[3].label.as_str()), (1, ""));
        assert_eq!(segments[3].kind, "idle");
    }

    #[test]
    fn a_segment_without_times_is_an_error() {
        let err = worker_rows(&json!([[{"kind": "load"}]])).unwrap_err();
        assert!(err.to_string().contains("start_s"), "{err}");
    }
}
