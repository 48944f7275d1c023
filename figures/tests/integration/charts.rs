//! End-to-end tests of the bar, stacked-bar, heatmap and timeline panels: sizes,
//! colours, SVG text, determinism, mixing with line charts, and input errors.

use std::collections::BTreeSet;

use figures::{
    BarPanel, BarSeries, Chart, ChartFigure, Figure, FigureError, HeatmapPanel, PANEL_HEIGHT,
    PANEL_WIDTH, Panel, Segment, Series, StackLayer, StackedBarPanel, TimelinePanel, canvas_size,
    render, render_png, render_svg,
};

const BLUE: (u8, u8, u8) = (0x00, 0x72, 0xB2);
const ORANGE: (u8, u8, u8) = (0xE6, 0x9F, 0x00);
const GREEN: (u8, u8, u8) = (0x00, 0x9E, 0x73);
const VIRIDIS_LOW: (u8, u8, u8) = (0x44, 0x01, 0x54);
const VIRIDIS_HIGH: (u8, u8, u8) = (0xFD, 0xE7, 0x25);

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn bars() -> BarPanel {
    BarPanel {
        title: "8 GPUs".to_string(),
        x_label: "model".to_string(),
        y_label: "latency reduction (%)".to_string(),
        groups: strings(&["Mixtral", "DeepSeek", "Qwen"]),
        series: vec![
            BarSeries {
                label: "low variability".to_string(),
                values: vec![4.0, -2.5, 1.0],
                y_err: Some(vec![1.0, 0.5, 0.0]),
            },
            BarSeries {
                label: "high variability".to_string(),
                values: vec![17.5, 13.9, 22.6],
                y_err: None,
            },
        ],
    }
}

fn stacked() -> StackedBarPanel {
    StackedBarPanel {
        title: "end-to-end time".to_string(),
        x_label: "dataset".to_string(),
        y_label: "time (s)".to_string(),
        groups: strings(&["ShareGPT", "Alpaca"]),
        bars: strings(&["round-robin", "ILP"]),
        layers: vec![
            StackLayer {
                label: "expert stage".to_string(),
                values: vec![vec![41.0, 29.8], vec![28.4, 21.7]],
            },
            StackLayer {
                label: "aggregator".to_string(),
                values: vec![vec![6.2, 7.4], vec![4.0, 4.9]],
            },
        ],
    }
}

fn heatmap(title: &str, scale: f64) -> HeatmapPanel {
    HeatmapPanel {
        title: title.to_string(),
        x_label: "slot".to_string(),
        y_label: "GPU".to_string(),
        row_labels: strings(&["GPU 0", "GPU 1", "GPU 2"]),
        column_labels: strings(&["s0", "s1", "s2", "s3"]),
        values: vec![
            vec![0.0, 10.0, 20.0, 30.0],
            vec![40.0, 50.0, 60.0, 70.0],
            vec![80.0, 90.0, 100.0, 110.0],
        ]
        .into_iter()
        .map(|r: Vec<f64>| r.into_iter().map(|v| v * scale).collect())
        .collect(),
        value_label: "tokens routed".to_string(),
        range: None,
        annotate: true,
    }
}

fn seg(row: usize, start: f64, end: f64, kind: &str, label: &str) -> Segment {
    Segment {
        row,
        start,
        end,
        kind: kind.to_string(),
        label: label.to_string(),
    }
}

fn timeline(title: &str, stretch: f64) -> TimelinePanel {
    TimelinePanel {
        title: title.to_string(),
        x_label: "time (s)".to_string(),
        y_label: "worker".to_string(),
        rows: strings(&["worker 0", "worker 1"]),
        segments: vec![
            seg(0, 0.0, 1.0, "load", "E0"),
            seg(0, 1.0, 4.0 * stretch, "generate", "E0"),
            seg(1, 0.0, 1.0, "load", "E1"),
            seg(1, 1.0, 2.0, "generate", "E1"),
            seg(1, 2.0, 2.01, "generate", "tiny-label-that-cannot-fit"),
            seg(1, 2.01, 4.0 * stretch, "idle", ""),
        ],
        range: None,
    }
}

fn decode(png: &[u8]) -> (u32, u32, Vec<(u8, u8, u8)>) {
    let mut reader = png::Decoder::new(png).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    let px = buf.chunks_exact(3).map(|p| (p[0], p[1], p[2])).collect();
    (info.width, info.height, px)
}

fn count(pixels: &[(u8, u8, u8)], colour: (u8, u8, u8)) -> usize {
    pixels.iter().filter(|&&p| p == colour).count()
}

