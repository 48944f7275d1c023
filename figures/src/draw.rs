//! Drawing a [`Plan`] onto any plotters backend (bitmap for PNG, SVG).

use plotters::chart::{ChartBuilder, ChartContext};
use plotters::coord::Shift;
use plotters::drawing::{DrawingArea, DrawingAreaErrorKind};
use plotters::element::{PathElement, Rectangle, Text};
use plotters::prelude::Cartesian2d;
use plotters::series::LineSeries;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{BLACK, Color, FontTransform, RGBColor, WHITE};
use plotters_backend::DrawingBackend;

use crate::FigureError;
use crate::axis::Axis;
use crate::font::font;
use crate::layout::{
    ChartPlan, FittedText, LEGEND_FONT, LEGEND_GAP, LEGEND_PAD, LEGEND_ROW, LEGEND_SAMPLE,
    LEGEND_TOP, LegendPlan, MAX_X_TICKS, MAX_Y_TICKS, PANEL_MARGIN, PANEL_MARGIN_RIGHT, PanelPlan,
    PanelText, Plan, Swatch, TICK_FONT, TITLE_PAD, line_height, title_height,
};
use crate::style::{ErrorBarElement, MarkerElement};

pub(crate) fn drawing_error<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> FigureError {
    FigureError::Drawing(e.to_string())
}

/// Draws the whole figure on `root`, whose size is `plan.width` x `plan.height`.
pub(crate) fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plan: &Plan<'_>,
) -> Result<(), FigureError> {
    root.fill(&WHITE).map_err(drawing_error)?;
    let (main, caption_area) = root.split_vertically(plan.height - plan.caption_band);
    if let Some(caption) = plan.caption {
        let style = font(plan.caption_font)
            .color(&BLACK.mix(0.8))
            .pos(Pos::new(HPos::Left, VPos::Center));
        let (_, h) = caption_area.dim_in_pixel();
        caption_area
            .draw(&Text::new(
                caption,
                (PANEL_MARGIN as i32 * 2, (h / 2) as i32),
                style,
            ))
            .map_err(drawing_error)?;
    }
    let (title_area, body) = main.split_vertically(plan.title_band);
    let (w, h) = title_area.dim_in_pixel();
    // The title's lines, centred in their band.
    let step = line_height(plan.title.font)?;
    let first = (h.saturating_sub(step * plan.title.lines.len() as u32) + step) / 2;
    for (i, line) in plan.title.lines.iter().enumerate() {
        label(
            &title_area,
            line,
            ((w / 2) as i32, (first + i as u32 * step) as i32),
            plan.title.font,
            Pos::new(HPos::Center, VPos::Center),
            false,
            BLACK,
        )?;
    }
    let grid_width = plan.cols as u32 * crate::PANEL_WIDTH;
    let (grid, legend_area) = body.split_horizontally(grid_width);
    let cells = grid.split_evenly((plan.rows, plan.cols));
    for (cell, panel) in cells.iter().zip(&plan.panels) {
        match panel {
            ChartPlan::Line(p) => draw_panel(cell, p)?,
            ChartPlan::Bars(p) => crate::bar::draw(cell, p)?,
            ChartPlan::Heatmap(p) => crate::heatmap::draw(cell, p)?,
            ChartPlan::Timeline(p) => crate::timeline::draw(cell, p)?,
        }
    }
    if let Some(legend) = &plan.legend {
        draw_legend(&legend_area, legend)?;
    }
    root.present().map_err(drawing_error)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    plan: &PanelPlan<'_>,
) -> Result<(), FigureError> {
    let panel = &*plan.panel;
    let mut chart = chart_builder(
        area,
        &plan.text,
        PANEL_MARGIN_RIGHT,
        plan.text.numeric_x_label_area,
        plan.y_label_area,
    )?
    .build_cartesian_2d(plan.x.clone(), plan.y.clone())
    .map_err(drawing_error)?;

    let grid = BLACK.mix(0.13);
    let minor = BLACK.mix(0.05);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(MAX_X_TICKS)
        .y_labels(MAX_Y_TICKS)
        .x_max_light_lines(0)
        .y_max_light_lines(if plan.y.log { 10 } else { 0 })
        .bold_line_style(grid)
        .light_line_style(minor)
        .axis_style(BLACK.mix(0.85))
        .label_style(font(TICK_FONT).color(&BLACK))
        .set_all_tick_mark_size(5);
    mesh.draw().map_err(drawing_error)?;
    draw_descs(area, &chart, &plan.text, plan.y_label_area)?;

    // Layers: all error bars, then all lines, then all markers, so markers stay visible.
    let (ylo, yhi) = (plan.y.lo, plan.y.hi);
    for (series, style) in panel.series.iter().zip(&plan.styles) {
        let Some(errs) = &series.y_err else { continue };
        let bars = series
            .points
            .iter()
            .zip(errs)
            .filter(|(_, e)| **e > 0.0)
            .map(|(&(x, y), &e)| {
                let (lo, hi) = (y - e, y + e);
                ErrorBarElement {
                    ends: [(x, lo.max(ylo)), (x, hi.min(yhi))],
                    caps: [lo >= ylo, hi <= yhi],
                    color: style.color,
                }
            });
        chart.draw_series(bars).map_err(drawing_error)?;
    }
    for ((series, style), joined) in panel.series.iter().zip(&plan.styles).zip(&plan.joined) {
        if *joined && series.points.len() > 1 {
            chart
                .draw_series(LineSeries::new(series.points.iter().copied(), style.line()))
                .map_err(drawing_error)?;
        }
    }
    for (series, style) in panel.series.iter().zip(&plan.styles) {
        let markers = series
            .points
            .iter()
            .map(|&at| MarkerElement { at, style: *style });
        chart.draw_series(markers).map_err(drawing_error)?;
    }
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    legend: &LegendPlan<'_>,
) -> Result<(), FigureError> {
    let n = legend.entries.len();
    let rows = n.min(legend.rows_per_column) as u32;
    let (x0, y0) = (LEGEND_PAD as i32 / 2, LEGEND_TOP as i32);
    let title_rows = u32::from(legend.title.is_some());
    let box_w = legend.box_width() as i32;
    let box_h = ((rows + title_rows) * LEGEND_ROW + LEGEND_PAD) as i32;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + box_w, y0 + box_h)],
        RGBColor(0, 0, 0).mix(0.35).stroke_width(1),
    ))
    .map_err(drawing_error)?;
    let text_style = font(LEGEND_FONT)
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    if let Some(title) = legend.title {
        let cy = y0 + (LEGEND_PAD / 2 + LEGEND_ROW / 2) as i32;
        area.draw(&Text::new(
            title,
            (x0 + LEGEND_PAD as i32, cy),
            text_style.clone(),
        ))
        .map_err(drawing_error)?;
    }
    for (i, (label, style, swatch)) in legend.entries.iter().enumerate() {
        let col = (i / legend.rows_per_column) as u32;
        let row = (i % legend.rows_per_column) as u32 + title_rows;
        let left = x0 + (LEGEND_PAD + col * legend.column_width) as i32;
        let cy = y0 + (LEGEND_PAD / 2 + row * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        let right = left + LEGEND_SAMPLE as i32;
        match swatch {
            Swatch::Line => {
                area.draw(&PathElement::new(
                    vec![(left, cy), (right, cy)],
                    style.line(),
                ))
                .map_err(drawing_error)?;
                area.draw(&MarkerElement {
                    at: ((left + right) / 2, cy),
                    style: *style,
                })
                .map_err(drawing_error)?;
            }
            Swatch::Box => {
                let h = LEGEND_ROW as i32 / 2 - 3;
                area.draw(&Rectangle::new(
                    [(left + 6, cy - h), (right - 6, cy + h)],
                    style.color.filled(),
                ))
                .map_err(drawing_error)?;
            }
        }
        area.draw(&Text::new(
            *label,
            (right + LEGEND_GAP as i32, cy),
            text_style.clone(),
        ))
        .map_err(drawing_error)?;
    }
    Ok(())
}

