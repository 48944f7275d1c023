//! Timelines (Gantt charts): one row per worker, coloured segments over time, each
//! segment coloured by its kind (one legend entry per kind) and optionally labelled.

use plotters::coord::Shift;
use plotters::drawing::DrawingArea;
use plotters::element::Rectangle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{BLACK, Color, RGBColor, WHITE};
use plotters_backend::DrawingBackend;

use crate::FigureError;
use crate::axis::Axis;
use crate::colormap::is_dark;
use crate::draw::{Frame, draw_frame, drawing_error, fill_rect, label, to_area};
use crate::font::text_size;
use crate::layout::{
    ChartRef, MAX_ROW_LABEL, MAX_X_TICKS, PANEL_MARGIN_RIGHT, PanelText, Styles, TICK_FONT,
    TICK_LABEL_GAP, ellipsize,
};

/// A timeline: `rows` (workers, GPUs) top to bottom, and segments on them.
///
/// For "which worker does what when under a policy": one panel per policy, stacked
/// vertically (`columns: 1`), rows the workers, segments of kinds such as "load",
/// "generate", "idle". Leave time without a segment for idle time, or give idle
/// time its own kind.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimelinePanel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the time axis, e.g. "time (s)" (may be empty).
    pub x_label: String,
    /// Description of the row axis, e.g. "worker" (may be empty).
    pub y_label: String,
    /// Row labels, top to bottom.
    pub rows: Vec<String>,
    /// The segments, in any order (later ones are drawn over earlier ones).
    pub segments: Vec<Segment>,
    /// The time axis range. `None`: one range shared by every timeline of the figure
    /// without a range, from 0 (or the earliest start, if negative) to the latest end,
    /// so that panels stacked vertically compare directly.
    pub range: Option<(f64, f64)>,
}

/// One bar on a timeline row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Segment {
    /// Index into `TimelinePanel::rows`.
    pub row: usize,
    /// Start and end time (finite, `end >= start`).
    pub start: f64,
    pub end: f64,
    /// Kind, e.g. "load": the colour and the legend entry (same kind, same colour in
    /// every panel, shared with the labels of other charts in the figure).
    pub kind: String,
    /// Text written inside the segment when it fits, e.g. an expert or request id
    /// (may be empty).
    pub label: String,
}

/// Segment height as a fraction of the row height.
const BAR_FILL: f64 = 0.7;
/// Font of segment labels.
const SEGMENT_FONT: f64 = 15.0;

/// A validated, laid-out timeline.
pub(crate) struct TimelinePlan<'a> {
    panel: &'a TimelinePanel,
    text: PanelText,
    x: Axis,
    y_label_area: u32,
    row_font: f64,
    row_stride: usize,
    /// Row labels as drawn (cut short when too long).
    rows: Vec<String>,
    colors: Vec<RGBColor>,
}

