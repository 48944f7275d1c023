//! Validation of a [`Figure`] and the pixel layout computed from it.
//!
//! Everything that can fail on bad input fails here, before any drawing: the
//! drawing code then works from a [`Plan`] that is known to be consistent.

use std::collections::BTreeMap;

use crate::axis::{Axis, format_tick};
use crate::font::text_size;
use crate::style::SeriesStyle;
use crate::{Figure, FigureError, PANEL_HEIGHT, PANEL_WIDTH, Panel};

/// Height of the figure title band (only when the title is not empty).
pub(crate) const TITLE_BAND: u32 = 52;
pub(crate) const TITLE_FONT: f64 = 32.0;
pub(crate) const PANEL_TITLE_FONT: f64 = 26.0;
pub(crate) const AXIS_DESC_FONT: f64 = 22.0;
pub(crate) const TICK_FONT: f64 = 20.0;
pub(crate) const LEGEND_FONT: f64 = 21.0;

/// Outer margins of a panel's chart inside its cell.
pub(crate) const PANEL_MARGIN: u32 = 10;
/// Extra right margin so the last x tick label is not clipped.
pub(crate) const PANEL_MARGIN_RIGHT: u32 = 26;
/// Height of the area below the plot: tick marks, tick labels, axis description.
pub(crate) const X_LABEL_AREA: u32 = 56;
/// Gap between tick marks and tick labels (plotters' default is 5 px + tick).
const TICK_LABEL_GAP: u32 = 14;
/// Maximum number of labelled ticks per axis.
pub(crate) const MAX_X_TICKS: usize = 8;
pub(crate) const MAX_Y_TICKS: usize = 8;

/// Legend geometry.
pub(crate) const LEGEND_TOP: u32 = 44;
pub(crate) const LEGEND_PAD: u32 = 12;
pub(crate) const LEGEND_ROW: u32 = 30;
pub(crate) const LEGEND_SAMPLE: u32 = 40;
pub(crate) const LEGEND_GAP: u32 = 10;
const LEGEND_MIN_WIDTH: u32 = 140;

/// A validated figure with its layout.
pub(crate) struct Plan<'a> {
    pub width: u32,
    pub height: u32,
    pub title: &'a str,
    /// Title font size, shrunk if needed to fit the width.
    pub title_font: f64,
    pub title_band: u32,
    pub rows: usize,
    pub cols: usize,
    pub panels: Vec<PanelPlan<'a>>,
    pub legend: Option<LegendPlan<'a>>,
}

pub(crate) struct PanelPlan<'a> {
    pub panel: &'a Panel,
    /// Panel title font size, shrunk if needed to fit the cell.
    pub title_font: f64,
    /// Axis description font size (both axes), shrunk if needed to fit.
    pub desc_font: f64,
    pub x: Axis,
    pub y: Axis,
    /// Width of the area left of the plot: axis description, tick labels, ticks.
    pub y_label_area: u32,
    /// Style of each series of `panel.series`.
    pub styles: Vec<SeriesStyle>,
}

pub(crate) struct LegendPlan<'a> {
    pub entries: Vec<(&'a str, SeriesStyle)>,
    pub width: u32,
    pub rows_per_column: usize,
    pub column_width: u32,
}

