//! `expertweave_memory` figures (like ExpertWeave's Figure 9): the device memory of one device
//! per adapter count (groups) and memory manager (bars), stacked as base weights, adapter
//! experts, allocation overhead (padding waste and partly filled pages) and the KV cache the
//! rest leaves; a manager that runs out of memory gets an empty bar labelled OOM. From the
//! memory plan in the details of the first run of each cell: a serving-family run's
//! `details.adapters.memory` (a plan-only run's included).

use super::{Json, Selection, first_details, label, short_key};
use anyhow::Context;
use figures::{Chart, ChartFigure, StackLayer, StackedBarPanel};

/// The sweep key whose values are the bar groups.
pub(crate) const GROUP_KEY: &str = "adapters.count";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Layer names, bottom to top.
pub(crate) const LAYERS: [&str; 4] = [
    "base weights",
    "adapter experts",
    "allocation overhead",
    "KV cache",
];

/// The stack of one run's memory plan (`details.adapters.memory`) in GiB (see [`LAYERS`]), adding up to the device's
/// weights plus KV cache, and whether it ran out of memory (then the KV part is 0 and the
/// weights show what would not fit). A merged copy holds the adapter's experts inside a whole
/// model, so its copies count as overhead beyond those experts.
pub(crate) fn memory_stack(memory: &Json) -> anyhow::Result<([f64; 4], bool)> {
    let bytes = |key: &str| {
        memory[key]
            .as_f64()
            .with_context(|| format!("details.adapters.memory.{key} missing"))
    };
    let oom = memory["out_of_memory"].as_bool().unwrap_or(false);
    let weights = bytes("weight_bytes")?;
    let allocated = bytes("adapter_allocated_bytes")?;
    let experts = bytes("adapter_expert_bytes")?.min(allocated);
    let kv = if oom { 0.0 } else { bytes("kv_bytes")? };
    Ok((
        [
            (weights - allocated) / GIB,
            experts / GIB,
            (allocated - experts) / GIB,
            kv / GIB,
        ],
        oom,
    ))
}

pub(crate) fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    let spec = selection.spec;
    let group_key = GROUP_KEY;
    let bar_key = spec
        .series
        .first()
        .map(String::as_str)
        .unwrap_or("adapters.memory.kind");
    let panels = selection.panels();
    let mut charts = Vec::new();
    for (panel_value, cells) in &panels {
        let in_panel = Selection {
            spec,
            document: selection.document,
            cells: cells.clone(),
        };
        let groups = in_panel.values(group_key);
        let bars = in_panel.values(bar_key);
        let mut layers: Vec<StackLayer> = LAYERS
            .iter()
            .map(|l| StackLayer {
                label: l.to_string(),
                values: vec![vec![0.0; bars.len()]; groups.len()],
            })
            .collect();
        let mut oom_note: Vec<String> = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            for (b, bar) in bars.iter().enumerate() {
                let Some(cell) = in_panel
                    .matching(&[(group_key, group), (bar_key, bar)])
                    .first()
                    .copied()
                else {
                    continue;
                };
                let details = first_details(cell)?;
                let plan = &details["adapters"]["memory"];
                anyhow::ensure!(
                    !plan.is_null(),
                    "an expertweave_memory figure reads a serving run's details.adapters.memory, \
                     which this run lacks (no [adapters])"
                );
                let (stack, oom) = memory_stack(plan)?;
                if oom {
                    oom_note.push(format!("{} @ {}", abbreviate(bar), label(group)));
                }
                for (layer, value) in layers.iter_mut().zip(stack) {
                    layer.values[g][b] = value;
                }
            }
        }
        let mut title = selection.panel_name(panel_value.as_ref());
        if !oom_note.is_empty() {
            if !title.is_empty() {
                title.push_str(" — ");
            }
            title.push_str(&format!("out of memory (no KV): {}", oom_note.join(", ")));
        }
        charts.push(Chart::StackedBars(StackedBarPanel {
            title,
            x_label: format!("{} (adapters)", short_key(group_key)),
            y_label: "device memory (GiB)".to_string(),
            groups: groups.iter().map(label).collect(),
            bars: bars.iter().map(abbreviate).collect(),
            layers,
        }));
    }
    Ok(ChartFigure::new(String::new(), charts, panels.len().min(2))
        .with_color("KV cache", [0x99, 0xCC, 0xEE]))
}

/// A short bar label for a manager value (`virtual_weight_tensor` -> `VWT`).
fn abbreviate(value: &Json) -> String {
    match label(value).split(' ').next().unwrap_or_default() {
        "virtual_weight_tensor" => "VWT".to_string(),
        "padding" => "pad".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stack_adds_up_to_weights_plus_kv() {
        let memory = json!({
            "adapter_expert_bytes": 7.0 * GIB,
            "adapter_allocated_bytes": 10.0 * GIB,
            "kv_bytes": 14.0 * GIB,
            "weight_bytes": 40.0 * GIB,
            "out_of_memory": false,
        });
        let (stack, oom) = memory_stack(&memory).unwrap();
        assert!(!oom);
        assert_eq!(stack, [30.0, 7.0, 3.0, 14.0]);
        assert_eq!(stack[..3].iter().sum::<f64>(), 40.0);
    }

    #[test]
    fn out_of_memory_keeps_the_weights_and_drops_the_kv() {
        // Two merged copies: the second copy is all allocation, 3 GiB of it the experts.
        let memory = json!({
            "adapter_expert_bytes": 3.0 * GIB,
            "adapter_allocated_bytes": 29.0 * GIB,
            "kv_bytes": 5.0 * GIB,
            "weight_bytes": 58.0 * GIB,
            "out_of_memory": true,
        });
        assert_eq!(
            memory_stack(&memory).unwrap(),
            ([29.0, 3.0, 26.0, 0.0], true)
        );
    }
}
