//! The error type returned by every fallible function of this crate.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Why a figure could not be rendered or written.
///
/// Input problems are reported before anything is drawn or written, and name the
/// panel (index and title), the series (index and label) and the point involved.
#[derive(Debug, Error)]
pub enum FigureError {
    /// The figure has no panels.
    #[error("figure {title:?} has no panels")]
    EmptyFigure {
        /// The figure's title.
        title: String,
    },

    /// `Figure::columns` is 0.
    #[error("figure {title:?} has columns = 0; it needs at least one column")]
    ZeroColumns {
        /// The figure's title.
        title: String,
    },

    /// A panel has no series, or only series without points (line charts); no groups
    /// or no bars (bar charts); no rows or columns (heatmaps); no rows or no segments
    /// (timelines).
    #[error("panel {panel} ({title:?}) has no data points")]
    EmptyPanel {
        /// Index of the panel in `Figure::panels`.
        panel: usize,
        /// The panel's title.
        title: String,
    },

    /// An x, y or error-bar value is NaN or infinite.
    #[error(
        "panel {panel} ({panel_title:?}), series {series} ({label:?}), point {point}: \
         {field} is not finite ({value})"
    )]
    NonFinite {
        /// Index of the panel in `Figure::panels`.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Index of the series in `Panel::series`.
        series: usize,
        /// The series' label.
        label: String,
        /// Index of the point in `Series::points` (and `Series::y_err`).
        point: usize,
        /// Which value: `"x"`, `"y"` or `"y_err"`.
        field: &'static str,
        /// The offending value.
        value: f64,
    },

    /// `Series::y_err` has a different length than `Series::points`.
    #[error(
        "panel {panel} ({panel_title:?}), series {series} ({label:?}): \
         {errors} error-bar values for {points} points"
    )]
    ErrorBarCount {
        /// Index of the panel in `Figure::panels`.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Index of the series in `Panel::series`.
        series: usize,
        /// The series' label.
        label: String,
        /// Length of `Series::points`.
        points: usize,
        /// Length of `Series::y_err`.
        errors: usize,
    },

    /// An error-bar half-width is negative.
    #[error(
        "panel {panel} ({panel_title:?}), series {series} ({label:?}), point {point}: \
         negative error-bar half-width {value}"
    )]
    NegativeErrorBar {
        /// Index of the panel in `Figure::panels`.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Index of the series in `Panel::series`.
        series: usize,
        /// The series' label.
        label: String,
        /// Index of the point.
        point: usize,
        /// The offending half-width.
        value: f64,
    },

    /// A panel with `log_y` has a y value that is zero or negative.
    #[error(
        "panel {panel} ({panel_title:?}) has a log y axis but series {series} ({label:?}), \
         point {point} has y = {value}, which is not positive"
    )]
    NonPositiveLogValue {
        /// Index of the panel in `Figure::panels`.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Index of the series in `Panel::series`.
        series: usize,
        /// The series' label.
        label: String,
        /// Index of the point.
        point: usize,
        /// The offending y value.
        value: f64,
    },

    /// A value of a bar, heatmap or timeline panel is NaN or infinite; `at` names the
    /// series, group, row, column or segment.
    #[error("panel {panel} ({panel_title:?}), {at}: value is not finite ({value})")]
    NonFiniteValue {
        /// Index of the chart in the figure.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Where the value is, e.g. `series 1 ("fcfs"), group 2 ("Mixtral")`.
        at: String,
        /// The offending value.
        value: f64,
    },

    /// A list in a bar, heatmap or timeline panel has the wrong length (for example
    /// a bar series with a value count different from the group count).
    #[error("panel {panel} ({panel_title:?}), {at}: {found} entries where {expected} are needed")]
    LengthMismatch {
        /// Index of the chart in the figure.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Which list, e.g. `series 0 ("fcfs") values`.
        at: String,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },

    /// A finite value that is not allowed where it is: a negative error-bar half-width,
    /// a negative part of a stacked bar, a timeline segment that ends before it starts.
    #[error("panel {panel} ({panel_title:?}), {at}: {value} is invalid: {reason}")]
    InvalidValue {
        /// Index of the chart in the figure.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Where the value is.
        at: String,
        /// The offending value.
        value: f64,
        /// Why it is not allowed.
        reason: &'static str,
    },

    /// A timeline segment names a row that does not exist.
    #[error("panel {panel} ({panel_title:?}), {at}: row {row} does not exist ({rows} rows)")]
    RowOutOfRange {
        /// Index of the chart in the figure.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// The segment, e.g. `segment 4 ("load")`.
        at: String,
        /// The row index given.
        row: usize,
        /// The number of rows of the panel.
        rows: usize,
    },

    /// An explicit colour-scale or time range is not finite or not increasing.
    #[error("panel {panel} ({panel_title:?}): range {lo}..{hi} is not a finite, increasing range")]
    InvalidRange {
        /// Index of the chart in the figure.
        panel: usize,
        /// The panel's title.
        panel_title: String,
        /// Lower end.
        lo: f64,
        /// Upper end.
        hi: f64,
    },

    /// The output stem has no file name (for example `/` or `..`).
    #[error("invalid output path {}: it has no file name", path.display())]
    InvalidOutputPath {
        /// The stem passed to `render`.
        path: PathBuf,
    },

    /// Writing an output file failed; `path` is the file that was being written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The final output file (`<stem>.png` or `<stem>.svg`).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The embedded font could not be loaded or used.
    #[error("font error: {0}")]
    Font(String),

    /// The plotting backend reported an error.
    #[error("drawing failed: {0}")]
    Drawing(String),

    /// PNG encoding failed.
    #[error("PNG encoding failed: {0}")]
    Encode(String),
}
