//! Validation of a figure and the pixel layout computed from it.
//!
//! Everything that can fail on bad input fails here, before any drawing: the
//! drawing code then works from a [`Plan`] that is known to be consistent. Line
//! charts are planned here; the other chart kinds in their own modules.

use crate::ScatterPanel;
use std::collections::BTreeMap;

use crate::axis::{Axis, format_tick, linear_ticks};
use crate::bar::BarPlan;
use plotters::style::RGBColor;

use crate::font::text_size;
use crate::heatmap::HeatmapPlan;
use crate::style::SeriesStyle;
use crate::timeline::TimelinePlan;
use crate::{
    BarPanel, Chart, FigureError, HeatmapPanel, PANEL_HEIGHT, PANEL_WIDTH, Panel, StackedBarPanel,
    TimelinePanel,
};

/// Height of the figure title band (only when the title is not empty; more for two lines).
pub(crate) const TITLE_BAND: u32 = 52;
/// Space above and below the figure title's lines in its band, together.
const TITLE_BAND_PAD: u32 = 16;
pub(crate) const TITLE_FONT: f64 = 32.0;
pub(crate) const PANEL_TITLE_FONT: f64 = 26.0;
pub(crate) const AXIS_DESC_FONT: f64 = 22.0;
pub(crate) const TICK_FONT: f64 = 20.0;
pub(crate) const LEGEND_FONT: f64 = 21.0;

/// Outer margins of a panel's chart inside its cell.
pub(crate) const PANEL_MARGIN: u32 = 10;
/// Extra right margin so the last x tick label is not clipped.
pub(crate) const PANEL_MARGIN_RIGHT: u32 = 26;
/// The width a panel's title is fitted to: plotters centres it between the chart's left and
/// right margins, so a title as wide as the panel less two left margins ran to the panel's
/// left edge (in the first column, the figure's).
pub(crate) const PANEL_TITLE_ROOM: u32 = PANEL_WIDTH - PANEL_MARGIN - PANEL_MARGIN_RIGHT;
/// Height of the area below the plot: tick marks, tick labels, axis description.
pub(crate) const X_LABEL_AREA: u32 = 56;
/// Gap between tick marks and tick labels (plotters' default is 5 px + tick).
pub(crate) const TICK_LABEL_GAP: u32 = 14;
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
/// Height of the caption band under the grid, and its font size.
pub(crate) const CAPTION_BAND: u32 = 40;
pub(crate) const CAPTION_FONT: f64 = 20.0;

/// A borrowed figure of any kind: what [`plan`] works on.
pub struct View<'a> {
    pub title: &'a str,
    pub charts: Vec<ChartRef<'a>>,
    pub columns: usize,
    /// Fixed colours by label (first entry wins).
    pub colors: &'a [(String, [u8; 3])],
    pub legend_title: Option<&'a str>,
    pub caption: Option<&'a str>,
}

