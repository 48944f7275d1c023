//! End-to-end tests of `figures::render`: files, PNG contents, SVG text, determinism, errors.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use figures::{Figure, FigureError, PANEL_HEIGHT, PANEL_WIDTH, Panel, Series, canvas_size, render};

const RATES: [f64; 4] = [50.0, 100.0, 200.0, 400.0];
/// The first three palette colours (blue, orange, bluish green).
const FIRST_COLOURS: [(u8, u8, u8); 3] =
    [(0x00, 0x72, 0xB2), (0xE6, 0x9F, 0x00), (0x00, 0x9E, 0x73)];

fn series(label: &str, scale: f64, with_err: bool) -> Series {
    let points: Vec<(f64, f64)> = RATES
        .iter()
        .map(|&r| (r, scale * (10.0 + r / 8.0)))
        .collect();
    let y_err = with_err.then(|| points.iter().map(|p| 0.05 * p.1).collect());
    Series {
        label: label.to_string(),
        points,
        y_err,
    }
}

fn panel(title: &str, log_y: bool) -> Panel {
    Panel {
        title: title.to_string(),
        x_label: "arrival rate (req/s)".to_string(),
        y_label: "P99 latency (ms)".to_string(),
        series: vec![
            series("fcfs", 3.0, true),
            series("least-loaded", 2.0, false),
            series("A&B <lpt>", 1.0, true),
        ],
        log_y,
    }
}

fn two_panels() -> Figure {
    Figure {
        title: "P99 latency vs arrival rate".to_string(),
        panels: vec![panel("bursty", false), panel("poisson", true)],
        columns: 2,
    }
}

fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
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
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

#[test]
fn two_panel_figure_writes_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let stem = dir.path().join("p99.v2");
    let figure = two_panels();
    let written = render(&figure, &stem).unwrap();
    let png_path = dir.path().join("p99.v2.png");
    let svg_path = dir.path().join("p99.v2.svg");
    assert_eq!(written, vec![png_path.clone(), svg_path.clone()]);
    assert!(png_path.is_file() && svg_path.is_file());

    // No temporary files left behind.
    let names: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["p99.v2.png".into(), "p99.v2.svg".into()])
    );

    // PNG: signature, IHDR size, fixed size per panel plus title band and legend column.
    let bytes = std::fs::read(&png_path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let ihdr_w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let ihdr_h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    let (w, h, rgb) = decode_png(&png_path);
    assert_eq!((w, h), (ihdr_w, ihdr_h));
    assert_eq!((w, h), canvas_size(&figure).unwrap());
    assert_eq!(
        h,
        PANEL_HEIGHT + 52,
        "one row of panels plus the title band"
    );
    assert!(
        w > 2 * PANEL_WIDTH + 100,
        "two panels plus a legend column, got {w}"
    );
    assert!(w < 2 * PANEL_WIDTH + 500, "legend column too wide: {w}");

    // Non-background pixels in several distinct colours, including each series colour.
    let pixels: Vec<(u8, u8, u8)> = rgb.chunks_exact(3).map(|p| (p[0], p[1], p[2])).collect();
    let white = pixels.iter().filter(|&&p| p == (255, 255, 255)).count();
    assert!(white > pixels.len() / 2, "background should be white");
    assert!(white < pixels.len() * 98 / 100, "too little drawn");
    let distinct: BTreeSet<(u8, u8, u8)> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 20,
        "only {} distinct colours",
        distinct.len()
    );
    for colour in FIRST_COLOURS {
        let n = pixels.iter().filter(|&&p| p == colour).count();
        assert!(n > 200, "series colour {colour:?} has only {n} pixels");
    }
    // The legend column (right of the panels) is drawn on, in series colours.
    let legend_has = |colour| {
        (0..h as usize).any(|y| {
            (2 * PANEL_WIDTH as usize..w as usize).any(|x| pixels[y * w as usize + x] == colour)
        })
    };
    assert!(FIRST_COLOURS.into_iter().all(legend_has));

    // SVG: same size; every series label and panel title as text.
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(
        svg.starts_with(&format!("<svg width=\"{w}\" height=\"{h}\"")),
        "{}",
        &svg[..80]
    );
    let texts = svg_texts(&svg);
    for wanted in [
        "fcfs",
        "least-loaded",
        "A&B <lpt>",
        "bursty",
        "poisson",
        "P99 latency vs arrival rate",
        "arrival rate (req/s)",
        "P99 latency (ms)",
    ] {
        assert!(
            texts.iter().any(|t| t == wanted),
            "{wanted:?} not in {texts:?}"
        );
    }
    // One shared legend: each label appears once as text.
    assert_eq!(texts.iter().filter(|t| *t == "fcfs").count(), 1);
    // Linear panel: x ticks at the rates; y starts at 0.
    for tick in ["50", "100", "200", "400", "0"] {
        assert!(
            texts.iter().any(|t| t == tick),
            "tick {tick} missing: {texts:?}"
        );
    }
}

