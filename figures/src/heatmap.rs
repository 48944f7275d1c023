//! Heatmaps: a matrix of values as coloured cells (viridis), labelled rows and
//! columns, optional values written in the cells, and a labelled colorbar.

use plotters::coord::Shift;
use plotters::drawing::DrawingArea;
use plotters::element::{PathElement, Rectangle};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{BLACK, Color, WHITE};
use plotters_backend::DrawingBackend;

use crate::axis::{Axis, format_tick, linear_ticks};
use crate::colormap::{is_dark, viridis};
use crate::draw::{Frame, draw_frame, drawing_error, fill_rect, label, to_area, vertical_lines};
use crate::font::text_size;
use crate::layout::{
    ChartRef, FittedText, LabelFit, MAX_ROW_LABEL, PANEL_MARGIN, PanelText, TICK_FONT,
    TICK_LABEL_GAP, X_LABEL_AREA, ellipsize, fit_labels, fit_vertical, min_max,
    vertical_desc_width,
};
use crate::{FigureError, PANEL_WIDTH};

/// A heatmap: `values[row][column]` as coloured cells, rows top to bottom.
///
/// For "per-GPU expert load of one MoE layer under a mapping": rows are the GPUs,
/// columns the experts (or slots), values the loads; one panel per mapping.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeatmapPanel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the x axis (columns), e.g. "expert" (may be empty).
    pub x_label: String,
    /// Description of the y axis (rows), e.g. "GPU" (may be empty).
    pub y_label: String,
    /// Row labels, top to bottom.
    pub row_labels: Vec<String>,
    /// Column labels, left to right.
    pub column_labels: Vec<String>,
    /// `values[row][column]`, finite: `row_labels.len()` rows of
    /// `column_labels.len()` values.
    pub values: Vec<Vec<f64>>,
    /// Description of the colorbar, e.g. "tokens routed" (may be empty).
    pub value_label: String,
    /// The values at the two ends of the colour scale (values outside get the end
    /// colours). `None`: one scale shared by every heatmap of the figure without a
    /// range, from 0 (or the smallest value, if negative) to the largest value.
    pub range: Option<(f64, f64)>,
    /// Write each value in its cell (when the cells are large enough).
    pub annotate: bool,
}

/// Gap between the plot and the colorbar, and the colorbar's width.
const BAR_GAP: u32 = 14;
const BAR_WIDTH: u32 = 18;
const TICK: u32 = 5;
const LABEL_GAP: u32 = 8;
/// Column-label strides tried when not every column can be labelled.
const STRIDES: [usize; 12] = [1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64];

/// A validated, laid-out heatmap.
pub(crate) struct HeatmapPlan<'a> {
    panel: &'a HeatmapPanel,
    text: PanelText,
    y_label_area: u32,
    x_label_area: u32,
    margin_right: u32,
    range: (f64, f64),
    /// Labelled columns (every `col_stride`-th) and how their labels are set.
    col_stride: usize,
    col_fit: LabelFit,
    row_stride: usize,
    row_font: f64,
    /// The colorbar's description, fitted along the plot's height.
    value_label: FittedText,
    /// Row and column labels as drawn (cut short when too long).
    rows: Vec<String>,
    columns: Vec<String>,
    /// Font of the values written in cells; `None` when not annotated.
    cell_font: Option<f64>,
    bar_ticks: Vec<f64>,
    bar_tick_width: u32,
}

/// Checks a heatmap: rows and columns present, a full matrix of finite values, a
/// finite increasing range if one is given.
pub(crate) fn validate(index: usize, p: &HeatmapPanel) -> Result<(), FigureError> {
    let t = || p.title.clone();
    if p.row_labels.is_empty() || p.column_labels.is_empty() {
        return Err(FigureError::EmptyPanel {
            panel: index,
            title: t(),
        });
    }
    if p.values.len() != p.row_labels.len() {
        return Err(FigureError::LengthMismatch {
            panel: index,
            panel_title: t(),
            at: "values (one row per row label)".to_string(),
            expected: p.row_labels.len(),
            found: p.values.len(),
        });
    }
    for (r, row) in p.values.iter().enumerate() {
        if row.len() != p.column_labels.len() {
            return Err(FigureError::LengthMismatch {
                panel: index,
                panel_title: t(),
                at: format!(
                    "row {r} ({:?}) values (one per column label)",
                    p.row_labels[r]
                ),
                expected: p.column_labels.len(),
                found: row.len(),
            });
        }
        for (c, &v) in row.iter().enumerate() {
            if !v.is_finite() {
                return Err(FigureError::NonFiniteValue {
                    panel: index,
                    panel_title: t(),
                    at: format!(
                        "row {r} ({:?}), column {c} ({:?})",
                        p.row_labels[r], p.column_labels[c]
                    ),
                    value: v,
                });
            }
        }
    }
    if let Some((lo, hi)) = p.range
        && !(lo.is_finite() && hi.is_finite() && lo < hi)
    {
        return Err(FigureError::InvalidRange {
            panel: index,
            panel_title: t(),
            lo,
            hi,
        });
    }
    Ok(())
}