/// Validates `figure` and computes its layout.
pub(crate) fn plan(figure: &Figure) -> Result<Plan<'_>, FigureError> {
    if figure.panels.is_empty() {
        return Err(FigureError::EmptyFigure {
            title: figure.title.clone(),
        });
    }
    if figure.columns == 0 {
        return Err(FigureError::ZeroColumns {
            title: figure.title.clone(),
        });
    }
    for (i, panel) in figure.panels.iter().enumerate() {
        validate_panel(i, panel)?;
    }

    // Styles by distinct label, in order of first appearance.
    let mut style_of: BTreeMap<&str, SeriesStyle> = BTreeMap::new();
    let mut entries: Vec<(&str, SeriesStyle)> = Vec::new();
    for series in figure.panels.iter().flat_map(|p| &p.series) {
        let label = series.label.as_str();
        if !style_of.contains_key(label) {
            let style = SeriesStyle::nth(style_of.len());
            style_of.insert(label, style);
            // Unlabelled series get a style but no legend entry.
            if !label.trim().is_empty() {
                entries.push((label, style));
            }
        }
    }

    let n = figure.panels.len();
    let cols = figure.columns.min(n);
    let rows = n.div_ceil(cols);
    let title_band = if figure.title.trim().is_empty() {
        0
    } else {
        TITLE_BAND
    };
    let grid_height = rows as u32 * PANEL_HEIGHT;

    let panels = figure
        .panels
        .iter()
        .map(|panel| {
            let styles = panel
                .series
                .iter()
                .map(|s| style_of[s.label.as_str()])
                .collect();
            plan_panel(panel, styles)
        })
        .collect::<Result<Vec<_>, _>>()?;

    let legend = if entries.is_empty() {
        None
    } else {
        let mut label_width = 0;
        for (label, _) in &entries {
            label_width = label_width.max(text_size(label, LEGEND_FONT)?.0);
        }
        let column_width = LEGEND_SAMPLE + LEGEND_GAP + label_width + LEGEND_PAD;
        let usable = grid_height.saturating_sub(LEGEND_TOP + 2 * LEGEND_PAD);
        let rows_per_column = ((usable / LEGEND_ROW) as usize).max(1);
        let columns = entries.len().div_ceil(rows_per_column) as u32;
        let width = (3 * LEGEND_PAD + columns * column_width).max(LEGEND_MIN_WIDTH);
        Some(LegendPlan {
            entries,
            width,
            rows_per_column,
            column_width,
        })
    };

    let width = cols as u32 * PANEL_WIDTH + legend.as_ref().map_or(0, |l| l.width);
    let height = title_band + grid_height;
    Ok(Plan {
        width,
        height,
        title: &figure.title,
        title_font: fitted_size(&figure.title, TITLE_FONT, width - 2 * PANEL_MARGIN)?,
        title_band,
        rows,
        cols,
        panels,
        legend,
    })
}

fn validate_panel(index: usize, panel: &Panel) -> Result<(), FigureError> {
    let mut any_point = false;
    for (si, series) in panel.series.iter().enumerate() {
        let non_finite = |point: usize, field: &'static str, value: f64| FigureError::NonFinite {
            panel: index,
            panel_title: panel.title.clone(),
            series: si,
            label: series.label.clone(),
            point,
            field,
            value,
        };
        if let Some(errs) = &series.y_err
            && errs.len() != series.points.len()
        {
            return Err(FigureError::ErrorBarCount {
                panel: index,
                panel_title: panel.title.clone(),
                series: si,
                label: series.label.clone(),
                points: series.points.len(),
                errors: errs.len(),
            });
        }
        for (pi, &(x, y)) in series.points.iter().enumerate() {
            any_point = true;
            if !x.is_finite() {
                return Err(non_finite(pi, "x", x));
            }
            if !y.is_finite() {
                return Err(non_finite(pi, "y", y));
            }
            if let Some(errs) = &series.y_err {
                let e = errs[pi];
                if !e.is_finite() {
                    return Err(non_finite(pi, "y_err", e));
                }
                if e < 0.0 {
                    return Err(FigureError::NegativeErrorBar {
                        panel: index,
                        panel_title: panel.title.clone(),
                        series: si,
                        label: series.label.clone(),
                        point: pi,
                        value: e,
                    });
                }
            }
            if panel.log_y && y <= 0.0 {
                return Err(FigureError::NonPositiveLogValue {
                    panel: index,
                    panel_title: panel.title.clone(),
                    series: si,
                    label: series.label.clone(),
                    point: pi,
                    value: y,
                });
            }
        }
    }
    if !any_point {
        return Err(FigureError::EmptyPanel {
            panel: index,
            title: panel.title.clone(),
        });
    }
    Ok(())
}

