//! Bar charts: grouped bars (with error bars, negative values allowed) and groups of
//! stacked bars. Both are planned into the same [`BarPlan`]: bars made of parts.

use plotters::coord::Shift;
use plotters::drawing::DrawingArea;
use plotters::element::{PathElement, Rectangle};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{BLACK, Color, RGBColor};
use plotters_backend::DrawingBackend;

use crate::axis::Axis;
use crate::draw::{Frame, draw_frame, drawing_error, label, to_area};
use crate::layout::{
    LabelFit, MAX_VERTICAL_LABEL, MAX_Y_TICKS, PANEL_MARGIN, PanelText, Styles, TICK_FONT,
    X_LABEL_AREA, ellipsize, fit_labels, line_height, y_label_area, zero_based_axis,
};
use crate::style::ErrorBarElement;
use crate::{FigureError, PANEL_WIDTH};

/// Grouped bars: one bar per series in every group, side by side.
///
/// For "reduction vs baseline per model (groups) and setup (bars)": `groups` are the
/// models, one [`BarSeries`] per setup. Values may be negative; bars then grow down
/// from a zero line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarPanel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the x axis, below the group labels (may be empty).
    pub x_label: String,
    /// Description of the y axis (may be empty).
    pub y_label: String,
    /// Group (category) labels along the x axis, left to right.
    pub groups: Vec<String>,
    /// The bars of every group, left to right within a group.
    pub series: Vec<BarSeries>,
}

/// One bar per group: a legend label, a value per group, optional error bars.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarSeries {
    /// Legend text; the same label has the same colour in every panel.
    pub label: String,
    /// One value per group (same length as `BarPanel::groups`).
    pub values: Vec<f64>,
    /// Half-width of an error bar per group (same length as `values`, non-negative);
    /// `None` for no error bars.
    pub y_err: Option<Vec<f64>>,
}

/// Groups of stacked bars: in every group one bar per entry of `bars`, each bar a
/// stack of `layers` (bottom to top).
///
/// For "end-to-end time = expert stage + aggregator, per dataset and policy": `groups`
/// are the datasets, `bars` the policies (labelled under each bar), and two layers,
/// "expert stage" and "aggregator" (coloured, in the legend).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StackedBarPanel {
    /// Title above the chart (may be empty).
    pub title: String,
    /// Description of the x axis, below the group labels (may be empty).
    pub x_label: String,
    /// Description of the y axis (may be empty).
    pub y_label: String,
    /// Group labels along the x axis, left to right.
    pub groups: Vec<String>,
    /// Labels of the bars within each group, left to right, written under every bar;
    /// all empty for no bar labels (e.g. one unlabelled bar per group).
    pub bars: Vec<String>,
    /// The parts of every bar, bottom to top.
    pub layers: Vec<StackLayer>,
}

/// One part of every stacked bar.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StackLayer {
    /// Legend text; the same label has the same colour in every panel.
    pub label: String,
    /// `values[group][bar]`, non-negative: `groups.len()` rows of `bars.len()` values.
    pub values: Vec<Vec<f64>>,
}

/// Fraction of a group's width taken by its bars.
const GROUP_FILL: f64 = 0.8;
/// Fraction of a bar slot left empty on each side of the bar.
const BAR_GAP: f64 = 0.04;
/// Right margin of a bar panel (no tick label reaches past the plot there).
const MARGIN_RIGHT: u32 = PANEL_MARGIN + 6;
/// Gap between the axis and the first row of category labels, and between rows.
const LABEL_GAP: u32 = 8;
/// Colour of error bars and of the zero line.
const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);

/// One bar: its x extent (data units, group `g` spans `g..g + 1`), its parts
/// `(bottom, top, colour)` and an optional error bar `(y, half-width)`.
pub(crate) struct Bar {
    x0: f64,
    x1: f64,
    parts: Vec<(f64, f64, RGBColor)>,
    err: Option<(f64, f64)>,
}

/// A validated, laid-out bar panel.
pub(crate) struct BarPlan {
    text: PanelText,
    x: Axis,
    y: Axis,
    y_label_area: u32,
    x_label_area: u32,
    /// Group labels (each in its lines) at group centres, and how they are set.
    groups: Vec<(f64, Vec<String>)>,
    group_fit: LabelFit,
    /// Bar labels (each in its lines) at bar centres (empty for none), and how they are set.
    bar_labels: Vec<(f64, Vec<String>)>,
    bar_fit: Option<LabelFit>,
    bars: Vec<Bar>,
}