/// The colour range shared by the (validated) heatmaps without their own range.
pub(crate) fn shared_range(charts: &[ChartRef<'_>]) -> (f64, f64) {
    let values = charts.iter().flat_map(|c| match c {
        ChartRef::Heatmap(p) if p.range.is_none() => p.values.as_slice(),
        _ => &[],
    });
    let (lo, hi) = min_max(values.flatten().copied());
    let lo = lo.min(0.0);
    if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
}

/// A short label for a cell value: three significant digits.
fn format_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1e5 || (a < 1e-2 && a > 0.0) {
        return format_tick(v);
    }
    let decimals = if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".to_string() } else { s }
}

/// Lays out a validated heatmap; `shared` is the figure's shared colour range, `title_band`
/// the height of its row's title band.
pub(crate) fn plan(
    p: &HeatmapPanel,
    shared: (f64, f64),
    title_band: u32,
) -> Result<HeatmapPlan<'_>, FigureError> {
    let range = p.range.unwrap_or(shared);
    let (nrows, ncols) = (p.row_labels.len(), p.column_labels.len());

    // Below the plot: column labels (at most full size) and the x description.
    let label_h = text_size("Hg", TICK_FONT)?.1;
    let mut text = PanelText::new(&p.title, &p.x_label, &p.y_label, title_band)?;
    let desc = match text.x_desc.depth()? {
        0 => 0,
        depth => LABEL_GAP + depth,
    };
    let x_label_area = (LABEL_GAP + label_h + desc + 6).max(X_LABEL_AREA);
    text.fit_y_desc(&p.y_label, x_label_area)?;
    let plot_height = f64::from(text.plot_height(x_label_area)).max(40.0);

    // Rows: as large a font as the row height allows (at least 60%), else every n-th.
    let band = plot_height / nrows as f64;
    let row_font = ((band - 2.0) / 0.94).clamp(TICK_FONT * 0.6, TICK_FONT);
    let row_h = f64::from(text_size("Hg", row_font)?.1) + 2.0;
    let row_stride = (row_h / band).ceil().max(1.0) as usize;
    let mut widest_row = 0;
    let mut rows = Vec::with_capacity(nrows);
    for l in &p.row_labels {
        let l = ellipsize(l, row_font, MAX_ROW_LABEL)?;
        widest_row = widest_row.max(text_size(&l, row_font)?.0);
        rows.push(l);
    }
    let y_label_area = widest_row + TICK_LABEL_GAP + text.y_desc_width()? + 4;

    // Colorbar to the right: bar, ticks, tick labels, description.
    let bar_ticks = linear_ticks(range.0, range.1, 6);
    let mut bar_tick_width = 0;
    for &t in &bar_ticks {
        bar_tick_width = bar_tick_width.max(text_size(&format_tick(t), TICK_FONT)?.0);
    }
    // The colorbar description runs along the plot's height.
    let value_label = fit_vertical(&p.value_label, plot_height as u32)?;
    let bar_desc = vertical_desc_width(&value_label)?;
    let margin_right =
        BAR_GAP + BAR_WIDTH + TICK + 4 + bar_tick_width + 6 + bar_desc + PANEL_MARGIN;

    // Columns: every label if they fit (shrunk to 70% at most), else every n-th.
    let plot_width =
        f64::from(PANEL_WIDTH.saturating_sub(PANEL_MARGIN + margin_right + y_label_area)).max(40.0);
    let cell = plot_width / ncols as f64;
    // Labels longer than a row label may be are cut short first.
    let mut columns = Vec::with_capacity(ncols);
    for l in &p.column_labels {
        columns.push(ellipsize(l, TICK_FONT * 0.8, MAX_ROW_LABEL)?);
    }
    let strs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut col_stride = 1;
    let mut col_fit = fit_labels(&strs, cell, TICK_FONT, false)?.fit;
    if col_fit.font < TICK_FONT * 0.7 {
        let font = TICK_FONT * 0.8;
        let mut widest = 0;
        for l in &strs {
            widest = widest.max(text_size(l, font)?.0);
        }
        col_stride = STRIDES
            .iter()
            .copied()
            .find(|&s| f64::from(widest) + 8.0 <= s as f64 * cell)
            .unwrap_or_else(|| ((f64::from(widest) + 8.0) / cell).ceil() as usize);
        col_fit = LabelFit {
            font,
            vertical: false,
            extent: text_size("Hg", font)?.1,
        };
    }

    // Values in cells: the largest font (up to 75% of tick size) that fits every cell.
    let cell_font = if p.annotate {
        let mut widest = 0;
        for v in p.values.iter().flatten() {
            widest = widest.max(text_size(&format_value(*v), TICK_FONT)?.0);
        }
        let by_width = TICK_FONT * (cell - 4.0) / f64::from(widest.max(1));
        let by_height = (band - 2.0) / 0.94;
        let font = by_width.min(by_height).min(TICK_FONT * 0.75);
        (font >= 9.0).then_some(font)
    } else {
        None
    };

    Ok(HeatmapPlan {
        panel: p,
        text,
        y_label_area,
        x_label_area,
        margin_right,
        range,
        col_stride,
        col_fit,
        row_stride,
        row_font,
        value_label,
        rows,
        columns,
        cell_font,
        bar_ticks,
        bar_tick_width,
    })
}

