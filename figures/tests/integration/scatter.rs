//! End-to-end tests of the scatter panel: points are markers only, the frontier is one line per
//! series in the series' colour, the legend lists each series once, and the y axis spans the data
//! rather than starting at zero.

use figures::{ChartFigure, ScatterPanel, ScatterSeries, render_png, render_svg};

fn panel(frontier: bool) -> ScatterPanel {
    let points = vec![(20.0, 21.0), (19.5, 20.5), (22.0, 22.0), (21.0, 20.0)];
    ScatterPanel {
        title: "RPS 8".to_string(),
        x_label: "latency per token (ms)".to_string(),
        y_label: "score (%)".to_string(),
        series: vec![
            ScatterSeries {
                label: "chimera".to_string(),
                frontier: if frontier {
                    vec![(19.5, 20.5), (20.0, 21.0), (22.0, 22.0)]
                } else {
                    Vec::new()
                },
                points,
            },
            ScatterSeries {
                label: "vllm".to_string(),
                points: vec![(23.0, 19.0)],
                frontier: vec![(23.0, 19.0)],
            },
        ],
    }
}

fn figure(frontier: bool) -> ChartFigure {
    ChartFigure::new("frontier", vec![panel(frontier).into()], 1)
}

/// The texts of the SVG, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|chunk| {
            let start = chunk.find('>')? + 1;
            let end = chunk.find("</text>")?;
            Some(chunk[start..end].trim().to_string())
        })
        .collect()
}

/// Polylines (plotters draws a line series as one) in the SVG.
fn polylines(svg: &str) -> usize {
    svg.matches("<polyline").count()
}

#[test]
fn only_the_frontier_is_joined() {
    let with = render_svg(&figure(true)).unwrap();
    let without = render_svg(&figure(false)).unwrap();
    // One line for the 3-point frontier; single-point frontiers and point sets get none.
    assert_eq!(polylines(&with) - polylines(&without), 1);
    // The legend names each series once, however many point sets it has.
    let texts = texts(&with);
    assert_eq!(
        texts.iter().filter(|t| *t == "chimera").count(),
        1,
        "{texts:?}"
    );
    assert_eq!(texts.iter().filter(|t| *t == "vllm").count(), 1);
}

#[test]
fn y_axis_spans_the_data_not_zero() {
    let texts = texts(&render_svg(&figure(true)).unwrap());
    // Scores 19-22: ticks near the data, no tick at 0.
    assert!(texts.iter().any(|t| t == "20"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t == "0"),
        "a zero tick means the axis starts at zero: {texts:?}"
    );
}

#[test]
fn scatter_renders_deterministically() {
    assert_eq!(
        render_png(&figure(true)).unwrap(),
        render_png(&figure(true)).unwrap()
    );
}

#[test]
fn a_non_finite_point_is_an_error() {
    let mut bad = panel(true);
    bad.series[0].points[1].1 = f64::NAN;
    let err = render_svg(&ChartFigure::new("bad", vec![bad.into()], 1)).unwrap_err();
    assert!(err.to_string().contains("chimera"), "{err}");
}
