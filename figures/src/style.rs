//! Series styles (colour + marker shape) and the marker and error-bar elements.
//!
//! The palette is Okabe–Ito (minus its yellow) completed with Paul Tol's muted
//! wine, olive and indigo, a brown and a grey: twelve colours that stay apart
//! for the common colour-vision deficiencies. Each colour is paired with its own
//! marker shape (six filled, four open, a cross and a plus), so that twelve
//! series remain distinguishable in grayscale print too. Light colours get the
//! filled shapes, dark colours the open ones and the strokes.

use plotters::element::{Drawable, PointCollection};
use plotters::style::{Color, RGBColor, ShapeStyle, WHITE};
use plotters_backend::{BackendCoord, DrawingBackend, DrawingErrorKind};

/// The twelve series colours, in assignment order.
pub(crate) const PALETTE: [RGBColor; 12] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0x88, 0x22, 0x55), // wine
    RGBColor(0x99, 0x99, 0x33), // olive
    RGBColor(0x33, 0x22, 0x88), // indigo
    RGBColor(0x8C, 0x51, 0x0A), // brown
    RGBColor(0x77, 0x77, 0x77), // grey
];

/// A marker shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Pentagon,
    OpenCircle,
    OpenSquare,
    OpenTriangleUp,
    OpenDiamond,
    Cross,
    Plus,
}

/// The twelve marker shapes, in assignment order (paired with [`PALETTE`]).
pub(crate) const MARKERS: [Marker; 12] = [
    Marker::Circle,
    Marker::Square,
    Marker::TriangleUp,
    Marker::Diamond,
    Marker::TriangleDown,
    Marker::Pentagon,
    Marker::OpenCircle,
    Marker::OpenSquare,
    Marker::OpenTriangleUp,
    Marker::OpenDiamond,
    Marker::Cross,
    Marker::Plus,
];

/// Marker radius in pixels.
pub(crate) const MARKER_RADIUS: i32 = 5;
/// Width of series lines in pixels.
pub(crate) const LINE_WIDTH: u32 = 2;
/// Width of error bars in pixels.
pub(crate) const ERROR_BAR_WIDTH: u32 = 1;
/// Half-width of error-bar caps in pixels.
pub(crate) const CAP_HALF_WIDTH: i32 = 4;

/// The look of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeriesStyle {
    pub color: RGBColor,
    pub marker: Marker,
}

impl SeriesStyle {
    /// The style of the `index`-th distinct series label. Past twelve, colours repeat
    /// with a shifted marker, so the first 144 styles are all different.
    pub fn nth(index: usize) -> Self {
        let n = PALETTE.len();
        Self {
            color: PALETTE[index % n],
            marker: MARKERS[(index + index / n) % n],
        }
    }

    pub fn line(&self) -> ShapeStyle {
        stroke(self.color, LINE_WIDTH)
    }
}

fn stroke(color: RGBColor, width: u32) -> ShapeStyle {
    ShapeStyle {
        color: color.to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

fn fill(color: RGBColor) -> ShapeStyle {
    ShapeStyle {
        color: color.to_rgba(),
        filled: true,
        stroke_width: 1,
    }
}

/// A marker drawn at one point (data or pixel coordinates).
pub(crate) struct MarkerElement<C> {
    pub at: C,
    pub style: SeriesStyle,
}

impl<'a, C: 'a> PointCollection<'a, C> for &'a MarkerElement<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for MarkerElement<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut pos: I,
        backend: &mut DB,
        _parent_dim: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        match pos.next() {
            Some(at) => draw_marker(backend, at, self.style, MARKER_RADIUS),
            None => Ok(()),
        }
    }
}