/// Draws a heatmap panel into its cell.
pub(crate) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    plan: &HeatmapPlan<'_>,
) -> Result<(), FigureError> {
    let p = plan.panel;
    let (nrows, ncols) = (p.row_labels.len(), p.column_labels.len());
    let n = nrows as f64;
    let chart = draw_frame(
        area,
        &Frame {
            text: &plan.text,
            x: Axis {
                lo: 0.0,
                hi: ncols as f64,
                log: false,
                fixed: None,
            },
            y: Axis {
                lo: 0.0,
                hi: n,
                log: false,
                fixed: None,
            },
            x_label_area: plan.x_label_area,
            y_label_area: plan.y_label_area,
            margin_right: plan.margin_right,
            x_ticks: 0,
            y_ticks: 0,
            x_grid: false,
            y_grid: false,
        },
    )?;
    let (lo, hi) = plan.range;
    let at = |c: usize, r: f64| to_area(area, &chart, (c as f64, n - r));
    let (left, top) = at(0, 0.0);
    let (right, bottom) = at(ncols, n);
    let cell_w = f64::from(right - left) / ncols as f64;
    let cell_h = f64::from(bottom - top) / n;
    // Thin white separators when cells are large enough to show them.
    let gap_x = i32::from(cell_w >= 8.0);
    let gap_y = i32::from(cell_h >= 8.0);
    for (r, row) in p.values.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let (x0, y0) = at(c, r as f64);
            let (x1, y1) = at(c + 1, r as f64 + 1.0);
            let color = viridis((v - lo) / (hi - lo));
            fill_rect(
                area,
                (x0, y0),
                ((x1 - gap_x).max(x0), (y1 - gap_y).max(y0)),
                color,
            )?;
            if let Some(font) = plan.cell_font {
                let ink = if is_dark(color) { WHITE } else { BLACK };
                let centre = ((x0 + x1 - gap_x) / 2, (y0 + y1 - gap_y) / 2);
                label(
                    area,
                    &format_value(v),
                    centre,
                    font,
                    Pos::new(HPos::Center, VPos::Center),
                    false,
                    ink,
                )?;
            }
        }
    }

    // Row and column labels.
    for (r, name) in plan.rows.iter().enumerate() {
        if r % plan.row_stride == 0 {
            let (_, y) = at(0, r as f64 + 0.5);
            let x = left - TICK_LABEL_GAP as i32 + 4;
            label(
                area,
                name,
                (x, y),
                plan.row_font,
                Pos::new(HPos::Right, VPos::Center),
                false,
                BLACK,
            )?;
        }
    }
    for (c, name) in plan.columns.iter().enumerate() {
        if c % plan.col_stride == 0 {
            let x = (at(c, 0.0).0 + at(c + 1, 0.0).0) / 2;
            label(
                area,
                name,
                (x, bottom + LABEL_GAP as i32),
                plan.col_fit.font,
                Pos::new(HPos::Center, VPos::Top),
                false,
                BLACK,
            )?;
        }
    }

    // Colorbar: a vertical gradient with ticks, tick labels and its description.
    let bx0 = right + BAR_GAP as i32;
    let bx1 = bx0 + BAR_WIDTH as i32;
    let h = (bottom - top).max(1);
    let step = 2;
    let mut y = top;
    while y < bottom {
        let y1 = (y + step).min(bottom);
        let t = 1.0 - f64::from(y - top + (y1 - y) / 2) / f64::from(h);
        fill_rect(area, (bx0, y), (bx1, y1), viridis(t))?;
        y = y1;
    }
    let frame = BLACK.mix(0.6).stroke_width(1);
    area.draw(&Rectangle::new([(bx0, top), (bx1, bottom)], frame))
        .map_err(drawing_error)?;
    for &t in &plan.bar_ticks {
        let y = bottom - (f64::from(h) * (t - lo) / (hi - lo)).round() as i32;
        area.draw(&PathElement::new(
            vec![(bx1, y), (bx1 + TICK as i32, y)],
            BLACK.mix(0.85).stroke_width(1),
        ))
        .map_err(drawing_error)?;
        label(
            area,
            &format_tick(t),
            (bx1 + TICK as i32 + 4, y),
            TICK_FONT,
            Pos::new(HPos::Left, VPos::Center),
            false,
            BLACK,
        )?;
    }
    let desc_x = bx1 + (TICK + 4 + plan.bar_tick_width + 6) as i32;
    vertical_lines(area, &plan.value_label, (desc_x, (top + bottom) / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_values_are_short() {
        assert_eq!(format_value(1234.4), "1234");
        assert_eq!(format_value(12.34), "12.3");
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.126), "0.13");
        assert_eq!(format_value(-0.001), "-0.001");
        assert_eq!(format_value(0.0), "0");
    }
}