/// A borrowed [`Chart`].
#[derive(Clone, Copy)]
pub enum ChartRef<'a> {
    Line(&'a Panel),
    Bars(&'a BarPanel),
    StackedBars(&'a StackedBarPanel),
    Heatmap(&'a HeatmapPanel),
    Timeline(&'a TimelinePanel),
    Scatter(&'a ScatterPanel),
}

impl<'a> ChartRef<'a> {
    pub fn of(chart: &'a Chart) -> Self {
        match chart {
            Chart::Line(p) => ChartRef::Line(p),
            Chart::Bars(p) => ChartRef::Bars(p),
            Chart::StackedBars(p) => ChartRef::StackedBars(p),
            Chart::Heatmap(p) => ChartRef::Heatmap(p),
            Chart::Timeline(p) => ChartRef::Timeline(p),
            Chart::Scatter(p) => ChartRef::Scatter(p),
        }
    }

    /// The panel's title.
    pub(crate) fn title(self) -> &'a str {
        match self {
            ChartRef::Line(p) => &p.title,
            ChartRef::Bars(p) => &p.title,
            ChartRef::StackedBars(p) => &p.title,
            ChartRef::Heatmap(p) => &p.title,
            ChartRef::Timeline(p) => &p.title,
            ChartRef::Scatter(p) => &p.title,
        }
    }

    /// Labels that get a style (and a legend entry), in order, with their swatch.
    fn styled_labels(self) -> Vec<(&'a str, Swatch)> {
        match self {
            ChartRef::Line(p) => p
                .series
                .iter()
                .map(|s| (s.label.as_str(), Swatch::Line))
                .collect(),
            ChartRef::Bars(p) => p
                .series
                .iter()
                .map(|s| (s.label.as_str(), Swatch::Box))
                .collect(),
            ChartRef::StackedBars(p) => p
                .layers
                .iter()
                .map(|l| (l.label.as_str(), Swatch::Box))
                .collect(),
            ChartRef::Scatter(p) => p
                .series
                .iter()
                .map(|s| (s.label.as_str(), Swatch::Line))
                .collect(),
            ChartRef::Heatmap(_) => Vec::new(),
            ChartRef::Timeline(p) => p
                .segments
                .iter()
                .map(|s| (s.kind.as_str(), Swatch::Box))
                .collect(),
        }
    }
}

/// How a legend entry shows its style: a line with a marker, or a filled box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swatch {
    Line,
    Box,
}

/// A validated figure with its layout.
pub(crate) struct Plan<'a> {
    pub width: u32,
    pub height: u32,
    /// The figure's title, fitted to the width in up to two lines.
    pub title: FittedText,
    /// Height of the band over the grid the title takes (0 without a title).
    pub title_band: u32,
    pub rows: usize,
    pub cols: usize,
    pub panels: Vec<ChartPlan<'a>>,
    pub legend: Option<LegendPlan<'a>>,
    /// Height of the caption band under the grid (0 without a caption).
    pub caption_band: u32,
    pub caption: Option<&'a str>,
    pub caption_font: f64,
}

/// The layout of one panel, by kind.
pub(crate) enum ChartPlan<'a> {
    Line(PanelPlan<'a>),
    Bars(BarPlan),
    Heatmap(HeatmapPlan<'a>),
    Timeline(TimelinePlan<'a>),
}

pub(crate) struct PanelPlan<'a> {
    /// The line chart (a scatter chart is converted into one).
    pub panel: std::borrow::Cow<'a, Panel>,
    /// Whether each series of `panel.series` is joined by a line (else markers only).
    pub joined: Vec<bool>,
    /// The title and axis descriptions, fitted to the panel.
    pub text: PanelText,
    pub x: Axis,
    pub y: Axis,
    /// Width of the area left of the plot: axis description, tick labels, ticks.
    pub y_label_area: u32,
    /// Style of each series of `panel.series`.
    pub styles: Vec<SeriesStyle>,
}

pub(crate) struct LegendPlan<'a> {
    pub entries: Vec<(&'a str, SeriesStyle, Swatch)>,
    pub width: u32,
    pub rows_per_column: usize,
    pub column_width: u32,
    /// A heading over the entries (one legend row, left-aligned).
    pub title: Option<&'a str>,
}

impl LegendPlan<'_> {
    /// Width of the legend's box: its entries' columns with a pad either side, or the legend's
    /// width less a pad either side outside the box, whichever is wider.
    pub fn box_width(&self) -> u32 {
        let columns = self.entries.len().div_ceil(self.rows_per_column) as u32;
        (columns * self.column_width + LEGEND_PAD).max(self.width.saturating_sub(2 * LEGEND_PAD))
    }
}

/// Style of each label, by first appearance.
pub(crate) type Styles<'a> = BTreeMap<&'a str, SeriesStyle>;

/// Validates `figure` and computes its layout.
pub(crate) fn plan<'a>(figure: &View<'a>) -> Result<Plan<'a>, FigureError> {
    if figure.charts.is_empty() {
        return Err(FigureError::EmptyFigure {
            title: figure.title.to_string(),
        });
    }
    if figure.columns == 0 {
        return Err(FigureError::ZeroColumns {
            title: figure.title.to_string(),
        });
    }
    for (i, chart) in figure.charts.iter().enumerate() {
        match *chart {
            ChartRef::Line(panel) => validate_panel(i, panel)?,
            ChartRef::Bars(panel) => crate::bar::validate_grouped(i, panel)?,
            ChartRef::StackedBars(panel) => crate::bar::validate_stacked(i, panel)?,
            ChartRef::Heatmap(panel) => crate::heatmap::validate(i, panel)?,
            ChartRef::Timeline(panel) => crate::timeline::validate(i, panel)?,
            ChartRef::Scatter(panel) => validate_panel(i, &panel.as_line_panel().0)?,
        }
    }

    // Styles by distinct label, in order of first appearance.
    let mut style_of: Styles<'a> = BTreeMap::new();
    let mut entries: Vec<(&str, SeriesStyle, Swatch)> = Vec::new();
    let mut palette_next = 0;
    for (label, swatch) in figure.charts.iter().flat_map(|c| c.styled_labels()) {
        if !style_of.contains_key(label) {
            let fixed = figure.colors.iter().find(|(l, _)| l == label);
            let style = match fixed {
                Some((_, [r, g, b])) => SeriesStyle {
                    color: RGBColor(*r, *g, *b),
                    marker: SeriesStyle::nth(style_of.len()).marker,
                },
                None => {
                    palette_next += 1;
                    SeriesStyle::nth(palette_next - 1)
                }
            };
            style_of.insert(label, style);
            // Unlabelled series get a style but no legend entry.
            if !label.trim().is_empty() {
                entries.push((label, style, swatch));
            }
        }
    }

    let n = figure.charts.len();
    let cols = figure.columns.min(n);
    let rows = n.div_ceil(cols);
    let grid_height = rows as u32 * PANEL_HEIGHT;

    let heat_range = crate::heatmap::shared_range(&figure.charts);
    let time_range = crate::timeline::shared_range(&figure.charts);
    // Every panel of a row gets the row's tallest title band.
    let mut bands = vec![0; rows];
    for (i, chart) in figure.charts.iter().enumerate() {
        bands[i / cols] = bands[i / cols].max(title_band(chart.title())?);
    }
    let panels = figure
        .charts
        .iter()
        .enumerate()
        .map(|(i, chart)| {
            let band = bands[i / cols];
            Ok(match *chart {
                ChartRef::Line(panel) => {
                    let styles = panel
                        .series
                        .iter()
                        .map(|s| style_of[s.label.as_str()])
                        .collect();
                    let joined = vec![true; panel.series.len()];
                    ChartPlan::Line(plan_panel(
                        std::borrow::Cow::Borrowed(panel),
                        joined,
                        styles,
                        true,
                        band,
                    )?)
                }
                ChartRef::Scatter(scatter) => {
                    let (panel, joined) = scatter.as_line_panel();
                    let styles = panel
                        .series
                        .iter()
                        .map(|s| style_of[s.label.as_str()])
                        .collect();
                    ChartPlan::Line(plan_panel(
                        std::borrow::Cow::Owned(panel),
                        joined,
                        styles,
                        false,
                        band,
                    )?)
                }
                ChartRef::Bars(panel) => {
                    ChartPlan::Bars(crate::bar::plan_grouped(panel, &style_of, band)?)
                }
                ChartRef::StackedBars(panel) => {
                    ChartPlan::Bars(crate::bar::plan_stacked(panel, &style_of, band)?)
                }
                ChartRef::Heatmap(panel) => {
                    ChartPlan::Heatmap(crate::heatmap::plan(panel, heat_range, band)?)
                }
                ChartRef::Timeline(panel) => {
                    ChartPlan::Timeline(crate::timeline::plan(panel, time_range, &style_of, band)?)
                }
            })
        })
        .collect::<Result<Vec<_>, FigureError>>()?;

    let legend = if entries.is_empty() {
        None
    } else {
        let mut label_width = 0;
        for (label, _, _) in &entries {
            label_width = label_width.max(text_size(label, LEGEND_FONT)?.0);
        }
        let column_width = LEGEND_SAMPLE + LEGEND_GAP + label_width + LEGEND_PAD;
        // A title takes the first row.
        let title_rows = u32::from(figure.legend_title.is_some());
        let usable =
            grid_height.saturating_sub(LEGEND_TOP + 2 * LEGEND_PAD + title_rows * LEGEND_ROW);
        let rows_per_column = ((usable / LEGEND_ROW) as usize).max(1);
        let columns = entries.len().div_ceil(rows_per_column) as u32;
        // The box (`LegendPlan::box_width`) keeps a pad either side of the title, as of the
        // entries.
        let title_width = match figure.legend_title {
            Some(t) => 4 * LEGEND_PAD + text_size(t, LEGEND_FONT)?.0,
            None => 0,
        };
        let width = (3 * LEGEND_PAD + columns * column_width)
            .max(LEGEND_MIN_WIDTH)
            .max(title_width);
        Some(LegendPlan {
            entries,
            width,
            rows_per_column,
            column_width,
            title: figure.legend_title,
        })
    };

    let width = cols as u32 * PANEL_WIDTH + legend.as_ref().map_or(0, |l| l.width);
    let caption_band = if figure.caption.is_some() {
        CAPTION_BAND
    } else {
        0
    };
    let title = fit_text(
        figure.title,
        TITLE_FONT,
        width - 2 * PANEL_MARGIN,
        TITLE_LINES,
    )?;
    let title_band = match title.depth()? {
        0 => 0,
        depth => TITLE_BAND.max(depth + TITLE_BAND_PAD),
    };
    let height = title_band + grid_height + caption_band;
    Ok(Plan {
        caption_band,
        caption: figure.caption,
        // The caption starts `2 * PANEL_MARGIN` from the left edge (`draw_figure`) and keeps as
        // much from the right one.
        caption_font: fitted_size(
            figure.caption.unwrap_or(""),
            CAPTION_FONT,
            width - 4 * PANEL_MARGIN,
        )?,
        width,
        height,
        title,
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
fn plan_panel<'a>(
    panel: std::borrow::Cow<'a, Panel>,
    joined: Vec<bool>,
    styles: Vec<SeriesStyle>,
    zero_based_y: bool,
    title_band: u32,
) -> Result<PanelPlan<'a>, FigureError> {
    let plan = plan_axes(&panel, zero_based_y, title_band)?;
    Ok(PanelPlan {
        panel,
        joined,
        text: plan.text,
        x: plan.x,
        y: plan.y,
        y_label_area: plan.y_label_area,
        styles,
    })
}

/// The axes and texts of a line panel.
struct AxesPlan {
    text: PanelText,
    x: Axis,
    y: Axis,
    y_label_area: u32,
}

/// Positive data whose span is under this share of their largest value are "flat": a line
/// chart's y axis spans them rather than reaching down to 0.
const FLAT_SHARE: f64 = 0.2;

/// `zero_based_y`: a linear y axis of non-negative (non-positive) data reaches down (up) to 0,
/// unless positive data are flat (within `FLAT_SHARE` of their largest value), when it spans
/// them; otherwise it spans the data with 5% padding (scatter charts).
/// `title_band`: the height of the row's title band.
fn plan_axes(panel: &Panel, zero_based_y: bool, title_band: u32) -> Result<AxesPlan, FigureError> {
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
        let (lo, hi) = if !zero_based_y && high > low {
            let pad = 0.05 * (high - low);
            (low - pad, high + pad)
        } else if low > 0.0 && high - low < FLAT_SHARE * high {
            // Flat positive data: from zero they would draw as one line at the top; the axis
            // spans them instead (its ticks say where it starts).
            let pad = if high > low {
                0.1 * (high - low)
            } else {
                0.05 * high
            };
            ((low - pad).max(0.0), high + pad)
        } else if low >= 0.0 {
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

    // Long texts are broken into lines or set smaller rather than clipped or spilling into
    // neighbours; the y label area holds the tick labels and the y description's lines.
    let text = PanelText::new(&panel.title, &panel.x_label, &panel.y_label, title_band)?;
    let y_label_area = y_label_area(&y, &text)?;

    // x ticks at the data's x values when there are few and their labels fit.
    let plot_width =
        f64::from(PANEL_WIDTH - 2 * PANEL_MARGIN - PANEL_MARGIN_RIGHT / 2 - y_label_area);
    let x = Axis {
        lo: xlo,
        hi: xhi,
        log: false,
        fixed: data_ticks(points().map(|p| p.0), xlo, xhi, plot_width)?,
    };

    Ok(AxesPlan {
        text,
        x,
        y,
        y_label_area,
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

/// A text set to fit a length in at most a given number of lines: its size and its lines
/// (none for an empty text).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FittedText {
    pub font: f64,
    pub lines: Vec<String>,
}

#[cfg(test)]
impl FittedText {
    /// Every line at its size at most `room` pixels long.
    pub(crate) fn fits(&self, room: u32) -> bool {
        self.lines
            .iter()
            .all(|l| text_size(l, self.font).unwrap().0 <= room)
    }
}

/// A text is shrunk down to this share of its size on one line (or on as few lines as it
/// may take) before it is broken into more lines.
const SHRINK_BEFORE_BREAK: f64 = 0.8;
/// The smallest share of its size a fitted text is set at; past it, its lines are cut short.
const MIN_TEXT_SCALE: f64 = 0.6;
/// Space between the lines of a fitted text, in pixels.
const LINE_GAP: u32 = 2;

/// Height of one line of a fitted text at `font`, with the gap to the next.
pub(crate) fn line_height(font: f64) -> Result<u32, FigureError> {
    Ok(text_size("Hg", font)?.1 + LINE_GAP)
}

impl FittedText {
    /// Space the lines take across their reading direction (0 with no line).
    pub fn depth(&self) -> Result<u32, FigureError> {
        if self.lines.is_empty() {
            return Ok(0);
        }
        Ok(self.lines.len() as u32 * line_height(self.font)?)
    }

    /// The width of the widest line.
    fn width(&self) -> Result<u32, FigureError> {
        let mut w = 0;
        for l in &self.lines {
            w = w.max(text_size(l, self.font)?.0);
        }
        Ok(w)
    }
}

/// Sets `text` to be at most `room` pixels long: at `size` on one line if it fits; else on
/// the fewest lines (up to `max_lines`, broken at spaces) that need it shrunk by no more than
/// [`SHRINK_BEFORE_BREAK`]; else on `max_lines` lines as large as fits, but not under
/// [`MIN_TEXT_SCALE`] of `size`, where lines still too long are cut short with "…".
pub(crate) fn fit_text(
    text: &str,
    size: f64,
    room: u32,
    max_lines: usize,
) -> Result<FittedText, FigureError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(FittedText {
            font: size,
            lines: Vec::new(),
        });
    }
    let room = room.max(1);
    let mut fitted = break_into_lines(&Words::new(text, size, &[])?, size, room, max_lines)?;
    if fitted.font >= size * SHRINK_BEFORE_BREAK {
        return Ok(fitted);
    }
    fitted.font = fitted.font.max(size * MIN_TEXT_SCALE);
    for line in &mut fitted.lines {
        *line = ellipsize(line, fitted.font, f64::from(room))?;
    }
    Ok(fitted)
}

/// `words` on the fewest lines (up to `max_lines`) that need them shrunk by no more than
/// [`SHRINK_BEFORE_BREAK`] to be at most `room` pixels long, at the largest size up to `size`
/// that fits; else on `max_lines` lines at the size that fits, however small (nothing cut).
fn break_into_lines(
    words: &Words,
    size: f64,
    room: u32,
    max_lines: usize,
) -> Result<FittedText, FigureError> {
    let mut fitted = FittedText {
        font: size,
        lines: Vec::new(),
    };
    for n in 1..=max_lines.max(1) {
        fitted.lines = words.lines(n);
        fitted.font = size;
        let widest = f64::from(fitted.width()?.max(1));
        fitted.font = size.min(size * f64::from(room) / widest);
        if fitted.font >= size * SHRINK_BEFORE_BREAK {
            break;
        }
    }
    Ok(fitted)
}

/// The words of a text and their widths at one size, to break it into lines without laying
/// out every candidate line. A dash standing alone (" — ", before a panel's value) stays with
/// the word before it, so that no line starts with it.
struct Words {
    words: Vec<String>,
    widths: Vec<u32>,
    /// Whether a space follows each word (not where a word was split after a joiner).
    spaced: Vec<bool>,
    space: u32,
}

impl Words {
    /// The words of `text` between spaces, each also split after every one of `joiners` in
    /// it (the joiner ends its piece, so a line broken there ends with it).
    fn new(text: &str, size: f64, joiners: &[char]) -> Result<Self, FigureError> {
        let mut words: Vec<String> = Vec::new();
        let mut spaced = Vec::new();
        for word in text.split_whitespace() {
            match words.last_mut() {
                Some(last) if word == "—" => {
                    last.push(' ');
                    last.push_str(word);
                }
                _ => {
                    for piece in word.split_inclusive(joiners) {
                        words.push(piece.to_string());
                        spaced.push(false);
                    }
                    if let Some(last) = spaced.last_mut() {
                        *last = true;
                    }
                }
            }
        }
        let mut widths = Vec::with_capacity(words.len());
        for w in &words {
            widths.push(text_size(w, size)?.0);
        }
        Ok(Words {
            words,
            widths,
            spaced,
            space: text_size(" ", size)?.0,
        })
    }

    /// Width between word `i - 1` and word `i`: a space, or nothing after a joiner.
    fn gap_before(&self, i: usize) -> u32 {
        if self.spaced[i - 1] { self.space } else { 0 }
    }

    /// Words `from..to` as one line.
    fn line(&self, from: usize, to: usize) -> String {
        let mut line = String::new();
        for i in from..to {
            if i > from && self.spaced[i - 1] {
                line.push(' ');
            }
            line.push_str(&self.words[i]);
        }
        line
    }

    /// The words in at most `n` lines whose widest is as narrow as filling lines word by word
    /// allows. Widths are the words' own plus the space between two (kerning across a break
    /// point is left out, so a line may measure a pixel or two off: the fitted size is taken
    /// from the lines as laid out).
    fn lines(&self, n: usize) -> Vec<String> {
        if n <= 1 || self.words.len() <= 1 {
            return vec![self.line(0, self.words.len())];
        }
        // Where each line starts, filling lines word by word, each at most `limit` pixels
        // wide (a single word may be wider).
        let starts = |limit: u32| -> Vec<usize> {
            let mut starts = vec![0];
            let mut width = self.widths[0];
            for (i, &w) in self.widths.iter().enumerate().skip(1) {
                if width + self.gap_before(i) + w <= limit {
                    width += self.gap_before(i) + w;
                } else {
                    starts.push(i);
                    width = w;
                }
            }
            starts
        };
        // The narrowest limit that still needs no more than `n` lines.
        let gaps: u32 = (1..self.words.len()).map(|i| self.gap_before(i)).sum();
        let total = self.widths.iter().sum::<u32>() + gaps;
        let (mut lo, mut hi) = (0, total);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if starts(mid).len() <= n {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let starts = starts(hi);
        let ends = starts.iter().skip(1).copied().chain([self.words.len()]);
        starts
            .iter()
            .zip(ends)
            .map(|(&a, b)| self.line(a, b))
            .collect()
    }
}

/// Lines a panel title may take.
const TITLE_LINES: usize = 2;
/// Lines the description of the x axis may take (each costs the plot a line's height).
const X_DESC_LINES: usize = 2;
/// Lines the description of a vertical axis may take (they run beside the plot).
const VERTICAL_DESC_LINES: usize = 3;
/// Space above and below a panel's title, in pixels.
pub(crate) const TITLE_PAD: u32 = 5;
/// Space between a vertical axis description and the tick labels, in pixels.
const VERTICAL_DESC_GAP: u32 = 10;

/// A panel's title and axis descriptions, each fitted to the room the panel leaves it: the
/// title to the width between the chart's margins, the x description to three quarters of
/// the panel's width, the y description to the plot's height.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PanelText {
    pub title: FittedText,
    pub x_desc: FittedText,
    pub y_desc: FittedText,
    /// Height of the band the title takes above the chart (0 without a title).
    pub title_height: u32,
    /// Height of the area below a plot with numeric x ticks: [`X_LABEL_AREA`], and a line
    /// more for each further line of the x description.
    pub numeric_x_label_area: u32,
}

impl PanelText {
    /// Fits the texts of a panel in a row whose titles take `title_band` pixels
    /// ([`title_band`] of the row's tallest), the y description to a plot with numeric x
    /// ticks below it (a panel with more below its plot fits it again: [`Self::fit_y_desc`]).
    pub fn new(
        title: &str,
        x_label: &str,
        y_label: &str,
        title_band: u32,
    ) -> Result<Self, FigureError> {
        let title = fit_title(title)?;
        let title_height = title_band.max(title_height(&title)?);
        let x_desc = fit_text(x_label, AXIS_DESC_FONT, PANEL_WIDTH * 3 / 4, X_DESC_LINES)?;
        let extra_lines = x_desc.lines.len().saturating_sub(1) as u32;
        let mut text = PanelText {
            title,
            numeric_x_label_area: X_LABEL_AREA + extra_lines * line_height(x_desc.font)?,
            x_desc,
            y_desc: FittedText {
                font: AXIS_DESC_FONT,
                lines: Vec::new(),
            },
            title_height,
        };
        text.fit_y_desc(y_label, text.numeric_x_label_area)?;
        Ok(text)
    }

    /// Height of the plot when the area below it is `x_label_area` pixels high.
    pub fn plot_height(&self, x_label_area: u32) -> u32 {
        PANEL_HEIGHT.saturating_sub(2 * PANEL_MARGIN + self.title_height + x_label_area)
    }

    /// Fits the y description again, to the plot left by an `x_label_area` high area below.
    pub fn fit_y_desc(&mut self, y_label: &str, x_label_area: u32) -> Result<(), FigureError> {
        self.y_desc = fit_vertical(y_label, self.plot_height(x_label_area))?;
        Ok(())
    }

    /// Width the y description takes left of the tick labels (0 without one).
    pub fn y_desc_width(&self) -> Result<u32, FigureError> {
        vertical_desc_width(&self.y_desc)
    }
}

/// A panel's title fitted to the width between the chart's margins, in up to two lines.
fn fit_title(title: &str) -> Result<FittedText, FigureError> {
    fit_text(title, PANEL_TITLE_FONT, PANEL_TITLE_ROOM, TITLE_LINES)
}

/// Height of the band a fitted panel title takes above the chart (0 without a title).
pub(crate) fn title_height(title: &FittedText) -> Result<u32, FigureError> {
    Ok(match title.depth()? {
        0 => 0,
        depth => depth + 2 * TITLE_PAD,
    })
}

/// Height of the band a panel's title takes; a row of panels gives every panel its tallest,
/// so that the plots of a row line up.
pub(crate) fn title_band(title: &str) -> Result<u32, FigureError> {
    title_height(&fit_title(title)?)
}

/// A vertical description (along a plot `length` pixels high), in up to three lines.
pub(crate) fn fit_vertical(text: &str, length: u32) -> Result<FittedText, FigureError> {
    fit_text(
        text,
        AXIS_DESC_FONT,
        length.saturating_sub(8),
        VERTICAL_DESC_LINES,
    )
}

/// Space for a (rotated) vertical description beside a plot, 0 when it is empty.
pub(crate) fn vertical_desc_width(desc: &FittedText) -> Result<u32, FigureError> {
    Ok(match desc.depth()? {
        0 => 0,
        depth => depth + VERTICAL_DESC_GAP,
    })
}

/// Width of the area left of a plot with numeric y ticks: widest tick label, gap,
/// rotated axis description (as the line charts have it).
pub(crate) fn y_label_area(y: &Axis, text: &PanelText) -> Result<u32, FigureError> {
    let mut widest = 0;
    for t in y.ticks(MAX_Y_TICKS) {
        widest = widest.max(text_size(&format_tick(t), TICK_FONT)?.0);
    }
    Ok(widest + TICK_LABEL_GAP + text.y_desc_width()? + 4)
}

/// A linear value axis that contains 0 and every value of `values`: from 0 when
/// nothing is negative, to 0 when nothing is positive, padded by 5% away from 0.
pub(crate) fn zero_based_axis(values: impl Iterator<Item = f64>) -> Axis {
    let (low, high) = min_max(values);
    let (low, high) = (low.min(0.0), high.max(0.0));
    let (lo, hi) = if high <= low {
        (0.0, 1.0)
    } else if low >= 0.0 {
        (0.0, high * 1.05)
    } else if high <= 0.0 {
        (low * 1.05, 0.0)
    } else {
        let pad = 0.05 * (high - low);
        (low - pad, high + pad)
    };
    // A labelled tick below zero: when there is none, extend the negative side to
    // the next multiple of the tick step.
    let ticks = linear_ticks(lo, hi, MAX_Y_TICKS);
    let lo = match ticks[..] {
        [a, b, ..] if lo < 0.0 && a >= 0.0 => lo.min(((lo / (b - a)).floor()) * (b - a)),
        _ => lo,
    };
    Axis {
        lo,
        hi,
        log: false,
        fixed: None,
    }
}

/// How a row of category labels is set: font size, horizontal or vertical (reading
/// bottom to top), and the height it takes below the axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LabelFit {
    pub font: f64,
    pub vertical: bool,
    pub extent: u32,
}

/// Category labels as set: how, and each label's lines (one unless broken; not yet cut
/// short, which is left to the caller).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FittedLabels {
    pub fit: LabelFit,
    pub lines: Vec<Vec<String>>,
}