fn empty(panel: usize, title: &str) -> FigureError {
    FigureError::EmptyPanel {
        panel,
        title: title.to_string(),
    }
}

fn check_len(
    panel: usize,
    title: &str,
    at: impl FnOnce() -> String,
    expected: usize,
    found: usize,
) -> Result<(), FigureError> {
    if expected == found {
        Ok(())
    } else {
        Err(FigureError::LengthMismatch {
            panel,
            panel_title: title.to_string(),
            at: at(),
            expected,
            found,
        })
    }
}

fn check_finite(
    panel: usize,
    title: &str,
    at: impl FnOnce() -> String,
    value: f64,
) -> Result<(), FigureError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(FigureError::NonFiniteValue {
            panel,
            panel_title: title.to_string(),
            at: at(),
            value,
        })
    }
}

fn check_non_negative(
    panel: usize,
    title: &str,
    at: impl FnOnce() -> String,
    value: f64,
    reason: &'static str,
) -> Result<(), FigureError> {
    if value >= 0.0 {
        Ok(())
    } else {
        Err(FigureError::InvalidValue {
            panel,
            panel_title: title.to_string(),
            at: at(),
            value,
            reason,
        })
    }
}

/// Checks a grouped bar panel: groups and series present, one value (and error) per
/// group, all finite, errors non-negative.
pub(crate) fn validate_grouped(index: usize, p: &BarPanel) -> Result<(), FigureError> {
    if p.groups.is_empty() || p.series.is_empty() {
        return Err(empty(index, &p.title));
    }
    let t = p.title.as_str();
    for (si, s) in p.series.iter().enumerate() {
        let name = || format!("series {si} ({:?})", s.label);
        check_len(
            index,
            t,
            || format!("{} values", name()),
            p.groups.len(),
            s.values.len(),
        )?;
        if let Some(errs) = &s.y_err {
            check_len(
                index,
                t,
                || format!("{} error bars", name()),
                p.groups.len(),
                errs.len(),
            )?;
        }
        for (g, &v) in s.values.iter().enumerate() {
            let at = || format!("{}, group {g} ({:?})", name(), p.groups[g]);
            check_finite(index, t, at, v)?;
            if let Some(errs) = &s.y_err {
                let at = || format!("{}, group {g} ({:?}) error bar", name(), p.groups[g]);
                check_finite(index, t, at, errs[g])?;
                check_non_negative(index, t, at, errs[g], "error-bar half-widths must be ≥ 0")?;
            }
        }
    }
    Ok(())
}

/// Checks a stacked bar panel: groups, bars and layers present, a
/// `groups x bars` matrix per layer, all values finite and non-negative.
pub(crate) fn validate_stacked(index: usize, p: &StackedBarPanel) -> Result<(), FigureError> {
    if p.groups.is_empty() || p.bars.is_empty() || p.layers.is_empty() {
        return Err(empty(index, &p.title));
    }
    let t = p.title.as_str();
    for (li, layer) in p.layers.iter().enumerate() {
        let name = || format!("layer {li} ({:?})", layer.label);
        check_len(
            index,
            t,
            || format!("{} values (one row per group)", name()),
            p.groups.len(),
            layer.values.len(),
        )?;
        for (g, row) in layer.values.iter().enumerate() {
            check_len(
                index,
                t,
                || {
                    format!(
                        "{}, group {g} ({:?}) values (one per bar)",
                        name(),
                        p.groups[g]
                    )
                },
                p.bars.len(),
                row.len(),
            )?;
            for (b, &v) in row.iter().enumerate() {
                let at = || {
                    format!(
                        "{}, group {g} ({:?}), bar {b} ({:?})",
                        name(),
                        p.groups[g],
                        p.bars[b]
                    )
                };
                check_finite(index, t, at, v)?;
                check_non_negative(index, t, at, v, "parts of stacked bars must be ≥ 0")?;
            }
        }
    }
    Ok(())
}

/// x extent of bar `b` of `n` in group `g`.
fn bar_span(g: usize, b: usize, n: usize) -> (f64, f64) {
    let slot = GROUP_FILL / n as f64;
    let left = g as f64 + (1.0 - GROUP_FILL) / 2.0 + b as f64 * slot;
    (left + BAR_GAP * slot, left + (1.0 - BAR_GAP) * slot)
}

