//! expertsim figures: plotters charts rendered to PNG and SVG with an embedded font.
//!
//! A [`Figure`] is a grid of [`Panel`]s (line charts), each holding [`Series`] of
//! `(x, y)` points with optional 95%-CI error bars. A [`ChartFigure`] is the same
//! grid with panels of any kind ([`Chart`]): line charts, grouped bars
//! ([`BarPanel`]), stacked bars ([`StackedBarPanel`]), heatmaps ([`HeatmapPanel`])
//! and timelines ([`TimelinePanel`]), freely mixed. [`render`] writes either as
//! `<out_stem>.png` and `<out_stem>.svg`:
//!
//! ```no_run
//! use figures::{Figure, Panel, Series, render};
//!
//! let panel = |title: &str| Panel {
//!     title: title.to_string(),
//!     x_label: "arrival rate (req/s)".to_string(),
//!     y_label: "P99 latency (ms)".to_string(),
//!     series: vec![Series {
//!         label: "fcfs".to_string(),
//!         points: vec![(10.0, 120.0), (20.0, 180.0), (40.0, 420.0)],
//!         y_err: Some(vec![5.0, 9.0, 30.0]),
//!     }],
//!     log_y: false,
//! };
//! let figure = Figure {
//!     title: "P99 latency vs arrival rate".to_string(),
//!     panels: vec![panel("bursty"), panel("poisson")],
//!     columns: 2,
//! };
//! let written = render(&figure, std::path::Path::new("results/p99"))?;
//! assert_eq!(written.len(), 2); // results/p99.png, results/p99.svg
//! # Ok::<(), figures::FigureError>(())
//! ```
//!
//! Other chart kinds go into a [`ChartFigure`] (every panel type converts into a
//! [`Chart`] with `.into()`):
//!
//! ```no_run
//! use figures::{BarPanel, BarSeries, ChartFigure, Segment, TimelinePanel, render};
//!
//! let bars = BarPanel {
//!     title: "8 GPUs".to_string(),
//!     x_label: "model".to_string(),
//!     y_label: "latency reduction vs linear (%)".to_string(),
//!     groups: vec!["Mixtral-8x7B".to_string(), "OLMoE-1B-7B".to_string()],
//!     series: vec![BarSeries {
//!         label: "high variability".to_string(),
//!         values: vec![17.5, -4.8],
//!         y_err: Some(vec![2.9, 1.4]),
//!     }],
//! };
//! let timeline = TimelinePanel {
//!     title: "round-robin".to_string(),
//!     x_label: "time (s)".to_string(),
//!     rows: vec!["worker 0".to_string()],
//!     segments: vec![Segment {
//!         row: 0,
//!         start: 0.0,
//!         end: 1.2,
//!         kind: "load".to_string(),
//!         label: "E3".to_string(),
//!     }],
//!     ..TimelinePanel::default()
//! };
//! let figure = ChartFigure::new("GEM", vec![bars.into(), timeline.into()], 1)
//!     .with_color("idle", [0xC8, 0xC8, 0xC8]);
//! render(&figure, std::path::Path::new("results/gem"))?;
//! # Ok::<(), figures::FigureError>(())
//! ```
//!
//! # Layout
//!
//! * Panels fill a grid row by row, `min(columns, panels)` wide. Every panel cell is
//!   [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] pixels; a non-empty figure title adds a band
//!   on top, and the legend a column on the right. The PNG is that many pixels; the
//!   SVG has the same size in user units. [`canvas_size`] gives it in advance.
//! * One legend for the whole figure, in its own column right of the grid, so it
//!   never covers data. It lists each distinct series label once, in order of first
//!   appearance (panel by panel, series by series); it is left out when every label
//!   is empty. Its column is as wide as the longest label needs, and it wraps into
//!   more columns when the labels do not fit the grid's height.
//! * Series style follows the label: the n-th distinct label gets the n-th style in
//!   every panel, so the same label has the same look everywhere, and with the usual
//!   "same strategies in every panel" input the style is the series index. There are
//!   twelve colour-blind-friendly colours (Okabe–Ito plus Paul Tol's muted tones), each
//!   paired with its own marker (six filled shapes, four open shapes, a cross and a
//!   plus), so twelve series also stay apart in grayscale. Past twelve labels the
//!   colours repeat with shifted markers.
//! * Axes: x is padded by 5% on each side (not below 0 when all x are non-negative);
//!   with at most eight distinct x values whose labels fit, the ticks sit exactly on
//!   them (e.g. the arrival rates), otherwise on nice round numbers. y starts at 0
//!   when every value (including error-bar lower ends) is non-negative and is padded
//!   by 5% above; with `log_y` it is base-10 logarithmic, padded by 5% of its span in
//!   decades, with 1-2-5 or decade ticks and light minor grid lines. Error bars are
//!   `y ± y_err[i]`, clipped (without cap) at the axis end on log panels.
//! * Points are joined in the order given (sort them by x for "y vs x" charts).
//! * Titles and axis descriptions are fitted to their room instead of being clipped or
//!   spilling over: a panel title to the width between its chart's margins, a y
//!   description to the plot's height, an x description to three quarters of the
//!   panel's width, the figure title to the figure's width. A text too long is set up
//!   to 20% smaller on one line, else broken at spaces into more lines (two for a
//!   title or an x description, whose second line the area below the plot grows by;
//!   three for a y description, which runs beside the plot), as large as fits but not
//!   under 60% of its size; lines still too long are cut short with "…". The x and y
//!   descriptions are fitted apart, so a long y description leaves the x one its size.
//!   The panels of a row share their tallest title band, so that their plots line up.
//! * The caption under the grid is one line, set smaller (down to half size) when long.
//! * Text uses DejaVu Sans, embedded in the crate and registered with plotters'
//!   `ab_glyph` support, so rendering needs no system fonts. The SVG asks for
//!   `sans-serif`.
//!
//! # Other chart kinds
//!
//! They share the cell size, title, fonts, axis style and the one legend of the
//! line charts; a label (series, stack layer, segment kind) gets the same colour in
//! every panel of a figure, whatever the panel kind, and one legend entry (a line
//! with its marker if the label first appears in a line chart, else a filled box).
//! [`ChartFigure::colors`] pins colours for chosen labels; the others take the
//! palette in order of first appearance.
//!
//! * **Grouped bars** ([`BarPanel`]): in each group (x category) one bar per
//!   [`BarSeries`], side by side, over 80% of the group's width. The value axis
//!   always contains 0: it starts at 0 when nothing is negative; with negative
//!   values bars grow down from a dark zero line and the axis reaches at least one
//!   labelled tick below 0. Error bars (`value ± y_err`) are dark with caps. Group
//!   labels are set under the axis, smaller (down to 70%) when long, else vertical.
//! * **Stacked bars** ([`StackedBarPanel`]): in each group one bar per entry of
//!   `bars`, each a stack of the [`StackLayer`]s bottom to top (non-negative
//!   values). Bar labels go under each bar (vertical when they do not fit across),
//!   a bracket ties each group's bars to the group label below them.
//! * **Heatmaps** ([`HeatmapPanel`]): `values[row][column]` as cells, rows top to
//!   bottom, on the viridis scale (perceptually uniform, colour-blind safe), with a
//!   colorbar (ticks and `value_label`) right of the cells. Heatmaps without a
//!   `range` share one scale per figure (from 0, or the smallest value if negative,
//!   to the largest), so panels compare directly; values outside an explicit range
//!   get the end colours. Cells are separated by thin white lines when at least 8
//!   pixels; with `annotate`, values (three significant digits) are written in the
//!   cells when they fit, in white on dark cells. When labels do not fit, every
//!   n-th row or column is labelled.
//! * **Timelines** ([`TimelinePanel`]): one row per worker (top to bottom, every
//!   other row lightly shaded), [`Segment`]s from `start` to `end` coloured by
//!   `kind`, with their `label` inside when it fits. Timelines without a `range`
//!   share the time axis of the figure (from 0, or the earliest start, to the
//!   latest end plus 2%), so that policies stacked vertically (`columns: 1`) line
//!   up. Adjacent segments keep a one-pixel gap; a zero-length segment is one pixel.
//!
//! * **Scatter charts** ([`ScatterPanel`]): the line-chart layout, with each
//!   [`ScatterSeries`]' points as markers only and its `frontier` joined by a line in
//!   the series' style (for Pareto frontiers of operating points).
//!
//! [`render_png`] and [`render_svg`] give the file contents without writing
//! anything, and [`canvas_size`] the pixel size a figure will have.
//!
//! # Determinism and output
//!
//! The same input always gives byte-identical PNG and SVG files (no timestamps,
//! no system fonts, no hash-order dependence). Each file is written to a temporary
//! file in the destination directory and renamed into place, so readers never see
//! a half-written figure. The directory must already exist.
//!
//! # Errors
//!
//! [`render`] never panics on bad input; it returns a [`FigureError`]: no panels
//! ([`FigureError::EmptyFigure`]), `columns == 0` ([`FigureError::ZeroColumns`]), a
//! panel without points ([`FigureError::EmptyPanel`]), a NaN or infinite x, y or
//! error value ([`FigureError::NonFinite`], naming panel, series and point), an
//! error-bar vector of the wrong length or with a negative entry, a non-positive y on
//! a log panel, or an output file that cannot be written ([`FigureError::Io`], naming
//! the file). The other chart kinds report, naming the panel and the place (series,
//! group, bar, layer, row, column or segment, with their labels):
//! [`FigureError::EmptyPanel`] (no groups, bars, series, layers, rows, columns or
//! segments), [`FigureError::LengthMismatch`] (a value list that does not match its
//! labels), [`FigureError::NonFiniteValue`], [`FigureError::InvalidValue`] (negative
//! error bar, negative stacked part, segment ending before it starts),
//! [`FigureError::RowOutOfRange`] (a segment on a missing row) and
//! [`FigureError::InvalidRange`] (an explicit range not finite and increasing).

