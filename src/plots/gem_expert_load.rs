//! `gem_expert_load` figures (like GEM's Figure 17): for the run's detail layer, the tokens each
//! expert receives at each unseen trace step, experts grouped by the GPU they are mapped to
//! (slowest GPUs' speed factors in the row labels), one column of panels per mapping; below, the
//! tokens each GPU receives per step. Data from the run's expert detail
//! (`plots::expert_details`: `detail_layer`).

use super::{Selection, expert_details, label};
use anyhow::{Context, bail};
use figures::{Chart, ChartFigure, HeatmapPanel};

type Json = serde_json::Value;

/// The layer's load laid out per mapped slot: one row per (GPU, expert) slot in GPU order, one
/// column per step; an expert held in `r` slots gives each `1/r` of its tokens (as the serving
/// model splits it), so the rows of a GPU sum to that GPU's tokens.
pub(crate) fn slot_rows(
    slots: &[Vec<usize>],
    expert_tokens: &[Vec<f64>],
    speeds: &[f64],
) -> anyhow::Result<(Vec<String>, Vec<Vec<f64>>)> {
    let n_experts = expert_tokens.first().map_or(0, Vec::len);
    let mut replicas = vec![0usize; n_experts];
    for &e in slots.iter().flatten() {
        if e >= n_experts {
            bail!("slot expert {e} is beyond the trace's {n_experts} experts");
        }
        replicas[e] += 1;
    }
    let mut labels = Vec::new();
    let mut rows = Vec::new();
    for (gpu, experts) in slots.iter().enumerate() {
        for &e in experts {
            let speed = speeds.get(gpu).copied().unwrap_or(1.0);
            labels.push(format!("GPU{gpu} ({speed:.2}x) e{e}"));
            rows.push(
                expert_tokens
                    .iter()
                    .map(|step| step[e] / replicas[e] as f64)
                    .collect(),
            );
        }
    }
    Ok((labels, rows))
}

fn numbers(value: &Json, what: &str) -> anyhow::Result<Vec<f64>> {
    value
        .as_array()
        .with_context(|| format!("{what} is not a list"))?
        .iter()
        .map(|v| {
            v.as_f64()
                .with_context(|| format!("{what} holds a non-number"))
        })
        .collect()
}

fn matrix(value: &Json, what: &str) -> anyhow::Result<Vec<Vec<f64>>> {
    value
        .as_array()
        .with_context(|| format!("{what} is not a list"))?
        .iter()
        .map(|row| numbers(row, what))
        .collect()
}

fn transpose(rows: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let width = rows.first().map_or(0, Vec::len);
    (0..width)
        .map(|c| rows.iter().map(|r| r[c]).collect())
        .collect()
}

fn max_of(rows: &[Vec<f64>]) -> f64 {
    rows.iter().flatten().copied().fold(1.0, f64::max)
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let mut expert_panels = Vec::new();
    let mut gpu_panels = Vec::new();
    for (panel_value, cells) in selection.panels() {
        let cell = cells.first().context("a panel without cells")?;
        let deployment = expert_details(cell)?;
        let detail = &deployment["detail_layer"];
        let slots: Vec<Vec<usize>> = serde_json::from_value(detail["slots"].clone())
            .context("the expert detail's detail_layer.slots")?;
        let expert_tokens = matrix(&detail["expert_tokens"], "detail_layer.expert_tokens")?;
        let gpu_tokens = matrix(&detail["gpu_tokens"], "detail_layer.gpu_tokens")?;
        let speeds = numbers(
            &deployment["speed_factors"],
            "the expert detail's speed_factors",
        )?;
        let (labels, rows) = slot_rows(&slots, &expert_tokens, &speeds)?;
        let name = panel_value
            .as_ref()
            .map(label)
            .unwrap_or_else(|| label(&deployment["mapper"]["kind"]));
        let steps: Vec<String> = (0..expert_tokens.len()).map(|s| s.to_string()).collect();
        let layer = detail["layer"].as_u64().unwrap_or(0);
        expert_panels.push(HeatmapPanel {
            title: format!("{name}: experts of layer {layer}"),
            x_label: "unseen trace step".to_string(),
            y_label: String::new(),
            row_labels: labels,
            column_labels: steps.clone(),
            values: rows,
            value_label: "tokens per expert".to_string(),
            range: None,
            annotate: false,
        });
        gpu_panels.push(HeatmapPanel {
            title: format!("{name}: tokens per GPU"),
            x_label: "unseen trace step".to_string(),
            y_label: String::new(),
            row_labels: speeds
                .iter()
                .enumerate()
                .map(|(g, s)| format!("GPU{g} ({s:.2}x)"))
                .collect(),
            column_labels: steps,
            values: transpose(&gpu_tokens),
            value_label: "tokens per GPU".to_string(),
            range: None,
            annotate: false,
        });
    }
    // One colour scale per row of panels, so mappings compare directly.
    let expert_max = max_of(
        &expert_panels
            .iter()
            .flat_map(|p| p.values.clone())
            .collect::<Vec<_>>(),
    );
    let gpu_max = max_of(
        &gpu_panels
            .iter()
            .flat_map(|p| p.values.clone())
            .collect::<Vec<_>>(),
    );
    let columns = expert_panels.len();
    let charts: Vec<Chart> = expert_panels
        .into_iter()
        .map(|p| HeatmapPanel {
            range: Some((0.0, expert_max)),
            ..p
        })
        .chain(gpu_panels.into_iter().map(|p| HeatmapPanel {
            range: Some((0.0, gpu_max)),
            ..p
        }))
        .map(Chart::Heatmap)
        .collect();
    Ok(ChartFigure::new(String::new(), charts, columns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_rows_of_a_gpu_sum_to_its_tokens() {
        // 4 experts on 2 GPUs, expert 1 replicated on both.
        let slots = vec![vec![0, 1], vec![1, 2, 3]];
        let tokens = vec![vec![10.0, 20.0, 30.0, 40.0], vec![1.0, 2.0, 3.0, 4.0]];
        let (labels, rows) = slot_rows(&slots, &tokens, &[0.88, 1.0]).unwrap();
        assert_eq!(labels.len(), 5);
        assert_eq!(labels[0], "GPU0 (0.88x) e0");
        assert_eq!(labels[2], "GPU1 (1.00x) e1");
        let gpu0: f64 = rows[..2].iter().map(|r| r[0]).sum();
        let gpu1: f64 = rows[2..].iter().map(|r| r[0]).sum();
        assert_eq!((gpu0, gpu1), (20.0, 80.0));
        assert_eq!(gpu0 + gpu1, tokens[0].iter().sum::<f64>());
    }

    #[test]
    fn a_slot_beyond_the_trace_is_an_error() {
        let err = slot_rows(&[vec![5]], &[vec![1.0, 2.0]], &[1.0]).unwrap_err();
        assert!(err.to_string().contains("expert 5"), "{err}");
    }
}
