//! `frontier` figures: every cell is an operating point (seed means of metric 0 on x and metric
//! 1 on y); the cells of one series (same values of the `series` keys) are its point set, and the
//! set's Pareto frontier (the points no other point of the set beats on both metrics, each in its
//! better direction) is joined by a line, like Chimera's latency-vs-score Figures 5-7.

use super::{Json, Selection, label};
use expertsim_scenario::metrics::Better;
use figures::{Chart, ChartFigure, ScatterPanel, ScatterSeries};

/// One series: its keys' values and its (x, y) points.
type KeyedPoints = (Vec<Json>, Vec<(f64, f64)>);

/// Whether `a` dominates `b`: at least as good on both axes and better on one.
fn dominates(a: (f64, f64), b: (f64, f64), better: (Better, Better)) -> bool {
    let at_least = |a: f64, b: f64, dir: Better| match dir {
        Better::Lower => a <= b,
        Better::Higher => a >= b,
    };
    at_least(a.0, b.0, better.0) && at_least(a.1, b.1, better.1) && a != b
}

/// The non-dominated points of `points`, sorted by x (then y).
pub(crate) fn pareto_frontier(points: &[(f64, f64)], better: (Better, Better)) -> Vec<(f64, f64)> {
    let mut frontier: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&p| !points.iter().any(|&q| dominates(q, p, better)))
        .collect();
    frontier.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    frontier.dedup();
    frontier
}

fn direction(selection: &Selection<'_>, metric: &str) -> Better {
    selection
        .document
        .scenario
        .family
        .metrics()
        .iter()
        .find(|m| m.name == metric)
        .map(|m| m.better)
        .unwrap_or(Better::Lower)
}

/// The label of a series from its keys' values (`stjf + chimera`); when two keys take a common
/// value (`noisy` for both predictor and router) each value is prefixed with its key's name.
fn series_label(keys: &[String], values: &[Json], prefixed: bool) -> String {
    keys.iter()
        .zip(values)
        .map(|(k, v)| {
            if prefixed {
                format!("{} {}", super::short_key(k), label(v))
            } else {
                label(v)
            }
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Whether two series keys share a value across `series`, so values alone would be ambiguous.
fn values_overlap(series: &[Vec<Json>]) -> bool {
    let width = series.first().map_or(0, Vec::len);
    (0..width).any(|a| {
        (a + 1..width).any(|b| {
            series
                .iter()
                .any(|x| series.iter().any(|y| label(&x[a]) == label(&y[b])))
        })
    })
}

pub(crate) fn build(selection: &Selection<'_>) -> ChartFigure {
    let spec = selection.spec;
    let (mx, my) = (&spec.metrics[0], &spec.metrics[1]);
    let better = (direction(selection, mx), direction(selection, my));
    let panels = selection.panels();
    let charts = panels
        .iter()
        .map(|(panel_value, cells)| {
            // Series in order of first appearance.
            let mut series: Vec<KeyedPoints> = Vec::new();
            for cell in cells {
                let key: Vec<Json> = spec
                    .series
                    .iter()
                    .map(|k| super::coord(cell, k).unwrap_or(Json::Null))
                    .collect();
                let (Some(x), Some(y)) = (cell.mean(mx), cell.mean(my)) else {
                    continue;
                };
                match series.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, points)) => points.push((x, y)),
                    None => series.push((key, vec![(x, y)])),
                }
            }
            let keys: Vec<Vec<Json>> = series.iter().map(|(k, _)| k.clone()).collect();
            let prefixed = values_overlap(&keys);
            Chart::Scatter(ScatterPanel {
                title: selection.panel_name(panel_value.as_ref()),
                x_label: selection.metric_label(mx),
                y_label: selection.metric_label(my),
                series: series
                    .into_iter()
                    .map(|(key, points)| ScatterSeries {
                        label: if spec.series.is_empty() {
                            "operating points".to_string()
                        } else {
                            series_label(&spec.series, &key, prefixed)
                        },
                        frontier: pareto_frontier(&points, better),
                        points,
                    })
                    .collect(),
            })
        })
        .collect();
    ChartFigure::new(String::new(), charts, panels.len().min(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontier_holds_exactly_the_non_dominated_points() {
        // Lower x (latency) and higher y (score) are better.
        let points = [
            (1.0, 10.0), // frontier: fastest
            (2.0, 20.0), // frontier
            (2.5, 15.0), // dominated by (2, 20)
            (3.0, 30.0), // frontier: best score
            (4.0, 30.0), // dominated by (3, 30): same score, slower
            (1.5, 5.0),  // dominated by (1, 10)
        ];
        let frontier = pareto_frontier(&points, (Better::Lower, Better::Higher));
        assert_eq!(frontier, vec![(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]);
        // Brute-force check of the definition on every point.
        for p in points {
            let dominated = points.iter().any(|&q| q.0 <= p.0 && q.1 >= p.1 && q != p);
            assert_eq!(frontier.contains(&p), !dominated, "{p:?}");
        }
    }

    #[test]
    fn labels_name_the_keys_only_when_values_are_ambiguous() {
        let keys = vec![
            "predictor.kind".to_string(),
            "semantic_router.kind".to_string(),
        ];
        let both = |a: &str, b: &str| vec![Json::from(a), Json::from(b)];
        let ambiguous = [both("noisy", "oracle"), both("oracle", "noisy")];
        assert!(values_overlap(&ambiguous));
        assert_eq!(
            series_label(&keys, &ambiguous[0], true),
            "predictor noisy + semantic_router oracle"
        );
        let clear = [both("fcfs", "least_loaded"), both("stjf", "chimera")];
        assert!(!values_overlap(&clear));
        assert_eq!(series_label(&keys, &clear[1], false), "stjf + chimera");
    }

    #[test]
    fn direction_flips_the_frontier() {
        let points = [(1.0, 1.0), (2.0, 2.0)];
        assert_eq!(
            pareto_frontier(&points, (Better::Lower, Better::Lower)),
            vec![(1.0, 1.0)]
        );
        assert_eq!(
            pareto_frontier(&points, (Better::Higher, Better::Higher)),
            vec![(2.0, 2.0)]
        );
        assert_eq!(
            pareto_frontier(&points, (Better::Lower, Better::Higher)),
            vec![(1.0, 1.0), (2.0, 2.0)]
        );
    }
}