/// Axis ranges (with padding), tick choice and the width of the y label area.
fn plan_panel(panel: &Panel, styles: Vec<SeriesStyle>) -> Result<PanelPlan<'_>, FigureError> {
    let points = || panel.series.iter().flat_map(|s| s.points.iter().copied());
    // (y - err, y + err) for every point; err = 0 without error bars.
    let spans = || {
        panel.series.iter().flat_map(|s| {
            s.points.iter().enumerate().map(move |(i, &(_, y))| {
                let e = s.y_err.as_ref().map_or(0.0, |errs| errs[i]);
                (y - e, y + e)
            })
        })
    };

    // x: 5% padding each side, never crossing zero when all x are non-negative.
    let (xmin, xmax) = min_max(points().map(|p| p.0));
    let (mut xlo, mut xhi) = if xmax > xmin {
        let pad = 0.05 * (xmax - xmin);
        (xmin - pad, xmax + pad)
    } else {
        let pad = (xmin.abs() * 0.1).max(1.0);
        (xmin - pad, xmax + pad)
    };
    if xmin >= 0.0 && xlo < 0.0 {
        xlo = 0.0;
    }
    if xmax <= 0.0 && xhi > 0.0 {
        xhi = 0.0;
    }

    let y = if panel.log_y {
        let (ymin, ymax) = min_max(points().map(|p| p.1));
        let low = spans()
            .map(|(lo, _)| lo)
            .filter(|&lo| lo > 0.0)
            .fold(ymin, f64::min);
        let high = spans().map(|(_, hi)| hi).fold(ymax, f64::max);
        let (a, b) = (low.log10(), high.log10());
        let pad = if b - a > 1e-9 { 0.05 * (b - a) } else { 0.1 };
        Axis {
            lo: 10f64.powf(a - pad),
            hi: 10f64.powf(b + pad),
            log: true,
            fixed: None,
        }
    } else {
        let (low, _) = min_max(spans().map(|s| s.0));
        let (_, high) = min_max(spans().map(|s| s.1));
        let (lo, hi) = if low >= 0.0 {
            // All values non-negative: start at zero.
            let hi = if high > 0.0 { high * 1.05 } else { 1.0 };
            (0.0, hi)
        } else if high <= 0.0 {
            (low * 1.05, 0.0)
        } else {
            let pad = 0.05 * (high - low);
            (low - pad, high + pad)
        };
        Axis {
            lo,
            hi,
            log: false,
            fixed: None,
        }
    };

    // y label area: widest tick label + gap + rotated axis description.
    let mut widest = 0;
    for t in y.ticks(MAX_Y_TICKS) {
        widest = widest.max(text_size(&format_tick(t), TICK_FONT)?.0);
    }
    // Long texts are set smaller rather than clipped or spilling into neighbours.
    let title_font = fitted_size(
        &panel.title,
        PANEL_TITLE_FONT,
        PANEL_WIDTH - 2 * PANEL_MARGIN,
    )?;
    let desc_font = fitted_size(&panel.x_label, AXIS_DESC_FONT, PANEL_WIDTH * 3 / 4)?.min(
        fitted_size(&panel.y_label, AXIS_DESC_FONT, PANEL_HEIGHT * 3 / 4)?,
    );
    let desc = if panel.y_label.trim().is_empty() {
        0
    } else {
        text_size(&panel.y_label, desc_font)?.1 + 12
    };
    let y_label_area = widest + TICK_LABEL_GAP + desc + 4;

    // x ticks at the data's x values when there are few and their labels fit.
    let plot_width =
        f64::from(PANEL_WIDTH - 2 * PANEL_MARGIN - PANEL_MARGIN_RIGHT / 2 - y_label_area);
    let x = Axis {
        lo: xlo,
        hi: xhi,
        log: false,
        fixed: data_ticks(points().map(|p| p.0), xlo, xhi, plot_width)?,
    };

    Ok(PanelPlan {
        panel,
        title_font,
        desc_font,
        x,
        y,
        y_label_area,
        styles,
    })
}