/// Checks a timeline: rows and segments present, segments on existing rows with
/// finite times that do not run backwards, a finite increasing range if given.
pub(crate) fn validate(index: usize, p: &TimelinePanel) -> Result<(), FigureError> {
    let t = || p.title.clone();
    if p.rows.is_empty() || p.segments.is_empty() {
        return Err(FigureError::EmptyPanel {
            panel: index,
            title: t(),
        });
    }
    for (i, s) in p.segments.iter().enumerate() {
        let at = |what: &str| format!("segment {i} ({:?}) {what}", s.kind);
        if s.row >= p.rows.len() {
            return Err(FigureError::RowOutOfRange {
                panel: index,
                panel_title: t(),
                at: at("row"),
                row: s.row,
                rows: p.rows.len(),
            });
        }
        for (what, v) in [("start", s.start), ("end", s.end)] {
            if !v.is_finite() {
                return Err(FigureError::NonFiniteValue {
                    panel: index,
                    panel_title: t(),
                    at: at(what),
                    value: v,
                });
            }
        }
        if s.end < s.start {
            return Err(FigureError::InvalidValue {
                panel: index,
                panel_title: t(),
                at: at("end"),
                value: s.end,
                reason: "a segment cannot end before it starts",
            });
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

/// The time range shared by the (validated) timelines without their own range.
pub(crate) fn shared_range(charts: &[ChartRef<'_>]) -> (f64, f64) {
    let mut lo = 0.0f64;
    let mut hi = f64::NEG_INFINITY;
    for c in charts {
        if let ChartRef::Timeline(p) = c
            && p.range.is_none()
        {
            for s in &p.segments {
                lo = lo.min(s.start);
                hi = hi.max(s.end);
            }
        }
    }
    if hi > lo {
        // A little room after the last segment.
        (lo, hi + 0.02 * (hi - lo))
    } else {
        (lo, lo + 1.0)
    }
}

/// Lays out a validated timeline; `shared` is the figure's shared time range, `title_band`
/// the height of its row's title band.
pub(crate) fn plan<'a>(
    p: &'a TimelinePanel,
    shared: (f64, f64),
    styles: &Styles<'_>,
    title_band: u32,
) -> Result<TimelinePlan<'a>, FigureError> {
    let text = PanelText::new(&p.title, &p.x_label, &p.y_label, title_band)?;
    let (lo, hi) = p.range.unwrap_or(shared);
    let x = Axis {
        lo,
        hi,
        log: false,
        fixed: None,
    };
    let plot_height = f64::from(text.plot_height(text.numeric_x_label_area)).max(40.0);
    let band = plot_height / p.rows.len() as f64;
    let row_font = ((band - 2.0) / 0.94).clamp(TICK_FONT * 0.6, TICK_FONT);
    let row_h = f64::from(text_size("Hg", row_font)?.1) + 2.0;
    let row_stride = (row_h / band).ceil().max(1.0) as usize;
    let mut widest = 0;
    let mut rows = Vec::with_capacity(p.rows.len());
    for l in &p.rows {
        let l = ellipsize(l, row_font, MAX_ROW_LABEL)?;
        widest = widest.max(text_size(&l, row_font)?.0);
        rows.push(l);
    }
    let y_label_area = widest + TICK_LABEL_GAP + text.y_desc_width()? + 4;
    let colors = p
        .segments
        .iter()
        .map(|s| styles[s.kind.as_str()].color)
        .collect();
    Ok(TimelinePlan {
        panel: p,
        text,
        x,
        y_label_area,
        row_font,
        row_stride,
        rows,
        colors,
    })
}

/// Draws a timeline panel into its cell.
pub(crate) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    plan: &TimelinePlan<'_>,
) -> Result<(), FigureError> {
    let p = plan.panel;
    let n = p.rows.len() as f64;
    let chart = draw_frame(
        area,
        &Frame {
            text: &plan.text,
            x: plan.x.clone(),
            y: Axis {
                lo: 0.0,
                hi: n,
                log: false,
                fixed: None,
            },
            x_label_area: plan.text.numeric_x_label_area,
            y_label_area: plan.y_label_area,
            margin_right: PANEL_MARGIN_RIGHT,
            x_ticks: MAX_X_TICKS,
            y_ticks: 0,
            x_grid: true,
            y_grid: false,
        },
    )?;
    let (x_lo, x_hi) = (plan.x.lo, plan.x.hi);
    // Row r spans y = n - r - 1 .. n - r (row 0 on top).
    let at = |t: f64, y: f64| to_area(area, &chart, (t.clamp(x_lo, x_hi), n - y));
    let (left, _) = at(x_lo, 0.0);
    let (right, _) = at(x_hi, 0.0);

    // Light bands on every other row, and the row labels.
    for (r, name) in plan.rows.iter().enumerate() {
        let (_, top) = at(x_lo, r as f64);
        let (_, bottom) = at(x_lo, r as f64 + 1.0);
        if r % 2 == 1 {
            area.draw(&Rectangle::new(
                [(left + 1, top), (right, bottom)],
                BLACK.mix(0.04).filled(),
            ))
            .map_err(drawing_error)?;
        }
        if r % plan.row_stride == 0 {
            label(
                area,
                name,
                (left - TICK_LABEL_GAP as i32 + 4, (top + bottom) / 2),
                plan.row_font,
                Pos::new(HPos::Right, VPos::Center),
                false,
                BLACK,
            )?;
        }
    }

    let inset = (1.0 - BAR_FILL) / 2.0;
    for (s, &color) in p.segments.iter().zip(&plan.colors) {
        if s.end < x_lo || s.start > x_hi {
            continue;
        }
        let (x0, y0) = at(s.start, s.row as f64 + inset);
        let (x1, y1) = at(s.end, s.row as f64 + 1.0 - inset);
        // One pixel of background between adjacent segments, at least one pixel wide.
        let x1 = (x1 - 1).max(x0);
        fill_rect(area, (x0, y0), (x1, y1), color)?;
        if !s.label.is_empty() {
            let (w, h) = text_size(&s.label, SEGMENT_FONT)?;
            if (w as i32) + 6 <= x1 - x0 && (h as i32) <= y1 - y0 + 2 {
                let ink = if is_dark(color) { WHITE } else { BLACK };
                label(
                    area,
                    &s.label,
                    ((x0 + x1) / 2, (y0 + y1) / 2),
                    SEGMENT_FONT,
                    Pos::new(HPos::Center, VPos::Center),
                    false,
                    ink,
                )?;
            }
        }
    }
    Ok(())
}