#[test]
fn grid_of_four_panels() {
    let dir = tempfile::tempdir().unwrap();
    let p = |title: &str| {
        let mut panel = panel(title, false);
        panel.y_label = "throughput (tok/s)".to_string();
        panel
    };
    let figure = Figure {
        title: String::new(),
        panels: vec![
            p("bursty"),
            p("poisson"),
            p("bursty imbalance"),
            p("poisson imbalance"),
        ],
        columns: 2,
    };
    let written = render(&figure, &dir.path().join("grid")).unwrap();
    let (w, h, _) = decode_png(&written[0]);
    assert_eq!(h, 2 * PANEL_HEIGHT, "two rows, no title band");
    assert!(w > 2 * PANEL_WIDTH);
    let texts = svg_texts(&std::fs::read_to_string(&written[1]).unwrap());
    for title in ["bursty", "poisson", "bursty imbalance", "poisson imbalance"] {
        assert!(texts.iter().any(|t| t == title));
    }
}

#[test]
fn rendering_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = render(&two_panels(), &dir.path().join("a")).unwrap();
    let b = render(&two_panels(), &dir.path().join("b")).unwrap();
    for (x, y) in a.iter().zip(&b) {
        let (x, y) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        assert!(!x.is_empty());
        assert!(x == y, "outputs differ");
    }
    // Re-rendering over existing files replaces them with the same bytes.
    let before = std::fs::read(&a[0]).unwrap();
    render(&two_panels(), &dir.path().join("a")).unwrap();
    assert_eq!(std::fs::read(&a[0]).unwrap(), before);
}

#[test]
fn twelve_series_get_twelve_colours() {
    let labels: Vec<String> = (0..12).map(|i| format!("strategy-{i}")).collect();
    let series: Vec<Series> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| series(l, 1.0 + i as f64, i % 2 == 0))
        .collect();
    let figure = Figure {
        title: "twelve".to_string(),
        panels: vec![Panel {
            title: "one".to_string(),
            series,
            ..Panel::default()
        }],
        columns: 1,
    };
    let svg = figures::render_svg(&figure).unwrap();
    let strokes: BTreeSet<&str> = svg
        .match_indices("stroke=\"#")
        .map(|(i, _)| &svg[i + 9..i + 15])
        .filter(|c| *c != "000000" && *c != "FFFFFF")
        .collect();
    // Eleven non-black series colours (black is one of the twelve).
    assert!(strokes.len() >= 11, "{strokes:?}");
    let texts = svg_texts(&svg);
    for l in &labels {
        assert!(texts.contains(l));
    }
}

#[test]
fn degenerate_but_valid_inputs_render() {
    let one_point = Series {
        label: "only".to_string(),
        points: vec![(3.0, 0.0)],
        y_err: None,
    };
    let negative = Series {
        label: "neg".to_string(),
        points: vec![(-2.0, -5.0), (2.0, 3.0)],
        y_err: Some(vec![1.0, 0.0]),
    };
    let tiny_log = Series {
        label: "".to_string(),
        points: vec![(1.0, 1e-4), (2.0, 1.1e-4)],
        y_err: Some(vec![2e-4, 0.0]), // lower end below zero: clipped on the log axis
    };
    let figure = Figure {
        title: String::new(),
        panels: vec![
            Panel {
                series: vec![one_point],
                ..Panel::default()
            },
            Panel {
                series: vec![negative, Series::default()],
                ..Panel::default()
            },
            Panel {
                series: vec![tiny_log],
                log_y: true,
                ..Panel::default()
            },
        ],
        columns: 5,
    };
    let dir = tempfile::tempdir().unwrap();
    let written = render(&figure, &dir.path().join("odd")).unwrap();
    let (w, h, _) = decode_png(&written[0]);
    assert_eq!(h, PANEL_HEIGHT);
    assert!(w >= 3 * PANEL_WIDTH, "columns capped at the panel count");
}

fn err(figure: &Figure) -> FigureError {
    let dir = tempfile::tempdir().unwrap();
    let e = render(figure, &dir.path().join("x")).unwrap_err();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written on error"
    );
    e
}

fn with_series(bad: Series, log_y: bool) -> Figure {
    Figure {
        title: "t".to_string(),
        panels: vec![
            panel("fine", false),
            Panel {
                title: "bad".to_string(),
                series: vec![series("ok", 1.0, false), bad],
                log_y,
                ..Panel::default()
            },
        ],
        columns: 2,
    }
}