mod axis;
mod backend;
mod bar;
mod colormap;
mod draw;
mod error;
mod font;
mod heatmap;
mod layout;
mod output;
mod scatter;
mod style;
mod timeline;

use std::path::{Path, PathBuf};

use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};

pub use bar::{BarPanel, BarSeries, StackLayer, StackedBarPanel};
pub use error::FigureError;
pub use heatmap::HeatmapPanel;
pub use scatter::{ScatterPanel, ScatterSeries};
pub use timeline::{Segment, TimelinePanel};

/// Width in pixels of one panel cell.
pub const PANEL_WIDTH: u32 = 640;
/// Height in pixels of one panel cell.
pub const PANEL_HEIGHT: u32 = 480;

/// One line of a chart: labelled `(x, y)` points, optionally with error bars.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Legend text; series with the same label share one style and one legend entry.
    pub label: String,
    /// Points, joined by a line in this order.
    pub points: Vec<(f64, f64)>,
    /// Half-width of a 95% confidence interval per point (same length as `points`),
    /// drawn as error bars; `None` for no error bars.
    pub y_err: Option<Vec<f64>>,
}

/// One line chart: axes, title and series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Panel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the x axis (may be empty).
    pub x_label: String,
    /// Description of the y axis (may be empty).
    pub y_label: String,
    /// The lines of this chart.
    pub series: Vec<Series>,
    /// Logarithmic (base 10) y axis; every y must then be positive.
    pub log_y: bool,
}