/// A chart with linear or log axes on both sides, as every panel kind uses.
pub(crate) type Chart2d<'a, DB> = ChartContext<'a, DB, Cartesian2d<Axis, Axis>>;

/// What a panel frame looks like: title, axes, label areas and which ticks and grid
/// lines the mesh draws. Categorical axes get no ticks from the mesh (their labels
/// are drawn by the panel kind itself).
pub(crate) struct Frame<'p> {
    pub text: &'p PanelText,
    pub x: Axis,
    pub y: Axis,
    pub x_label_area: u32,
    pub y_label_area: u32,
    pub margin_right: u32,
    /// Number of labelled ticks (0 for none) and whether they get grid lines.
    pub x_ticks: usize,
    pub y_ticks: usize,
    pub x_grid: bool,
    pub y_grid: bool,
}

/// Draws the frame of a panel (title, axes, ticks, grid, axis descriptions) in the
/// same style as the line charts and returns the chart for the data.
pub(crate) fn draw_frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    frame: &Frame<'_>,
) -> Result<Chart2d<'a, DB>, FigureError> {
    let mut chart = chart_builder(
        area,
        frame.text,
        frame.margin_right,
        frame.x_label_area,
        frame.y_label_area,
    )?
    .build_cartesian_2d(frame.x.clone(), frame.y.clone())
    .map_err(drawing_error)?;
    let grid = BLACK.mix(0.13);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(frame.x_ticks)
        .y_labels(frame.y_ticks)
        .x_max_light_lines(0)
        .y_max_light_lines(0)
        .bold_line_style(grid)
        .axis_style(BLACK.mix(0.85))
        .label_style(font(TICK_FONT).color(&BLACK))
        .set_all_tick_mark_size(5);
    if !frame.x_grid {
        mesh.disable_x_mesh();
    }
    if !frame.y_grid {
        mesh.disable_y_mesh();
    }
    mesh.draw().map_err(drawing_error)?;
    draw_descs(area, &chart, frame.text, frame.y_label_area)?;
    Ok(chart)
}