/// The distinct x values as tick positions, if there are 2..=MAX_X_TICKS of them and
/// neighbouring labels do not collide at the given plot width.
fn data_ticks(
    xs: impl Iterator<Item = f64>,
    lo: f64,
    hi: f64,
    plot_width: f64,
) -> Result<Option<Vec<f64>>, FigureError> {
    let mut xs: Vec<f64> = xs.collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300));
    if xs.len() < 2 || xs.len() > MAX_X_TICKS {
        return Ok(None);
    }
    let px = |v: f64| (v - lo) / (hi - lo) * plot_width;
    let mut widths = Vec::with_capacity(xs.len());
    for &x in &xs {
        widths.push(f64::from(text_size(&format_tick(x), TICK_FONT)?.0));
    }
    for i in 1..xs.len() {
        let gap = px(xs[i]) - px(xs[i - 1]);
        if gap < (widths[i] + widths[i - 1]) / 2.0 + 10.0 {
            return Ok(None);
        }
    }
    Ok(Some(xs))
}

/// `size`, or smaller (down to half) so that `text` is at most `max_width` pixels wide.
fn fitted_size(text: &str, size: f64, max_width: u32) -> Result<f64, FigureError> {
    let width = text_size(text, size)?.0;
    if width <= max_width {
        return Ok(size);
    }
    Ok((size * f64::from(max_width) / f64::from(width)).max(size / 2.0))
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Series;

    fn s(label: &str) -> Series {
        Series {
            label: label.to_string(),
            points: vec![(1.0, 2.0), (2.0, 3.0)],
            y_err: None,
        }
    }

    #[test]
    fn same_label_same_style_across_panels() {
        let figure = Figure {
            title: String::new(),
            panels: vec![
                Panel {
                    series: vec![s("a"), s("b"), s("")],
                    ..Panel::default()
                },
                Panel {
                    series: vec![s("c"), s("b"), s("a")],
                    ..Panel::default()
                },
            ],
            columns: 2,
        };
        let plan = plan(&figure).unwrap();
        let (p0, p1) = (&plan.panels[0].styles, &plan.panels[1].styles);
        assert_eq!(p0[0], SeriesStyle::nth(0));
        assert_eq!(p0[1], SeriesStyle::nth(1));
        assert_eq!(p0[2], SeriesStyle::nth(2));
        assert_eq!(p1[0], SeriesStyle::nth(3));
        assert_eq!(p1[1], p0[1]);
        assert_eq!(p1[2], p0[0]);
        let legend = plan.legend.unwrap();
        let labels: Vec<&str> = legend.entries.iter().map(|e| e.0).collect();
        assert_eq!(labels, ["a", "b", "c"], "one entry per non-empty label");
        assert_eq!(legend.entries[2].1, SeriesStyle::nth(3));
    }

    #[test]
    fn y_axis_starts_at_zero_for_positive_data_and_pads() {
        let figure = Figure {
            title: String::new(),
            panels: vec![Panel {
                series: vec![Series {
                    label: "x".into(),
                    points: vec![(10.0, 50.0), (20.0, 100.0)],
                    y_err: Some(vec![0.0, 10.0]),
                }],
                ..Panel::default()
            }],
            columns: 1,
        };
        let plan = plan(&figure).unwrap();
        let p = &plan.panels[0];
        assert_eq!(p.y.lo, 0.0);
        assert!(p.y.hi > 110.0 && p.y.hi < 120.0, "{}", p.y.hi);
        assert!(p.x.lo < 10.0 && p.x.lo >= 0.0 && p.x.hi > 20.0);
        assert_eq!(p.x.fixed.as_deref(), Some(&[10.0, 20.0][..]));
    }
}