/// A grid of line-chart panels with a title and one shared legend.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Title above the grid (may be empty, which leaves out the title band).
    pub title: String,
    /// Panels, filling the grid row by row.
    pub panels: Vec<Panel>,
    /// Panels per row (at least 1; more than `panels.len()` is treated as that).
    pub columns: usize,
}

/// One panel of a [`ChartFigure`]: a chart of any kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// A line chart (the panel of a [`Figure`]).
    Line(Panel),
    /// Grouped bars, optionally with error bars; values may be negative.
    Bars(BarPanel),
    /// Groups of stacked bars.
    StackedBars(StackedBarPanel),
    /// A matrix of values as coloured cells, with a colorbar.
    Heatmap(HeatmapPanel),
    /// A Gantt chart: rows of coloured, labelled segments over time.
    Timeline(TimelinePanel),
    /// Operating points as markers, each series' frontier as a line.
    Scatter(ScatterPanel),
}

impl Chart {
    /// The panel's title.
    pub fn title(&self) -> &str {
        layout::ChartRef::of(self).title()
    }
}

impl From<Panel> for Chart {
    fn from(panel: Panel) -> Self {
        Chart::Line(panel)
    }
}

impl From<BarPanel> for Chart {
    fn from(panel: BarPanel) -> Self {
        Chart::Bars(panel)
    }
}

impl From<StackedBarPanel> for Chart {
    fn from(panel: StackedBarPanel) -> Self {
        Chart::StackedBars(panel)
    }
}

impl From<HeatmapPanel> for Chart {
    fn from(panel: HeatmapPanel) -> Self {
        Chart::Heatmap(panel)
    }
}

impl From<ScatterPanel> for Chart {
    fn from(panel: ScatterPanel) -> Self {
        Chart::Scatter(panel)
    }
}

impl From<TimelinePanel> for Chart {
    fn from(panel: TimelinePanel) -> Self {
        Chart::Timeline(panel)
    }
}

/// A grid of panels of any kinds ([`Chart`]s) with a title and one shared legend:
/// the general form of [`Figure`], laid out and rendered the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartFigure {
    /// Title above the grid (may be empty, which leaves out the title band).
    pub title: String,
    /// Panels, filling the grid row by row.
    pub charts: Vec<Chart>,
    /// Panels per row (at least 1; more than `charts.len()` is treated as that).
    pub columns: usize,
    /// Fixed colours `(label, [r, g, b])` for some labels (e.g. a grey for an "idle"
    /// segment kind); every other label gets the next palette colour. The first
    /// entry for a label wins.
    pub colors: Vec<(String, [u8; 3])>,
    /// A heading over the legend's entries (what the series vary over, e.g. "selector").
    pub legend_title: Option<String>,
    /// One line under the grid (e.g. what the whiskers are).
    pub caption: Option<String>,
}