/// Lines a category label may be broken into rather than turned vertical.
const LABEL_LINES: usize = 3;
/// Where a category label may be broken besides its spaces: after each of these, which stays
/// at the end of its line ("qwen2.5-1.5b-instruct+" / "qwen2.5-7b-instruct").
const LABEL_JOINERS: [char; 3] = ['+', '/', ','];

/// Fits category labels into slots of `slot` pixels along a horizontal axis: at
/// `base` size if they fit, else smaller (down to 70%), else (if `may_turn`) broken into up
/// to [`LABEL_LINES`] horizontal lines at a size no smaller than they would take turned
/// vertical, else vertical, else smaller still (down to half).
pub(crate) fn fit_labels(
    labels: &[&str],
    slot: f64,
    base: f64,
    may_turn: bool,
) -> Result<FittedLabels, FigureError> {
    let widest = |size: f64| -> Result<u32, FigureError> {
        let mut w = 0;
        for l in labels {
            w = w.max(text_size(l, size)?.0);
        }
        Ok(w)
    };
    let one_line = |fit: LabelFit| FittedLabels {
        fit,
        lines: labels.iter().map(|l| vec![l.to_string()]).collect(),
    };
    let room = (slot - 6.0).max(1.0);
    let w = f64::from(widest(base)?.max(1));
    let height = |size: f64| text_size("Hg", size).map(|s| s.1);
    if w <= room {
        return Ok(one_line(LabelFit {
            font: base,
            vertical: false,
            extent: height(base)?,
        }));
    }
    let shrunk = base * room / w;
    if shrunk >= base * 0.7 || !may_turn {
        let font = shrunk.max(base * 0.5);
        return Ok(one_line(LabelFit {
            font,
            vertical: false,
            extent: height(font)?,
        }));
    }
    // Vertical: the text height must fit the slot, the length is capped.
    let mut font = base;
    let h = f64::from(height(font)?);
    if h > room {
        font = (font * room / h).max(base * 0.5);
    }
    let long = f64::from(widest(font)?);
    if long > MAX_VERTICAL_LABEL {
        font = (font * MAX_VERTICAL_LABEL / long).max(base * 0.5);
    }
    let broken = break_labels(labels, base, room as u32)?;
    if broken.fit.font >= font {
        return Ok(broken);
    }
    Ok(one_line(LabelFit {
        font,
        vertical: true,
        extent: widest(font)?,
    }))
}