/// A chart builder on a panel's cell with its margins and label areas, after drawing the
/// panel's title (its lines centred between the chart's margins) in a band on top.
fn chart_builder<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    text: &PanelText,
    margin_right: u32,
    x_label_area: u32,
    y_label_area: u32,
) -> Result<ChartBuilder<'a, 'b, DB>, FigureError> {
    let (w, _) = area.dim_in_pixel();
    let centre = (PANEL_MARGIN + w.saturating_sub(margin_right)) as i32 / 2;
    // A title shorter than its row's band sits at the band's foot, just above its chart.
    let first = PANEL_MARGIN + text.title_height - title_height(&text.title)? + TITLE_PAD;
    let step = line_height(text.title.font)?;
    for (i, line) in text.title.lines.iter().enumerate() {
        let top = first + i as u32 * step;
        label(
            area,
            line,
            (centre, top as i32),
            text.title.font,
            Pos::new(HPos::Center, VPos::Top),
            false,
            BLACK,
        )?;
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(PANEL_MARGIN)
        .margin_top(PANEL_MARGIN + text.title_height)
        .margin_right(margin_right)
        .x_label_area_size(x_label_area)
        .y_label_area_size(y_label_area);
    Ok(builder)
}

/// Draws the axis descriptions: the x description's lines centred under the plot, the last
/// at the foot of the panel's chart; the y description's lines (reading bottom to top, the
/// first on the left) at the left edge of the `y_label_area` wide area beside the plot,
/// centred on the plot's height.
fn draw_descs<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart2d<'_, DB>,
    text: &PanelText,
    y_label_area: u32,
) -> Result<(), FigureError> {
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let (bx, by) = area.get_base_pixel();
    let (_, h) = area.dim_in_pixel();
    let foot = (h - PANEL_MARGIN) as i32;
    let step = line_height(text.x_desc.font)? as i32;
    let lines = text.x_desc.lines.len() as i32;
    for (i, line) in text.x_desc.lines.iter().enumerate() {
        label(
            area,
            line,
            (
                (xs.start + xs.end) / 2 - bx,
                foot - (lines - 1 - i as i32) * step,
            ),
            text.x_desc.font,
            Pos::new(HPos::Center, VPos::Bottom),
            false,
            BLACK,
        )?;
    }
    let left = xs.start - bx - y_label_area as i32;
    vertical_lines(area, &text.y_desc, (left, (ys.start + ys.end) / 2 - by))
}

/// Draws `text`'s lines reading bottom to top, the first with its top at `left` and the
/// others to its right, centred on `middle`: `(left, middle)` relative to `area`.
pub(crate) fn vertical_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &FittedText,
    (left, middle): (i32, i32),
) -> Result<(), FigureError> {
    let step = line_height(text.font)? as i32;
    for (i, line) in text.lines.iter().enumerate() {
        label(
            area,
            line,
            (left + i as i32 * step, middle),
            text.font,
            Pos::new(HPos::Center, VPos::Top),
            true,
            BLACK,
        )?;
    }
    Ok(())
}

/// The pixel position of data point `(x, y)` relative to `area`'s top left corner.
pub(crate) fn to_area<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart2d<'_, DB>,
    at: (f64, f64),
) -> (i32, i32) {
    let (ax, ay) = chart.backend_coord(&at);
    let (bx, by) = area.get_base_pixel();
    (ax - bx, ay - by)
}

/// Draws `text` at pixel `at` of `area` (relative to its corner), anchored by
/// `pos`; `vertical` turns it to read bottom to top.
pub(crate) fn label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    at: (i32, i32),
    size: f64,
    pos: Pos,
    vertical: bool,
    color: RGBColor,
) -> Result<(), FigureError> {
    if text.is_empty() {
        return Ok(());
    }
    let mut style = font(size).color(&color).pos(pos);
    if vertical {
        style = style.transform(FontTransform::Rotate270);
    }
    area.draw(&Text::new(text, at, style))
        .map_err(drawing_error)
}

/// A filled rectangle between two pixel corners of `area`.
pub(crate) fn fill_rect<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: (i32, i32),
    b: (i32, i32),
    color: RGBColor,
) -> Result<(), FigureError> {
    area.draw(&Rectangle::new([a, b], color.filled()))
        .map_err(drawing_error)
}