impl ChartFigure {
    /// A figure of `charts`, `columns` per row, with palette colours only.
    pub fn new(title: impl Into<String>, charts: Vec<Chart>, columns: usize) -> Self {
        ChartFigure {
            title: title.into(),
            charts,
            columns,
            colors: Vec::new(),
            legend_title: None,
            caption: None,
        }
    }

    /// The same figure with `title` over the legend's entries.
    pub fn with_legend_title(mut self, title: impl Into<String>) -> Self {
        self.legend_title = Some(title.into());
        self
    }

    /// The same figure with a one-line `caption` under the grid.
    pub fn with_caption(mut self, caption: impl Into<String>) -> Self {
        self.caption = Some(caption.into());
        self
    }

    /// The same figure with `color` for the series, layer or segment kind `label`.
    pub fn with_color(mut self, label: impl Into<String>, color: [u8; 3]) -> Self {
        self.colors.push((label.into(), color));
        self
    }
}

impl From<Figure> for ChartFigure {
    fn from(figure: Figure) -> Self {
        ChartFigure::new(
            figure.title,
            figure.panels.into_iter().map(Chart::Line).collect(),
            figure.columns,
        )
    }
}

mod sealed {
    /// Keeps [`crate::Renderable`] implemented by this crate's figure types only.
    pub trait Sealed {
        fn view(&self) -> crate::layout::View<'_>;
    }
}

/// A figure that [`render`], [`render_png`], [`render_svg`] and [`canvas_size`]
/// accept: [`Figure`] (line charts) or [`ChartFigure`] (any mix of chart kinds).
pub trait Renderable: sealed::Sealed {}

impl sealed::Sealed for Figure {
    fn view(&self) -> layout::View<'_> {
        layout::View {
            title: &self.title,
            charts: self.panels.iter().map(layout::ChartRef::Line).collect(),
            columns: self.columns,
            colors: &[],
            legend_title: None,
            caption: None,
        }
    }
}

impl Renderable for Figure {}

impl sealed::Sealed for ChartFigure {
    fn view(&self) -> layout::View<'_> {
        layout::View {
            title: &self.title,
            charts: self.charts.iter().map(layout::ChartRef::of).collect(),
            columns: self.columns,
            colors: &self.colors,
            legend_title: self.legend_title.as_deref(),
            caption: self.caption.as_deref(),
        }
    }
}

impl Renderable for ChartFigure {}

/// Renders `figure` and writes `<out_stem>.png` and `<out_stem>.svg` (the suffix is
/// appended, so a stem like `out/p99.v2` gives `out/p99.v2.png`). Returns the two
/// paths, PNG first. Nothing is written when the figure is invalid.
pub fn render<F: Renderable + ?Sized>(
    figure: &F,
    out_stem: &Path,
) -> Result<Vec<PathBuf>, FigureError> {
    let png_path = output::with_suffix(out_stem, "png")?;
    let svg_path = output::with_suffix(out_stem, "svg")?;
    let png = render_png(figure)?;
    let svg = render_svg(figure)?;
    output::write_atomic(&png_path, &png)?;
    output::write_atomic(&svg_path, svg.as_bytes())?;
    Ok(vec![png_path, svg_path])
}

/// Renders `figure` as PNG file contents (8-bit RGB).
pub fn render_png<F: Renderable + ?Sized>(figure: &F) -> Result<Vec<u8>, FigureError> {
    font::ensure_registered()?;
    let view = figure.view();
    let plan = layout::plan(&view)?;
    let (w, h) = (plan.width, plan.height);
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let backend = backend::Raster(BitMapBackend::with_buffer(&mut rgb, (w, h)));
        draw::draw_figure(&backend.into_drawing_area(), &plan)?;
    }
    output::encode_png(&rgb, w, h)
}

/// Renders `figure` as an SVG document.
pub fn render_svg<F: Renderable + ?Sized>(figure: &F) -> Result<String, FigureError> {
    font::ensure_registered()?;
    let view = figure.view();
    let plan = layout::plan(&view)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (plan.width, plan.height)).into_drawing_area();
        draw::draw_figure(&root, &plan)?;
    }
    Ok(svg)
}

/// The size in pixels `(width, height)` that `figure` renders at; validates it like
/// [`render`] does.
pub fn canvas_size<F: Renderable + ?Sized>(figure: &F) -> Result<(u32, u32), FigureError> {
    font::ensure_registered()?;
    let view = figure.view();
    let plan = layout::plan(&view)?;
    Ok((plan.width, plan.height))
}