/// Category labels each broken into up to [`LABEL_LINES`] horizontal lines `room` pixels
/// long (at spaces and after [`LABEL_JOINERS`]) as [`fit_text`] breaks a text, but never cut:
/// all set at the smallest size one of them needs.
fn break_labels(labels: &[&str], base: f64, room: u32) -> Result<FittedLabels, FigureError> {
    let mut font = base;
    let mut lines = Vec::with_capacity(labels.len());
    for label in labels {
        let words = Words::new(label, base, &LABEL_JOINERS)?;
        let fitted = break_into_lines(&words, base, room.max(1), LABEL_LINES)?;
        font = font.min(fitted.font);
        lines.push(fitted.lines);
    }
    let most = lines.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
    let extent = text_size("Hg", font)?.1 + (most - 1) * line_height(font)?;
    Ok(FittedLabels {
        fit: LabelFit {
            font,
            vertical: false,
            extent,
        },
        lines,
    })
}

/// `text`, cut short with "…" so that it is at most `max_width` pixels wide at `size`.
pub(crate) fn ellipsize(text: &str, size: f64, max_width: f64) -> Result<String, FigureError> {
    if f64::from(text_size(text, size)?.0) <= max_width {
        return Ok(text.to_string());
    }
    let chars: Vec<char> = text.chars().collect();
    // Longest prefix that fits with the ellipsis (binary search; width grows with length).
    let (mut lo, mut hi) = (0, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let candidate: String = chars[..mid].iter().chain(['…'].iter()).collect();
        if f64::from(text_size(&candidate, size)?.0) <= max_width {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(chars[..lo].iter().chain(['…'].iter()).collect())
}

/// Widest a row label (heatmap, timeline) may be, in pixels.
pub(crate) const MAX_ROW_LABEL: f64 = PANEL_WIDTH as f64 / 4.0;

/// Longest extent of vertical category labels, in pixels.
pub(crate) const MAX_VERTICAL_LABEL: f64 = 150.0;

/// `size`, or smaller (down to half) so that `text` is at most `max_width` pixels wide.
pub(crate) fn fitted_size(text: &str, size: f64, max_width: u32) -> Result<f64, FigureError> {
    let width = text_size(text, size)?.0;
    if width <= max_width {
        return Ok(size);
    }
    Ok((size * f64::from(max_width) / f64::from(width)).max(size / 2.0))
}

pub(crate) fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealed::Sealed;
    use crate::{Figure, Series};

    fn line<'p, 'a>(plan: &'p ChartPlan<'a>) -> &'p PanelPlan<'a> {
        match plan {
            ChartPlan::Line(p) => p,
            _ => panic!("not a line chart"),
        }
    }

    fn s(label: &str) -> Series {
        Series {
            label: label.to_string(),
            points: vec![(1.0, 2.0), (2.0, 3.0)],
            y_err: None,
        }
    }

    #[test]
    fn a_long_panel_title_fits_between_the_charts_margins() {
        // CAPS's imbalance panel: the metric's label and the panel value.
        let title = "expert-load imbalance (max/mean per layer, mean over MoE steps) — bursty";
        let figure = Figure {
            title: String::new(),
            panels: vec![Panel {
                title: title.to_string(),
                series: vec![s("a")],
                ..Panel::default()
            }],
            columns: 1,
        };
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let fitted = &line(&plan.panels[0]).text.title;
        assert!(
            text_size(title, PANEL_TITLE_FONT).unwrap().0 > PANEL_TITLE_ROOM,
            "the title is long enough to be fitted"
        );
        assert_eq!(
            fitted.lines.join(" "),
            title,
            "broken at spaces, nothing cut"
        );
        for l in &fitted.lines {
            let width = text_size(l, fitted.font).unwrap().0;
            assert!(
                width <= PANEL_WIDTH - PANEL_MARGIN - PANEL_MARGIN_RIGHT,
                "title line {width} px in a {PANEL_WIDTH} px panel"
            );
        }
    }

    #[test]
    fn a_text_shrinks_a_little_then_breaks_then_shrinks_then_is_cut() {
        let short = fit_text("GPUs", 20.0, 200, 3).unwrap();
        assert_eq!(
            (short.font, short.lines.clone()),
            (20.0, vec!["GPUs".to_string()])
        );
        assert!(fit_text("  ", 20.0, 200, 3).unwrap().lines.is_empty());

        let text = "the earliest-finishing worker's wall, among workers that ran a session";
        let full = text_size(text, 20.0).unwrap().0;
        // A little too long: one line, a little smaller.
        let one = fit_text(text, 20.0, full * 9 / 10, 3).unwrap();
        assert_eq!(one.lines.len(), 1);
        assert!(one.font < 20.0 && one.font >= 20.0 * SHRINK_BEFORE_BREAK);
        assert!(one.fits(full * 9 / 10));
        // Half as long: two lines, every word kept, each line in the room.
        let two = fit_text(text, 20.0, full / 2 + 20, 3).unwrap();
        assert_eq!(two.lines.len(), 2, "{two:?}");
        assert_eq!(two.lines.join(" "), text);
        assert!(two.font >= 20.0 * SHRINK_BEFORE_BREAK && two.fits(full / 2 + 20));
        // A panel's value after a dash (study (a)'s title): the dash ends a line, never
        // starts one.
        let titled = "mean step duration: change vs linear (%) — \
                      0.88+1.0+1.0+1.0+1.0+1.0+1.0+1.0";
        let broken = fit_text(titled, PANEL_TITLE_FONT, PANEL_TITLE_ROOM, 2).unwrap();
        assert_eq!(broken.lines.len(), 2, "{broken:?}");
        assert!(
            broken.lines.iter().all(|l| !l.starts_with('—')),
            "{broken:?}"
        );
        assert_eq!(broken.lines.join(" "), titled);
        // A sixth as long, at most two lines: the smallest size, and the lines cut short.
        let cut = fit_text(text, 20.0, full / 6, 2).unwrap();
        assert_eq!(cut.font, 20.0 * MIN_TEXT_SCALE);
        assert_eq!(cut.lines.len(), 2);
        assert!(cut.lines.iter().all(|l| l.ends_with('…')), "{cut:?}");
        assert!(cut.fits(full / 6));
    }

    #[test]
    fn a_long_y_description_takes_lines_along_the_plot_and_the_label_area_holds_them() {
        let y_label = "slowest-to-fastest throughput gap, fraction of the fastest \
                       (experiment variability_at_scale only)";
        let figure = Figure {
            title: String::new(),
            panels: vec![Panel {
                title: "a title".to_string(),
                y_label: y_label.to_string(),
                x_label: "GPUs".to_string(),
                series: vec![s("a")],
                ..Panel::default()
            }],
            columns: 1,
        };
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let p = line(&plan.panels[0]);
        let plot_height = p.text.plot_height(X_LABEL_AREA);
        assert!(text_size(y_label, AXIS_DESC_FONT).unwrap().0 > plot_height);
        assert!(p.text.y_desc.lines.len() >= 2, "{:?}", p.text.y_desc);
        assert!(p.text.y_desc.fits(plot_height), "{:?}", p.text.y_desc);
        assert_eq!(p.text.y_desc.lines.join(" "), y_label);
        // The x description keeps its own size: a long y description does not shrink it.
        assert_eq!(p.text.x_desc.font, AXIS_DESC_FONT);
        let widest_tick =
            p.y.ticks(MAX_Y_TICKS)
                .iter()
                .map(|&t| text_size(&format_tick(t), TICK_FONT).unwrap().0)
                .max()
                .unwrap();
        assert!(p.y_label_area >= widest_tick + p.text.y_desc.depth().unwrap());
    }

    #[test]
    fn a_long_x_description_takes_a_second_line_and_the_area_below_the_plot_grows() {
        // Chimera's frontier: set on one line, it shrank to 60%.
        let x_label = "mean over workflows of end-to-end latency per output token \
                       (ms; workflows only)";
        let short = PanelText::new("", "GPUs", "", 0).unwrap();
        assert_eq!(short.numeric_x_label_area, X_LABEL_AREA);
        let long = PanelText::new("", x_label, "", 0).unwrap();
        assert_eq!(long.x_desc.lines.len(), 2, "{:?}", long.x_desc);
        assert_eq!(long.x_desc.lines.join(" "), x_label);
        assert!(long.x_desc.font >= AXIS_DESC_FONT * SHRINK_BEFORE_BREAK);
        assert!(long.x_desc.fits(PANEL_WIDTH * 3 / 4));
        assert_eq!(
            long.numeric_x_label_area,
            X_LABEL_AREA + line_height(long.x_desc.font).unwrap()
        );
    }

    #[test]
    fn the_panels_of_a_row_share_the_tallest_title_band() {
        let long = "workers' idle share of workers x the last worker's end: barrier waits \
                    and the tail (%; placement only) — gate threshold = 1.0";
        let panel = |title: &str| Panel {
            title: title.to_string(),
            series: vec![s("a")],
            ..Panel::default()
        };
        let figure = Figure {
            title: String::new(),
            panels: vec![panel("short"), panel(long), panel("short")],
            columns: 2,
        };
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let heights: Vec<u32> = plan
            .panels
            .iter()
            .map(|p| line(p).text.title_height)
            .collect();
        assert_eq!(line(&plan.panels[1]).text.title.lines.len(), 2);
        assert_eq!(heights[0], heights[1], "one row, one band");
        assert!(
            heights[2] < heights[0],
            "the next row has its own: {heights:?}"
        );
        assert_eq!(heights[2], title_band("short").unwrap());
    }

    #[test]
    fn the_legend_box_keeps_a_pad_right_of_its_title() {
        let figure = crate::ChartFigure {
            legend_title: Some("expert mapping".to_string()),
            ..crate::ChartFigure::new(
                String::new(),
                vec![crate::Chart::Line(Panel {
                    series: vec![s("a")],
                    ..Panel::default()
                })],
                1,
            )
        };
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let legend = plan.legend.unwrap();
        let title = text_size("expert mapping", LEGEND_FONT).unwrap().0;
        // The title starts a pad inside the box and must end a pad before its right side.
        assert!(legend.box_width() >= 2 * LEGEND_PAD + title);
    }

    #[test]
    fn a_long_caption_ends_a_margin_before_the_right_edge() {
        let mut figure = crate::ChartFigure::new(
            String::new(),
            vec![crate::Chart::Line(Panel {
                series: vec![s("a")],
                ..Panel::default()
            })],
            1,
        );
        let caption = "whiskers: 95% confidence interval of the mean over 5 seeds (Student t); \
                       out of memory, left out: 2 merged, 3 merged";
        figure.caption = Some(caption.to_string());
        let view = figure.view();
        let plan = plan(&view).unwrap();
        assert!(
            plan.caption_font < CAPTION_FONT,
            "the caption is long enough to be fitted"
        );
        let width = text_size(caption, plan.caption_font).unwrap().0;
        assert!(
            2 * PANEL_MARGIN + width <= plan.width - 2 * PANEL_MARGIN,
            "caption {width} px from x = {} in a {} px figure",
            2 * PANEL_MARGIN,
            plan.width
        );
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
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let (p0, p1) = (&line(&plan.panels[0]).styles, &line(&plan.panels[1]).styles);
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
        assert!(legend.entries.iter().all(|e| e.2 == Swatch::Line));
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
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let p = line(&plan.panels[0]);
        assert_eq!(p.y.lo, 0.0);
        assert!(p.y.hi > 110.0 && p.y.hi < 120.0, "{}", p.y.hi);
        assert!(p.x.lo < 10.0 && p.x.lo >= 0.0 && p.x.hi > 20.0);
        assert_eq!(p.x.fixed.as_deref(), Some(&[10.0, 20.0][..]));
    }

    #[test]
    fn flat_positive_data_get_an_axis_that_spans_them_not_zero() {
        let figure = Figure {
            title: String::new(),
            panels: vec![Panel {
                series: vec![Series {
                    label: "x".into(),
                    points: vec![(150.0, 90.6), (300.0, 91.2)],
                    y_err: Some(vec![0.2, 0.1]),
                }],
                ..Panel::default()
            }],
            columns: 1,
        };
        let view = figure.view();
        let plan = plan(&view).unwrap();
        let p = line(&plan.panels[0]);
        assert!(p.y.lo > 90.0 && p.y.lo < 90.4, "{:?}", p.y);
        assert!(p.y.hi > 91.3 && p.y.hi < 91.5, "{:?}", p.y);
    }

    #[test]
    fn zero_based_axis_contains_zero_and_a_negative_tick() {
        let a = zero_based_axis([3.0, 10.0].into_iter());
        assert_eq!((a.lo, a.hi), (0.0, 10.5));
        let a = zero_based_axis([-3.0, -1.0].into_iter());
        assert_eq!(a.hi, 0.0);
        assert!(a.lo <= -3.0);
        // -4.3 would have no tick below 0 with a step of 5: extended to -5.
        let a = zero_based_axis([-3.0, 25.0].into_iter());
        assert!(a.ticks(MAX_Y_TICKS).iter().any(|&t| t < 0.0), "{a:?}");
        assert!(a.lo >= -5.0 - 1e-9, "{a:?}");
        let a = zero_based_axis([0.0].into_iter());
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
    }

    #[test]
    fn labels_shrink_then_turn_then_get_cut() {
        let short = fit_labels(&["ILP"], 100.0, TICK_FONT, true).unwrap().fit;
        assert_eq!((short.font, short.vertical), (TICK_FONT, false));
        let turned = fit_labels(&["round-robin"], 40.0, TICK_FONT, true)
            .unwrap()
            .fit;
        assert!(turned.vertical && turned.extent > 40, "{turned:?}");
        let shrunk = fit_labels(&["round-robin"], 40.0, TICK_FONT, false)
            .unwrap()
            .fit;
        assert!(
            !shrunk.vertical && shrunk.font == TICK_FONT * 0.5,
            "{shrunk:?}"
        );
        assert_eq!(ellipsize("ILP", 20.0, 100.0).unwrap(), "ILP");
        let cut = ellipsize("hot-expert-replication", 20.0, 80.0).unwrap();
        assert!(cut.ends_with('…') && cut.len() < 22, "{cut}");
        assert!(text_size(&cut, 20.0).unwrap().0 <= 80);
        assert_eq!(ellipsize("abc", 20.0, 1.0).unwrap(), "…");
    }

    #[test]
    fn long_labels_break_into_lines_before_they_turn() {
        // Chimera's Kendall-distance model sets, in a 130 px slot: turned, they were cut at
        // 150 px in half-size type.
        let kendall = [
            "qwen2.5-1.5b-instruct+qwen2.5-7b-instruct",
            "qwen2.5-1.5b-instruct+qwen2.5-14b-instruct",
            "llama-3.2-3b-instruct+ministral-3-8b-instruct-2512",
            "qwen2.5-1.5b-instruct+qwen2.5-3b-instruct+qwen2.5-14b-instruct",
        ];
        let slot = 130.0;
        let broken = fit_labels(&kendall, slot, TICK_FONT, true).unwrap();
        assert!(!broken.fit.vertical, "{broken:?}");
        for (label, lines) in kendall.iter().zip(&broken.lines) {
            assert!((2..=3).contains(&lines.len()), "{lines:?}");
            assert_eq!(lines.concat(), *label, "broken after '+', nothing cut");
            assert!(lines[..lines.len() - 1].iter().all(|l| l.ends_with('+')));
            for l in lines {
                let width = text_size(l, broken.fit.font).unwrap().0;
                assert!(f64::from(width) <= slot - 4.0, "{l}: {width} px");
            }
        }
        assert_eq!(broken.lines[3].len(), 3);
        // No smaller than the labels turned vertical would be, and as deep as three lines.
        let turned_font = (TICK_FONT * MAX_VERTICAL_LABEL
            / f64::from(text_size(kendall[3], TICK_FONT).unwrap().0))
        .max(TICK_FONT * 0.5);
        assert!(broken.fit.font >= turned_font, "{broken:?}");
        let font = broken.fit.font;
        assert_eq!(
            broken.fit.extent,
            text_size("Hg", font).unwrap().1 + 2 * line_height(font).unwrap()
        );

        // Short labels stay on one line at full size.
        let short = fit_labels(&["ILP", "greedy", "round-robin"], 130.0, TICK_FONT, true).unwrap();
        assert_eq!(short.fit.font, TICK_FONT);
        assert!(short.lines.iter().all(|l| l.len() == 1), "{short:?}");
        // A label with no break point turns vertical.
        let unbroken = fit_labels(&["hot-expert-replication"], 40.0, TICK_FONT, true).unwrap();
        assert!(unbroken.fit.vertical, "{unbroken:?}");
        assert_eq!(unbroken.lines, [["hot-expert-replication"]]);
        // Broken at a space, the space is dropped; after a slash, the slash stays.
        let spaced = fit_labels(&["tokens per second / GPU"], 90.0, TICK_FONT, true).unwrap();
        assert!(!spaced.fit.vertical, "{spaced:?}");
        assert!(spaced.lines[0].len() >= 2, "{spaced:?}");
        assert!(
            spaced.lines[0]
                .iter()
                .all(|l| !l.starts_with(' ') && !l.ends_with(' ')),
            "{spaced:?}"
        );
    }
}