struct Common<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    groups: &'a [String],
    /// Bars per group and their labels (all empty: none).
    per_group: usize,
    bar_names: Option<&'a [String]>,
    /// Height of the row's title band.
    title_band: u32,
}

/// The x axis's labels of a bar panel and the height of the area below the plot they take.
struct XLabels {
    groups: Vec<(f64, Vec<String>)>,
    group_fit: LabelFit,
    bar_labels: Vec<(f64, Vec<String>)>,
    bar_fit: Option<LabelFit>,
    x_label_area: u32,
}

/// How many times the y description and the x labels are fitted to each other at most: a y
/// description in more lines narrows the plot, which may turn the x labels, which lowers the
/// plot the y description runs along. They settle in two rounds in every figure drawn so far.
const FIT_ROUNDS: usize = 4;

fn plan_common<'a>(c: Common<'a>, y: Axis, bars: Vec<Bar>) -> Result<BarPlan, FigureError> {
    let mut text = PanelText::new(c.title, c.x_label, c.y_label, c.title_band)?;
    let mut y_area = y_label_area(&y, &text)?;
    let mut labels = x_labels(&c, &text, y_area)?;
    for _ in 0..FIT_ROUNDS {
        let before = text.y_desc.clone();
        text.fit_y_desc(c.y_label, labels.x_label_area)?;
        if text.y_desc == before {
            break;
        }
        y_area = y_label_area(&y, &text)?;
        labels = x_labels(&c, &text, y_area)?;
    }
    Ok(BarPlan {
        text,
        x: Axis {
            lo: 0.0,
            hi: c.groups.len() as f64,
            log: false,
            fixed: None,
        },
        y,
        y_label_area: y_area,
        x_label_area: labels.x_label_area,
        groups: labels.groups,
        group_fit: labels.group_fit,
        bar_labels: labels.bar_labels,
        bar_fit: labels.bar_fit,
        bars,
    })
}

/// Fits the group and bar labels to the plot left beside a `y_label_area` wide area.
fn x_labels(c: &Common<'_>, text: &PanelText, y_label_area: u32) -> Result<XLabels, FigureError> {
    let n_groups = c.groups.len();
    let plot_width =
        f64::from(PANEL_WIDTH.saturating_sub(PANEL_MARGIN + MARGIN_RIGHT + y_label_area)).max(40.0);
    let group_px = plot_width / n_groups as f64;
    let slot_px = group_px * GROUP_FILL / c.per_group as f64;

    // Labels too long even at the smallest size are cut short with "…".
    let limit = |fit: LabelFit, slot: f64| {
        if fit.vertical {
            MAX_VERTICAL_LABEL
        } else {
            slot - 2.0
        }
    };
    let mut bar_labels = Vec::new();
    let mut bar_fit = None;
    if let Some(names) = c.bar_names
        && names.iter().any(|n| !n.trim().is_empty())
    {
        let strs: Vec<&str> = names.iter().map(String::as_str).collect();
        let fitted = fit_labels(&strs, slot_px, TICK_FONT * 0.9, true)?;
        let fit = fitted.fit;
        for g in 0..n_groups {
            for (b, lines) in fitted.lines.iter().enumerate() {
                let (x0, x1) = bar_span(g, b, c.per_group);
                let lines = cut_lines(lines, fit.font, limit(fit, slot_px))?;
                bar_labels.push(((x0 + x1) / 2.0, lines));
            }
        }
        bar_fit = Some(LabelFit {
            extent: fit.extent.min(MAX_VERTICAL_LABEL as u32),
            ..fit
        });
    }
    let group_strs: Vec<&str> = c.groups.iter().map(String::as_str).collect();
    // Under bar labels, group labels stay horizontal (shrunk if need be).
    let fitted = fit_labels(&group_strs, group_px, TICK_FONT, bar_fit.is_none())?;
    let group_fit = LabelFit {
        extent: fitted.fit.extent.min(MAX_VERTICAL_LABEL as u32),
        ..fitted.fit
    };
    let mut groups = Vec::with_capacity(n_groups);
    for (g, lines) in fitted.lines.iter().enumerate() {
        let lines = cut_lines(lines, group_fit.font, limit(group_fit, group_px))?;
        groups.push((g as f64 + 0.5, lines));
    }

    let desc = match text.x_desc.depth()? {
        0 => 0,
        depth => LABEL_GAP + depth,
    };
    let bar_rows = bar_fit.map_or(0, |f| f.extent + LABEL_GAP);
    Ok(XLabels {
        groups,
        group_fit,
        bar_labels,
        bar_fit,
        x_label_area: (LABEL_GAP + bar_rows + group_fit.extent + desc + 6).max(X_LABEL_AREA),
    })
}