/// Vertices of a regular-ish polygon marker centred on `c`.
fn polygon(marker: Marker, (cx, cy): BackendCoord, r: i32) -> Vec<BackendCoord> {
    let r = f64::from(r);
    let pts: Vec<(f64, f64)> = match marker {
        Marker::Square | Marker::OpenSquare => {
            let s = r * 0.85;
            vec![(-s, -s), (s, -s), (s, s), (-s, s)]
        }
        Marker::TriangleUp | Marker::OpenTriangleUp => {
            vec![(0.0, -1.2 * r), (1.1 * r, 0.75 * r), (-1.1 * r, 0.75 * r)]
        }
        Marker::TriangleDown => {
            vec![(0.0, 1.2 * r), (1.1 * r, -0.75 * r), (-1.1 * r, -0.75 * r)]
        }
        Marker::Diamond | Marker::OpenDiamond => {
            let s = r * 1.2;
            vec![(0.0, -s), (s, 0.0), (0.0, s), (-s, 0.0)]
        }
        Marker::Pentagon => (0..5)
            .map(|k| {
                let a = (-90.0 + 72.0 * f64::from(k)).to_radians();
                (1.1 * r * a.cos(), 1.1 * r * a.sin())
            })
            .collect(),
        _ => Vec::new(),
    };
    pts.into_iter()
        .map(|(x, y)| (cx + x.round() as i32, cy + y.round() as i32))
        .collect()
}

/// Draws `style.marker` centred on `c` with radius `r`.
pub(crate) fn draw_marker<DB: DrawingBackend>(
    backend: &mut DB,
    c: BackendCoord,
    style: SeriesStyle,
    r: i32,
) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
    let color = style.color;
    let (cx, cy) = c;
    match style.marker {
        Marker::Circle => backend.draw_circle(c, r as u32, &fill(color), true),
        Marker::OpenCircle => {
            backend.draw_circle(c, r as u32, &fill(WHITE), true)?;
            backend.draw_circle(c, r as u32, &stroke(color, 2), false)
        }
        Marker::Square
        | Marker::TriangleUp
        | Marker::Diamond
        | Marker::TriangleDown
        | Marker::Pentagon => backend.fill_polygon(polygon(style.marker, c, r), &fill(color)),
        Marker::OpenSquare | Marker::OpenTriangleUp | Marker::OpenDiamond => {
            let mut pts = polygon(style.marker, c, r);
            backend.fill_polygon(pts.clone(), &fill(WHITE))?;
            pts.push(pts[0]);
            backend.draw_path(pts, &stroke(color, 2))
        }
        Marker::Cross => {
            let s = r;
            let st = stroke(color, 3);
            backend.draw_path([(cx - s, cy - s), (cx + s, cy + s)], &st)?;
            backend.draw_path([(cx - s, cy + s), (cx + s, cy - s)], &st)
        }
        Marker::Plus => {
            let s = r + 1;
            let st = stroke(color, 3);
            backend.draw_path([(cx - s, cy), (cx + s, cy)], &st)?;
            backend.draw_path([(cx, cy - s), (cx, cy + s)], &st)
        }
    }
}

/// A vertical error bar from `bottom` to `top` (data coordinates), with caps at the
/// ends flagged in `caps` (an end clipped to the axis gets no cap).
pub(crate) struct ErrorBarElement {
    pub ends: [(f64, f64); 2],
    pub caps: [bool; 2],
    pub color: RGBColor,
}

impl<'a> PointCollection<'a, (f64, f64)> for &'a ErrorBarElement {
    type Point = &'a (f64, f64);
    type IntoIter = &'a [(f64, f64); 2];
    fn point_iter(self) -> Self::IntoIter {
        &self.ends
    }
}

impl<DB: DrawingBackend> Drawable<DB> for ErrorBarElement {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        pos: I,
        backend: &mut DB,
        _parent_dim: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let ends: Vec<BackendCoord> = pos.collect();
        let [a, b] = ends[..] else {
            return Ok(());
        };
        let st = stroke(self.color, ERROR_BAR_WIDTH);
        backend.draw_path([a, b], &st)?;
        for ((x, y), cap) in [a, b].into_iter().zip(self.caps) {
            if cap {
                backend.draw_path([(x - CAP_HALF_WIDTH, y), (x + CAP_HALF_WIDTH, y)], &st)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_distinct_styles_and_more() {
        let styles: Vec<SeriesStyle> = (0..144).map(SeriesStyle::nth).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert_ne!(a, b);
            }
        }
        let colors: std::collections::BTreeSet<(u8, u8, u8)> =
            PALETTE.iter().map(|c| (c.0, c.1, c.2)).collect();
        assert_eq!(colors.len(), 12);
    }
}
