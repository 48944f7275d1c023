//! Scatter charts with a frontier line per series: operating points as markers only, and the
//! series' frontier (e.g. its Pareto-optimal points, in the order given) joined by a line in the
//! same style. Laid out and drawn as a line chart whose point sets are not joined.

use crate::{Panel, Series};

/// One set of operating points and its frontier.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScatterSeries {
    /// Legend text; series with the same label share one style and one legend entry.
    pub label: String,
    /// Every operating point, drawn as a marker (no line).
    pub points: Vec<(f64, f64)>,
    /// Points joined by a line in this order (usually a subset of `points`, sorted by x); empty
    /// for no line.
    pub frontier: Vec<(f64, f64)>,
}

/// A scatter chart: axes, title and point sets with their frontiers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScatterPanel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the x axis (may be empty).
    pub x_label: String,
    /// Description of the y axis (may be empty).
    pub y_label: String,
    pub series: Vec<ScatterSeries>,
}

impl ScatterPanel {
    /// The line-chart panel this chart is drawn as, and which of its series are joined: each
    /// scatter series gives its points (not joined) then its frontier (joined, when present).
    pub(crate) fn as_line_panel(&self) -> (Panel, Vec<bool>) {
        let mut series = Vec::new();
        let mut joined = Vec::new();
        for s in &self.series {
            series.push(Series {
                label: s.label.clone(),
                points: s.points.clone(),
                y_err: None,
            });
            joined.push(false);
            if !s.frontier.is_empty() {
                series.push(Series {
                    label: s.label.clone(),
                    points: s.frontier.clone(),
                    y_err: None,
                });
                joined.push(true);
            }
        }
        let panel = Panel {
            title: self.title.clone(),
            x_label: self.x_label.clone(),
            y_label: self.y_label.clone(),
            series,
            log_y: false,
        };
        (panel, joined)
    }
}