/// A label's lines, each cut short with "…" to be at most `max_width` pixels wide at `font`.
fn cut_lines(lines: &[String], font: f64, max_width: f64) -> Result<Vec<String>, FigureError> {
    lines
        .iter()
        .map(|line| ellipsize(line, font, max_width))
        .collect()
}

/// Lays out a validated grouped bar panel.
pub(crate) fn plan_grouped(
    p: &BarPanel,
    styles: &Styles<'_>,
    title_band: u32,
) -> Result<BarPlan, FigureError> {
    let n = p.series.len();
    let mut bars = Vec::with_capacity(n * p.groups.len());
    for g in 0..p.groups.len() {
        for (b, s) in p.series.iter().enumerate() {
            let (x0, x1) = bar_span(g, b, n);
            let v = s.values[g];
            let err = s.y_err.as_ref().map(|e| (v, e[g])).filter(|e| e.1 > 0.0);
            bars.push(Bar {
                x0,
                x1,
                parts: vec![(0.0, v, styles[s.label.as_str()].color)],
                err,
            });
        }
    }
    let y = zero_based_axis(p.series.iter().flat_map(|s| {
        s.values.iter().enumerate().flat_map(move |(g, &v)| {
            let e = s.y_err.as_ref().map_or(0.0, |e| e[g]);
            [v - e, v + e]
        })
    }));
    plan_common(
        Common {
            title: &p.title,
            x_label: &p.x_label,
            y_label: &p.y_label,
            groups: &p.groups,
            per_group: n,
            bar_names: None,
            title_band,
        },
        y,
        bars,
    )
}

/// Lays out a validated stacked bar panel.
pub(crate) fn plan_stacked(
    p: &StackedBarPanel,
    styles: &Styles<'_>,
    title_band: u32,
) -> Result<BarPlan, FigureError> {
    let n = p.bars.len();
    let mut bars = Vec::with_capacity(n * p.groups.len());
    let mut totals = Vec::with_capacity(bars.capacity());
    for g in 0..p.groups.len() {
        for b in 0..n {
            let (x0, x1) = bar_span(g, b, n);
            let mut base = 0.0;
            let mut parts = Vec::with_capacity(p.layers.len());
            for layer in &p.layers {
                let v = layer.values[g][b];
                parts.push((base, base + v, styles[layer.label.as_str()].color));
                base += v;
            }
            totals.push(base);
            bars.push(Bar {
                x0,
                x1,
                parts,
                err: None,
            });
        }
    }
    let y = zero_based_axis(totals.into_iter());
    plan_common(
        Common {
            title: &p.title,
            x_label: &p.x_label,
            y_label: &p.y_label,
            groups: &p.groups,
            per_group: n,
            bar_names: Some(&p.bars),
            title_band,
        },
        y,
        bars,
    )
}