#[test]
fn invalid_figures_are_errors() {
    let e = err(&Figure {
        title: "none".to_string(),
        panels: vec![],
        columns: 1,
    });
    assert!(matches!(e, FigureError::EmptyFigure { .. }), "{e}");

    let mut f = two_panels();
    f.columns = 0;
    assert!(matches!(err(&f), FigureError::ZeroColumns { .. }));

    let mut f = two_panels();
    f.panels[1].series.clear();
    let e = err(&f);
    assert!(
        matches!(&e, FigureError::EmptyPanel { panel: 1, title } if title == "poisson"),
        "{e}"
    );
    let mut f = two_panels();
    f.panels[0].series = vec![Series::default(), Series::default()];
    assert!(matches!(err(&f), FigureError::EmptyPanel { panel: 0, .. }));

    let mut s = series("nan-y", 1.0, false);
    s.points[2].1 = f64::NAN;
    let e = err(&with_series(s, false));
    match &e {
        FigureError::NonFinite {
            panel: 1,
            panel_title,
            series: 1,
            label,
            point: 2,
            field: "y",
            value,
        } => {
            assert_eq!((panel_title.as_str(), label.as_str()), ("bad", "nan-y"));
            assert!(value.is_nan());
        }
        other => panic!("wrong error: {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("nan-y") && msg.contains("point 2") && msg.contains("bad"),
        "{msg}"
    );

    let mut s = series("inf-x", 1.0, false);
    s.points[0].0 = f64::INFINITY;
    assert!(matches!(
        err(&with_series(s, false)),
        FigureError::NonFinite {
            point: 0,
            field: "x",
            ..
        }
    ));

    let mut s = series("bad-err", 1.0, true);
    s.y_err.as_mut().unwrap()[3] = f64::NEG_INFINITY;
    assert!(matches!(
        err(&with_series(s, false)),
        FigureError::NonFinite {
            point: 3,
            field: "y_err",
            ..
        }
    ));

    let mut s = series("short-err", 1.0, true);
    s.y_err.as_mut().unwrap().pop();
    assert!(matches!(
        err(&with_series(s, false)),
        FigureError::ErrorBarCount {
            points: 4,
            errors: 3,
            ..
        }
    ));

    let mut s = series("neg-err", 1.0, true);
    s.y_err.as_mut().unwrap()[1] = -1.0;
    assert!(matches!(
        err(&with_series(s, false)),
        FigureError::NegativeErrorBar { point: 1, .. }
    ));

    let mut s = series("zero-on-log", 1.0, false);
    s.points[1].1 = 0.0;
    assert!(matches!(
        err(&with_series(s.clone(), true)),
        FigureError::NonPositiveLogValue { point: 1, .. }
    ));
    // The same series is fine on a linear axis.
    let dir = tempfile::tempdir().unwrap();
    render(&with_series(s, false), &dir.path().join("ok")).unwrap();
}

#[test]
fn unwritable_output_is_an_io_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing: PathBuf = dir.path().join("no-such-dir").join("fig");
    match render(&two_panels(), &missing) {
        Err(FigureError::Io { path, .. }) => {
            assert_eq!(path, dir.path().join("no-such-dir").join("fig.png"));
            let e = render(&two_panels(), &missing).unwrap_err().to_string();
            assert!(e.contains("fig.png"), "{e}");
        }
        other => panic!("expected an io error, got {other:?}"),
    }
    // A regular file where a directory is needed.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(
        render(&two_panels(), &file.join("fig")),
        Err(FigureError::Io { .. })
    ));
    assert!(matches!(
        render(&two_panels(), Path::new("/")),
        Err(FigureError::InvalidOutputPath { .. })
    ));
}

/// A legend title sits over the entries and a caption under the grid: both are drawn as text,
/// and the caption adds a band of its own to the canvas height.
#[test]
fn legend_title_and_caption_are_drawn() {
    let plain: figures::ChartFigure = two_panels().into();
    let (w, h) = canvas_size(&plain).unwrap();
    let labelled = plain
        .clone()
        .with_legend_title("batch selector")
        .with_caption("whiskers: 95% confidence interval of the mean over 4 seeds");
    let (w2, h2) = canvas_size(&labelled).unwrap();
    assert_eq!(w2, w);
    assert!(h2 > h, "{h} -> {h2}");
    let texts = svg_texts(&figures::render_svg(&labelled).unwrap());
    assert!(texts.iter().any(|t| t == "batch selector"), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t == "whiskers: 95% confidence interval of the mean over 4 seeds"),
        "{texts:?}"
    );
    let texts = svg_texts(&figures::render_svg(&plain).unwrap());
    assert!(!texts.iter().any(|t| t == "batch selector"));
}