/// The text content of every `<text>` element, trimmed and unescaped.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|chunk| {
            let start = chunk.find('>')? + 1;
            let end = chunk.find("</text>")?;
            Some(
                chunk[start..end]
                    .trim()
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

fn assert_texts(svg: &str, wanted: &[&str]) {
    let texts = svg_texts(svg);
    for w in wanted {
        assert!(texts.iter().any(|t| t == w), "{w:?} not in {texts:?}");
    }
}

fn one(chart: impl Into<Chart>) -> ChartFigure {
    ChartFigure::new("t", vec![chart.into()], 1)
}

#[test]
fn grouped_bars_with_negative_values_and_error_bars() {
    let figure = ChartFigure::new(
        "Latency reduction vs linear",
        vec![bars().into(), bars().into()],
        2,
    );
    let (w, h, px) = decode(&render_png(&figure).unwrap());
    assert_eq!((w, h), canvas_size(&figure).unwrap());
    assert_eq!(h, PANEL_HEIGHT + 52);
    assert!(w > 2 * PANEL_WIDTH && w < 2 * PANEL_WIDTH + 400, "{w}");
    // Two series colours as solid bars (and legend boxes).
    assert!(count(&px, BLUE) > 500, "blue bars");
    assert!(count(&px, ORANGE) > 5000, "orange bars");
    assert_eq!(count(&px, GREEN), 0, "only two series");
    let svg = render_svg(&figure).unwrap();
    assert_texts(
        &svg,
        &[
            "Mixtral",
            "DeepSeek",
            "Qwen",
            "low variability",
            "high variability",
            "model",
            "latency reduction (%)",
            "8 GPUs",
            "0",
            "-5",
            "20",
        ],
    );
    // Legend entries once each; group labels once per panel.
    let texts = svg_texts(&svg);
    assert_eq!(texts.iter().filter(|t| *t == "low variability").count(), 1);
    assert_eq!(texts.iter().filter(|t| *t == "Qwen").count(), 2);
    // Negative values: a zero line across the plot (dark, full opacity) besides the
    // axes; error bars in the same ink.
    assert!(
        svg.matches("stroke=\"#222222\"").count() >= 2 * (1 + 2 * 3),
        "{svg}"
    );
}

#[test]
fn stacked_bars_label_bars_and_groups() {
    let figure = one(stacked());
    let (w, h, px) = decode(&render_png(&figure).unwrap());
    assert_eq!((w, h), canvas_size(&figure).unwrap());
    assert!(count(&px, BLUE) > 5000 && count(&px, ORANGE) > 1000);
    let svg = render_svg(&figure).unwrap();
    assert_texts(
        &svg,
        &[
            "ShareGPT",
            "Alpaca",
            "round-robin",
            "ILP",
            "expert stage",
            "aggregator",
            "dataset",
            "time (s)",
        ],
    );
    // Each bar label under each group.
    let texts = svg_texts(&svg);
    assert_eq!(texts.iter().filter(|t| *t == "ILP").count(), 2);
    // y axis reaches the largest total (47.2), from 0.
    assert_texts(&svg, &["0", "40"]);
}

#[test]
fn heatmaps_share_a_colour_scale_and_annotate_cells() {
    let figure = ChartFigure::new(
        "Per-GPU expert load",
        vec![heatmap("linear", 1.0).into(), heatmap("GEM", 0.5).into()],
        2,
    );
    let (w, h, px) = decode(&render_png(&figure).unwrap());
    assert_eq!((w, h), (2 * PANEL_WIDTH, PANEL_HEIGHT + 52), "no legend");
    // Both ends of the scale appear: the 0 cells, and the 110 cell of the first panel
    // (the shared maximum); the second panel's maximum (55) is mid-scale.
    assert!(count(&px, VIRIDIS_LOW) > 1000, "low end");
    assert!(count(&px, VIRIDIS_HIGH) > 1000, "high end");
    let distinct: BTreeSet<_> = px.iter().collect();
    assert!(distinct.len() > 40, "a gradient colorbar");
    let svg = render_svg(&figure).unwrap();
    assert_texts(
        &svg,
        &[
            "GPU 0",
            "GPU 2",
            "s0",
            "s3",
            "slot",
            "GPU",
            "tokens routed",
            "110",
            "55",
            "linear",
            "GEM",
            "100",
        ],
    );

    // An explicit range is used as given: everything at the top colour.
    let mut hot = heatmap("fixed", 1.0);
    hot.range = Some((-10.0, -5.0));
    let (_, _, px) = decode(&render_png(&one(hot)).unwrap());
    assert!(count(&px, VIRIDIS_HIGH) > 20_000);

    // Without annotation, no cell values are written.
    let mut quiet = heatmap("quiet", 1.0);
    quiet.annotate = false;
    let texts = svg_texts(&render_svg(&one(quiet)).unwrap());
    assert!(!texts.iter().any(|t| t == "110"), "{texts:?}");
}

#[test]
fn dense_heatmap_thins_labels_and_skips_annotations() {
    let (rows, cols) = (64, 128);
    let panel = HeatmapPanel {
        title: "dense".to_string(),
        row_labels: (0..rows).map(|r| format!("GPU {r}")).collect(),
        column_labels: (0..cols).map(|c| format!("expert {c}")).collect(),
        values: (0..rows)
            .map(|r| (0..cols).map(|c| ((r * c) % 17) as f64 + 0.5).collect())
            .collect(),
        annotate: true,
        ..HeatmapPanel::default()
    };
    let svg = render_svg(&one(panel)).unwrap();
    let texts = svg_texts(&svg);
    let col_labels = texts.iter().filter(|t| t.starts_with("expert ")).count();
    let row_labels = texts.iter().filter(|t| t.starts_with("GPU ")).count();
    assert!(texts.iter().any(|t| t == "expert 0") && texts.iter().any(|t| t == "GPU 0"));
    assert!(
        (2..cols / 2).contains(&col_labels),
        "{col_labels} column labels"
    );
    assert!(
        (2..rows / 2).contains(&row_labels),
        "{row_labels} row labels"
    );
    assert!(
        !texts.iter().any(|t| t == "16.5"),
        "cells too small to annotate"
    );
}

#[test]
fn timelines_share_the_time_axis_and_colour_kinds() {
    let figure = ChartFigure::new(
        "Worker activity",
        vec![
            timeline("round-robin", 2.0).into(),
            timeline("ILP", 1.0).into(),
        ],
        1,
    )
    .with_color("idle", [0xC8, 0xC8, 0xC8]);
    let (w, h, px) = decode(&render_png(&figure).unwrap());
    assert_eq!(h, 2 * PANEL_HEIGHT + 52, "stacked vertically");
    assert!(w > PANEL_WIDTH);
    // load, generate: the first two palette colours; idle: the fixed grey, and the
    // palette does not skip a colour for it.
    assert!(count(&px, BLUE) > 1000 && count(&px, ORANGE) > 5000);
    assert!(count(&px, (0xC8, 0xC8, 0xC8)) > 1000);
    assert_eq!(count(&px, GREEN), 0);
    let svg = render_svg(&figure).unwrap();
    assert_texts(
        &svg,
        &[
            "round-robin",
            "ILP",
            "worker 0",
            "worker 1",
            "load",
            "generate",
            "idle",
            "E0",
            "E1",
            "time (s)",
            "worker",
            // The shared axis reaches 8 s (the longer panel) in both panels.
            "8",
        ],
    );
    let texts = svg_texts(&svg);
    assert_eq!(texts.iter().filter(|t| *t == "8").count(), 2, "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.starts_with("tiny-label")),
        "labels that do not fit their segment are left out"
    );
}

#[test]
fn mixed_figures_are_deterministic_and_line_figures_unchanged() {
    let mixed = || {
        ChartFigure::new(
            "mixed",
            vec![
                Chart::Line(Panel {
                    title: "line".to_string(),
                    series: vec![Series {
                        label: "low variability".to_string(),
                        points: vec![(1.0, 2.0), (2.0, 3.0)],
                        y_err: None,
                    }],
                    ..Panel::default()
                }),
                bars().into(),
                stacked().into(),
                heatmap("h", 1.0).into(),
                timeline("tl", 1.0).into(),
            ],
            2,
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let a = render(&mixed(), &dir.path().join("a")).unwrap();
    let b = render(&mixed(), &dir.path().join("b")).unwrap();
    for (x, y) in a.iter().zip(&b) {
        let (x, y) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        assert!(!x.is_empty() && x == y, "outputs differ");
    }
    let (w, h, _) = decode(&std::fs::read(&a[0]).unwrap());
    assert_eq!(h, 3 * PANEL_HEIGHT + 52);
    assert!(w > 2 * PANEL_WIDTH);
    // One legend entry for a label used by a line and by bars.
    let svg = std::fs::read_to_string(&a[1]).unwrap();
    let texts = svg_texts(&svg);
    assert_eq!(texts.iter().filter(|t| *t == "low variability").count(), 1);

    // A line-chart Figure renders exactly as its ChartFigure conversion.
    let figure = Figure {
        title: "lines".to_string(),
        panels: vec![Panel {
            title: "p".to_string(),
            series: vec![Series {
                label: "s".to_string(),
                points: vec![(1.0, 2.0), (3.0, 1.0)],
                y_err: Some(vec![0.1, 0.2]),
            }],
            ..Panel::default()
        }],
        columns: 1,
    };
    assert_eq!(
        render_png(&figure).unwrap(),
        render_png(&ChartFigure::from(figure.clone())).unwrap()
    );
    assert_eq!(
        render_svg(&figure).unwrap(),
        render_svg(&ChartFigure::from(figure)).unwrap()
    );
}

fn err(figure: &ChartFigure) -> FigureError {
    let dir = tempfile::tempdir().unwrap();
    let e = render(figure, &dir.path().join("x")).unwrap_err();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written on error"
    );
    e
}

/// A figure whose second panel is `bad`.
fn second(bad: impl Into<Chart>) -> ChartFigure {
    ChartFigure::new("t", vec![bars().into(), bad.into()], 2)
}

#[test]
fn invalid_bar_panels_are_errors() {
    assert!(matches!(
        err(&ChartFigure::new("none", vec![], 1)),
        FigureError::EmptyFigure { .. }
    ));
    assert!(matches!(
        err(&ChartFigure::new("zero", vec![bars().into()], 0)),
        FigureError::ZeroColumns { .. }
    ));
    let mut p = bars();
    p.groups.clear();
    let e = err(&second(p.clone()));
    assert!(e.to_string().contains("panel 1"), "{e}");
    assert!(matches!(
        err(&second(p)),
        FigureError::EmptyPanel { panel: 1, .. }
    ));
    let mut p = bars();
    p.series.clear();
    assert!(matches!(err(&second(p)), FigureError::EmptyPanel { .. }));

    let mut p = bars();
    p.series[1].values.pop();
    match err(&second(p)) {
        FigureError::LengthMismatch {
            panel: 1,
            at,
            expected: 3,
            found: 2,
            ..
        } => assert!(at.contains("high variability"), "{at}"),
        other => panic!("wrong error {other:?}"),
    }
    let mut p = bars();
    p.series[0].y_err = Some(vec![1.0]);
    assert!(matches!(
        err(&second(p)),
        FigureError::LengthMismatch {
            expected: 3,
            found: 1,
            ..
        }
    ));

    let mut p = bars();
    p.series[0].values[1] = f64::NAN;
    match err(&second(p)) {
        FigureError::NonFiniteValue {
            panel: 1,
            at,
            value,
            ..
        } => {
            assert!(value.is_nan());
            assert!(
                at.contains("DeepSeek") && at.contains("low variability"),
                "{at}"
            );
        }
        other => panic!("wrong error {other:?}"),
    }
    let mut p = bars();
    p.series[0].y_err = Some(vec![1.0, f64::INFINITY, 0.0]);
    assert!(matches!(
        err(&second(p)),
        FigureError::NonFiniteValue { .. }
    ));
    let mut p = bars();
    p.series[0].y_err = Some(vec![1.0, -0.5, 0.0]);
    assert!(matches!(
        err(&second(p)),
        FigureError::InvalidValue { value: -0.5, .. }
    ));

    let mut s = stacked();
    s.layers[1].values[1][0] = -1.0;
    match err(&second(s)) {
        FigureError::InvalidValue { at, value, .. } => {
            assert_eq!(value, -1.0);
            assert!(
                at.contains("aggregator") && at.contains("Alpaca") && at.contains("round-robin"),
                "{at}"
            );
        }
        other => panic!("wrong error {other:?}"),
    }
    let mut s = stacked();
    s.layers[0].values[0].push(3.0);
    assert!(matches!(
        err(&second(s)),
        FigureError::LengthMismatch {
            expected: 2,
            found: 3,
            ..
        }
    ));
    let mut s = stacked();
    s.layers[0].values.pop();
    assert!(matches!(
        err(&second(s)),
        FigureError::LengthMismatch { .. }
    ));
    let mut s = stacked();
    s.layers[0].values[0][0] = f64::NEG_INFINITY;
    assert!(matches!(
        err(&second(s)),
        FigureError::NonFiniteValue { .. }
    ));
    let mut s = stacked();
    s.bars.clear();
    assert!(matches!(err(&second(s)), FigureError::EmptyPanel { .. }));
}

#[test]
fn invalid_heatmaps_and_timelines_are_errors() {
    let mut h = heatmap("h", 1.0);
    h.values[2][3] = f64::NAN;
    match err(&second(h)) {
        FigureError::NonFiniteValue { panel: 1, at, .. } => {
            assert!(at.contains("GPU 2") && at.contains("s3"), "{at}")
        }
        other => panic!("wrong error {other:?}"),
    }
    let mut h = heatmap("h", 1.0);
    h.values[1].pop();
    assert!(matches!(
        err(&second(h)),
        FigureError::LengthMismatch {
            expected: 4,
            found: 3,
            ..
        }
    ));
    let mut h = heatmap("h", 1.0);
    h.values.pop();
    assert!(matches!(
        err(&second(h)),
        FigureError::LengthMismatch {
            expected: 3,
            found: 2,
            ..
        }
    ));
    let mut h = heatmap("h", 1.0);
    h.range = Some((5.0, 5.0));
    assert!(matches!(err(&second(h)), FigureError::InvalidRange { .. }));
    let mut h = heatmap("h", 1.0);
    h.column_labels.clear();
    assert!(matches!(err(&second(h)), FigureError::EmptyPanel { .. }));

    let mut t = timeline("t", 1.0);
    t.segments[2].row = 7;
    assert!(matches!(
        err(&second(t)),
        FigureError::RowOutOfRange {
            row: 7,
            rows: 2,
            ..
        }
    ));
    let mut t = timeline("t", 1.0);
    t.segments[1].end = f64::NAN;
    assert!(matches!(
        err(&second(t)),
        FigureError::NonFiniteValue { .. }
    ));
    let mut t = timeline("t", 1.0);
    t.segments[1].end = 0.5;
    assert!(matches!(
        err(&second(t)),
        FigureError::InvalidValue { value: 0.5, .. }
    ));
    let mut t = timeline("t", 1.0);
    t.range = Some((0.0, f64::INFINITY));
    assert!(matches!(err(&second(t)), FigureError::InvalidRange { .. }));
    let mut t = timeline("t", 1.0);
    t.segments.clear();
    assert!(matches!(err(&second(t)), FigureError::EmptyPanel { .. }));
}

#[test]
fn degenerate_but_valid_charts_render() {
    // All-zero bars, a single cell, a zero-length segment, a one-group bar chart.
    let zero = BarPanel {
        groups: strings(&["only"]),
        series: vec![BarSeries {
            label: String::new(),
            values: vec![0.0],
            y_err: None,
        }],
        ..BarPanel::default()
    };
    let cell = HeatmapPanel {
        row_labels: strings(&["r"]),
        column_labels: strings(&["c"]),
        values: vec![vec![-3.0]],
        annotate: true,
        ..HeatmapPanel::default()
    };
    let instant = TimelinePanel {
        rows: strings(&["w"]),
        segments: vec![seg(0, 5.0, 5.0, "event", "x")],
        ..TimelinePanel::default()
    };
    let figure = ChartFigure::new("", vec![zero.into(), cell.into(), instant.into()], 3);
    let dir = tempfile::tempdir().unwrap();
    let written = render(&figure, &dir.path().join("odd")).unwrap();
    let (w, h, _) = decode(&std::fs::read(&written[0]).unwrap());
    assert_eq!(h, PANEL_HEIGHT);
    assert!(w > 3 * PANEL_WIDTH);
}

#[test]
fn extreme_inputs_render_without_panicking() {
    let long = "a-very-long-label-that-goes-on-and-on-".repeat(12);
    let mut b = bars();
    b.groups = vec![long.clone(); 9];
    b.series[0].values = vec![1e300, -1e300, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    b.series[0].y_err = None;
    b.series[1].values = vec![1.0; 9];
    let mut s = stacked();
    s.bars = vec![long.clone(), long.clone()];
    s.groups = vec![long.clone(), long.clone()];
    let mut h = heatmap("h", 1e300);
    h.row_labels = vec![long.clone(); 3];
    h.column_labels = vec![long.clone(); 4];
    h.value_label = long.clone();
    let mut t = timeline(&long, 1.0);
    t.rows = (0..500).map(|i| format!("{long}{i}")).collect();
    t.segments[0].end = 1e300;
    let figure = ChartFigure::new(
        long.clone(),
        vec![b.into(), s.into(), h.into(), t.into()],
        2,
    );
    let (w, h, _) = decode(&render_png(&figure).unwrap());
    assert_eq!((w, h), canvas_size(&figure).unwrap());
    assert!(h < 2 * PANEL_HEIGHT + 100, "{h}");
    let texts = svg_texts(&render_svg(&figure).unwrap());
    assert!(
        texts.iter().any(|t| t.ends_with('…')),
        "long labels cut short"
    );
}