/// Draws a bar panel into its cell.
pub(crate) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    plan: &BarPlan,
) -> Result<(), FigureError> {
    let mut chart = draw_frame(
        area,
        &Frame {
            text: &plan.text,
            x: plan.x.clone(),
            y: plan.y.clone(),
            x_label_area: plan.x_label_area,
            y_label_area: plan.y_label_area,
            margin_right: MARGIN_RIGHT,
            x_ticks: 0,
            y_ticks: MAX_Y_TICKS,
            x_grid: false,
            y_grid: true,
        },
    )?;
    let rects = plan.bars.iter().flat_map(|bar| {
        bar.parts
            .iter()
            .filter(|(lo, hi, _)| hi != lo)
            .map(|&(lo, hi, color)| Rectangle::new([(bar.x0, lo), (bar.x1, hi)], color.filled()))
    });
    chart.draw_series(rects).map_err(drawing_error)?;
    if plan.y.lo < 0.0 {
        let zero = PathElement::new(
            vec![(plan.x.lo, 0.0), (plan.x.hi, 0.0)],
            INK.stroke_width(1),
        );
        chart
            .draw_series(std::iter::once(zero))
            .map_err(drawing_error)?;
    }
    let errs = plan.bars.iter().filter_map(|bar| {
        let (y, e) = bar.err?;
        let x = (bar.x0 + bar.x1) / 2.0;
        let (lo, hi) = (y - e, y + e);
        Some(ErrorBarElement {
            ends: [(x, lo), (x, hi)],
            caps: [true, true],
            color: INK,
        })
    });
    chart.draw_series(errs).map_err(drawing_error)?;

    // Category labels below the axis: bar labels, then group labels.
    let bottom = to_area(area, &chart, (0.0, plan.y.lo)).1;
    let mut top = bottom + LABEL_GAP as i32;
    if let Some(fit) = plan.bar_fit {
        for (x, lines) in &plan.bar_labels {
            let px = to_area(area, &chart, (*x, plan.y.lo)).0;
            put(area, lines, (px, top), fit)?;
        }
        top += (fit.extent + LABEL_GAP) as i32;
        // Brackets under each group's bar labels tie them to the group label.
        let n = plan.bar_labels.len() / plan.groups.len().max(1);
        for g in 0..plan.groups.len() {
            let (x0, _) = bar_span(g, 0, n);
            let (_, x1) = bar_span(g, n - 1, n);
            let l = to_area(area, &chart, (x0, plan.y.lo)).0;
            let r = to_area(area, &chart, (x1, plan.y.lo)).0;
            let y = top - LABEL_GAP as i32 / 2;
            area.draw(&PathElement::new(
                vec![(l, y - 3), (l, y), (r, y), (r, y - 3)],
                BLACK.mix(0.45).stroke_width(1),
            ))
            .map_err(drawing_error)?;
        }
    }
    for (x, lines) in &plan.groups {
        let px = to_area(area, &chart, (*x, plan.y.lo)).0;
        put(area, lines, (px, top), plan.group_fit)?;
    }
    Ok(())
}

/// A category label's lines centred under `at` (the first line's top), horizontal or
/// vertical (one line).
fn put<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[String],
    at: (i32, i32),
    fit: LabelFit,
) -> Result<(), FigureError> {
    let pos = if fit.vertical {
        Pos::new(HPos::Right, VPos::Center)
    } else {
        Pos::new(HPos::Center, VPos::Top)
    };
    let step = line_height(fit.font)? as i32;
    for (i, line) in lines.iter().enumerate() {
        let at = (at.0, at.1 + i as i32 * step);
        label(area, line, at, fit.font, pos, fit.vertical, BLACK)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_y_description_fits_the_plot_the_broken_or_turned_group_labels_leave() {
        // Chimera's Kendall-distance panel: long group labels broken into lines after their
        // "+", or (with no break point) turned vertical, take height below the plot.
        let y_label = "length predictor's Kendall tau distance to the true remaining tokens, \
                       first 2,000 stages (workflows only)";
        let plan_with = |joiner: char| {
            let groups: Vec<String> = (0..4)
                .map(|i| format!("qwen2.5-1.5b-instruct{joiner}qwen2.5-{i}b-instruct"))
                .collect();
            let panel = BarPanel {
                title: "a title".to_string(),
                x_label: "models served".to_string(),
                y_label: y_label.to_string(),
                groups,
                series: ["noisy", "fcfs", "input_length"]
                    .iter()
                    .map(|l| BarSeries {
                        label: l.to_string(),
                        values: vec![0.1, 0.5, 0.4, 0.2],
                        y_err: None,
                    })
                    .collect(),
            };
            let mut styles = Styles::new();
            for s in &panel.series {
                styles.insert(&s.label, crate::style::SeriesStyle::nth(styles.len()));
            }
            plan_grouped(&panel, &styles, 0).unwrap()
        };
        let broken = plan_with('+');
        assert!(!broken.group_fit.vertical, "{:?}", broken.group_fit);
        assert!(broken.groups.iter().all(|(_, lines)| lines.len() == 2));
        let turned = plan_with('-');
        assert!(turned.group_fit.vertical, "{:?}", turned.group_fit);
        assert!(
            X_LABEL_AREA < broken.x_label_area && broken.x_label_area < turned.x_label_area,
            "the area below the plot grows by the second line, less than by turned labels: \
             {} and {}",
            broken.x_label_area,
            turned.x_label_area
        );
        for plan in [broken, turned] {
            let plot_height = plan.text.plot_height(plan.x_label_area);
            assert!(
                plan.text.y_desc.fits(plot_height.saturating_sub(8)),
                "{:?} along {plot_height} px",
                plan.text.y_desc
            );
            assert!(plan.y_label_area >= plan.text.y_desc_width().unwrap());
        }
    }
}
