//! `timeline` figures (like MOSAIC's Figure 5): per replica, or placed per worker, the intervals
//! its model loads, runs steps and idles over simulated time, run segments coloured and
//! labelled by model (the name after its organisation), loads and idle time in fixed colours,
//! one panel per value of `panels` stacked vertically on a shared time axis (round-robin above
//! the ILP), from the first run of each panel's first cell (`details.timeline`, recorded with
//! `[output] timeline = true`).

use super::{Json, Selection, first_details};
use anyhow::Context;
use figures::{Chart, ChartFigure, Segment, TimelinePanel};

/// Row labels and segments of a run's `details.timeline` (`rows[]` with `label` and
/// `segments[]` of `kind`, `model`, `start_s`, `end_s`): a run segment's kind and label are its
/// model's short name, a load's and an idle segment's kind their own, unlabelled.
pub(crate) fn timeline_rows(timeline: &Json) -> anyhow::Result<(Vec<String>, Vec<Segment>)> {
    let rows = timeline["rows"].as_array().context(
        "the run has no details.timeline (a serving run records it with [output] timeline = true)",
    )?;
    let mut labels = Vec::with_capacity(rows.len());
    let mut segments = Vec::new();
    for (row, entry) in rows.iter().enumerate() {
        labels.push(
            entry["label"]
                .as_str()
                .context("a timeline row without a label")?
                .to_string(),
        );
        for segment in entry["segments"]
            .as_array()
            .context("a timeline row without segments")?
        {
            let time = |key: &str| {
                segment[key]
                    .as_f64()
                    .with_context(|| format!("a timeline segment without {key}"))
            };
            let kind = segment["kind"]
                .as_str()
                .context("a timeline segment without a kind")?;
            let model = segment["model"].as_str().unwrap_or_default();
            let short = model.rsplit('/').next().unwrap_or(model).to_string();
            let (kind, label) = match kind {
                "run" => (short.clone(), short),
                other => (other.to_string(), String::new()),
            };
            segments.push(Segment {
                row,
                start: time("start_s")?,
                end: time("end_s")?,
                kind,
                label,
            });
        }
    }
    Ok((labels, segments))
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let charts = selection
        .panels()
        .iter()
        .map(|(panel_value, cells)| {
            let cell = cells.first().context("a panel without cells")?;
            let details = first_details(cell)?;
            let (rows, segments) =
                timeline_rows(&details["timeline"]).with_context(|| format!("cell {}", cell.id))?;
            // The drawn run's own times (the cell means span seeds).
            let run = cell.runs.first().context("a cell without runs")?;
            let scalar = |name: &str| run.scalars.get(name).copied().filter(|v| v.is_finite());
            let end = scalar("makespan_s").unwrap_or(0.0);
            let times = match scalar("expert_makespan_s") {
                Some(expert) if expert < end => {
                    format!("expert stage {expert:.0} s, end {end:.0} s")
                }
                _ => format!("end {end:.0} s"),
            };
            let name = selection.panel_name(panel_value.as_ref());
            let title = if name.is_empty() {
                format!("{times} (seed {})", run.seed)
            } else {
                format!("{name}: {times} (seed {})", run.seed)
            };
            Ok(Chart::Timeline(TimelinePanel {
                title,
                x_label: "time (s)".to_string(),
                y_label: String::new(),
                rows,
                segments,
                range: None,
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ChartFigure::new(String::new(), charts, 1)
        // Colours the palette does not hand out (Okabe-Ito's yellow, a light grey), so that
        // the models take its colours in order.
        .with_color("load", [0xF0, 0xE4, 0x42])
        .with_color("idle", [0xDD, 0xDD, 0xDD]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_row_per_timeline_row_runs_coloured_by_model_loads_and_idle_unlabelled() {
        let timeline = json!({"resolution_s": 0.0, "rows": [
            {"label": "worker 0", "segments": [
                {"kind": "load", "model": "org/QwenR1", "start_s": 0.0, "end_s": 38.0},
                {"kind": "run", "model": "org/QwenR1", "start_s": 38.0, "end_s": 90.0},
            ]},
            {"label": "worker 1", "segments": [
                {"kind": "load", "model": "Gemma", "start_s": 0.0, "end_s": 46.0},
                {"kind": "idle", "model": null, "start_s": 46.0, "end_s": 90.0},
            ]},
        ]});
        let (rows, segments) = timeline_rows(&timeline).unwrap();
        assert_eq!(rows, vec!["worker 0", "worker 1"]);
        assert_eq!(segments.len(), 4);
        assert_eq!(
            (segments[0].kind.as_str(), segments[0].label.as_str()),
            ("load", "")
        );
        assert_eq!(
            (segments[1].kind.as_str(), segments[1].label.as_str()),
            ("QwenR1", "QwenR1")
        );
        assert_eq!((segments[3].row, segments[3].label.as_str()), (1, ""));
        assert_eq!(segments[3].kind, "idle");
        assert_eq!((segments[3].start, segments[3].end), (46.0, 90.0));
    }

    #[test]
    fn a_run_without_a_timeline_or_a_segment_without_times_is_an_error() {
        let err = timeline_rows(&Json::Null).unwrap_err();
        assert!(
            err.to_string().contains("[output] timeline = true"),
            "{err}"
        );
        let err = timeline_rows(&json!({"rows": [{"label": "replica 0", "segments": [
            {"kind": "run", "model": "m", "end_s": 1.0}]}]}))
        .unwrap_err();
        assert!(err.to_string().contains("start_s"), "{err}");
    }
}
