//! A family's metrics declared once as a table: each metric's name, unit, better direction and
//! how to compute it from the family's summary of a run (`MetricDef<S>`), turned into the
//! `RunOutput` scalars (in table order) and the `MetricInfo` list the results and figures read.
//! A failed run reports no number (every scalar NaN, written as `null`) but its reason.

use crate::metrics::{Better, MetricInfo, RunOutput};
use serde_json::json;

/// One metric of a family's table, computed from a summary `S` of a run (or of one replica).
pub struct MetricDef<S> {
    pub name: &'static str,
    /// What it is, with its unit in parentheses (the figures' axis label).
    pub label: &'static str,
    /// The unit alone (`ms`, `1/s`, `fraction`, `count`).
    pub unit: &'static str,
    pub better: Better,
    pub value: fn(&S) -> f64,
}

impl<S> MetricDef<S> {
    pub const fn info(&self) -> MetricInfo {
        MetricInfo {
            name: self.name,
            description: self.label,
            better: self.better,
        }
    }
}

/// The `MetricInfo` of every metric of `table`, in order (a constant, for `Family::METRICS`).
pub const fn infos<S, const N: usize>(table: &[MetricDef<S>; N]) -> [MetricInfo; N] {
    let mut infos = [MetricInfo {
        name: "",
        description: "",
        better: Better::Lower,
    }; N];
    let mut i = 0;
    while i < N {
        infos[i] = table[i].info();
        i += 1;
    }
    infos
}

/// Every metric of `table` computed on `summary`, in table order.
pub fn scalars<S>(table: &[MetricDef<S>], summary: &S) -> Vec<(String, f64)> {
    table
        .iter()
        .map(|m| (m.name.to_string(), (m.value)(summary)))
        .collect()
}

/// The same metrics as a JSON object (name -> value; NaN becomes `null`), for details.
pub fn object<S>(table: &[MetricDef<S>], summary: &S) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = table
        .iter()
        .map(|m| (m.name.to_string(), json!((m.value)(summary))))
        .collect();
    serde_json::Value::Object(map)
}

/// Each metric's unit (name -> unit), for the results' details.
pub fn units<S>(table: &[MetricDef<S>]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = table
        .iter()
        .map(|m| (m.name.to_string(), json!(m.unit)))
        .collect();
    serde_json::Value::Object(map)
}

/// The output of a run that failed for `reason`: no number for any metric of `table` (NaN,
/// `null` in the results), and the reason in the details (`failed`).
pub fn failed<S>(table: &[MetricDef<S>], reason: &str) -> RunOutput {
    RunOutput {
        scalars: table
            .iter()
            .map(|m| (m.name.to_string(), f64::NAN))
            .collect(),
        details: json!({ "failed": reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sums {
        total: f64,
        count: f64,
    }

    const TABLE: &[MetricDef<Sums>; 2] = &[
        MetricDef {
            name: "mean_ms",
            label: "mean (ms)",
            unit: "ms",
            better: Better::Lower,
            value: |s| s.total / s.count,
        },
        MetricDef {
            name: "count",
            label: "count",
            unit: "count",
            better: Better::Higher,
            value: |s| s.count,
        },
    ];

    #[test]
    fn a_table_computes_its_metrics_in_order_and_a_failure_none() {
        let s = Sums {
            total: 30.0,
            count: 4.0,
        };
        assert_eq!(
            scalars(TABLE, &s),
            vec![("mean_ms".to_string(), 7.5), ("count".to_string(), 4.0)]
        );
        assert_eq!(object(TABLE, &s), json!({"mean_ms": 7.5, "count": 4.0}));
        assert_eq!(units(TABLE), json!({"mean_ms": "ms", "count": "count"}));
        const INFOS: [MetricInfo; 2] = infos(TABLE);
        let infos = INFOS;
        assert_eq!(infos[0].name, "mean_ms");
        assert_eq!(infos[1].better, Better::Higher);
        let out = failed(TABLE, "out of memory: the weights need 93 GB");
        assert!(out.scalars.iter().all(|(_, v)| v.is_nan()));
        assert_eq!(out.scalars.len(), 2);
        assert_eq!(
            out.details["failed"],
            "out of memory: the weights need 93 GB"
        );
    }
}
