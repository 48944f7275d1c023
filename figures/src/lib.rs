//! expertsim figures: plotters charts rendered to PNG and SVG with an embedded font.
//!
//! A [`Figure`] is a grid of [`Panel`]s (line charts), each holding [`Series`] of
//! `(x, y)` points with optional 95%-CI error bars. [`render`] writes it as
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
//! * Titles and axis descriptions too long for their space are set in a smaller
//!   font (down to half size) instead of being clipped.
//! * Text uses DejaVu Sans, embedded in the crate and registered with plotters'
//!   `ab_glyph` support, so rendering needs no system fonts. The SVG asks for
//!   `sans-serif`.
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
//! the file).

mod axis;
mod backend;
mod draw;
mod error;
mod font;
mod layout;
mod output;
mod style;

use std::path::{Path, PathBuf};

use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};

pub use error::FigureError;

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

/// One chart: axes, title and series.
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

/// A grid of panels with a title and one shared legend.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Title above the grid (may be empty, which leaves out the title band).
    pub title: String,
    /// Panels, filling the grid row by row.
    pub panels: Vec<Panel>,
    /// Panels per row (at least 1; more than `panels.len()` is treated as that).
    pub columns: usize,
}

/// Renders `figure` and writes `<out_stem>.png` and `<out_stem>.svg` (the suffix is
/// appended, so a stem like `out/p99.v2` gives `out/p99.v2.png`). Returns the two
/// paths, PNG first. Nothing is written when the figure is invalid.
pub fn render(figure: &Figure, out_stem: &Path) -> Result<Vec<PathBuf>, FigureError> {
    let png_path = output::with_suffix(out_stem, "png")?;
    let svg_path = output::with_suffix(out_stem, "svg")?;
    let png = render_png(figure)?;
    let svg = render_svg(figure)?;
    output::write_atomic(&png_path, &png)?;
    output::write_atomic(&svg_path, svg.as_bytes())?;
    Ok(vec![png_path, svg_path])
}

/// Renders `figure` as PNG file contents (8-bit RGB).
pub fn render_png(figure: &Figure) -> Result<Vec<u8>, FigureError> {
    font::ensure_registered()?;
    let plan = layout::plan(figure)?;
    let (w, h) = (plan.width, plan.height);
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let backend = backend::Raster(BitMapBackend::with_buffer(&mut rgb, (w, h)));
        draw::draw_figure(&backend.into_drawing_area(), &plan)?;
    }
    output::encode_png(&rgb, w, h)
}

/// Renders `figure` as an SVG document.
pub fn render_svg(figure: &Figure) -> Result<String, FigureError> {
    font::ensure_registered()?;
    let plan = layout::plan(figure)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (plan.width, plan.height)).into_drawing_area();
        draw::draw_figure(&root, &plan)?;
    }
    Ok(svg)
}

/// The size in pixels `(width, height)` that `figure` renders at; validates it like
/// [`render`] does.
pub fn canvas_size(figure: &Figure) -> Result<(u32, u32), FigureError> {
    font::ensure_registered()?;
    let plan = layout::plan(figure)?;
    Ok((plan.width, plan.height))
}
