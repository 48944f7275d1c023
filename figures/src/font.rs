//! The embedded font (DejaVu Sans): text metrics and rasterisation.
//!
//! plotters is built without its `ttf` feature, so it never looks at system fonts.
//! The font is registered with plotters' `ab_glyph` support as the `sans-serif`
//! family, which plotters needs for its own layout estimates (and which the SVG
//! output names, leaving the glyphs to the viewer). For the PNG, text is laid out
//! and rasterised here, with `ab_glyph` directly: plotters 0.3.7's `ab_glyph` text
//! drawing drops each glyph's left side bearing and rounds the pen position per
//! glyph, which gives visibly uneven letter spacing ("roun d-robin").
//!
//! Sizes follow plotters' convention: a text style of size `s` sets the font at
//! `s / 1.24` pixels per em, which is also the `font-size` the SVG backend writes,
//! so PNG and SVG text have the same size.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, Glyph, PxScale, ScaleFont, point};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontFamily, FontStyle, FontTransform};

use crate::FigureError;

/// DejaVu Sans 2.37 (Debian `fonts-dejavu-core`); license in `assets/DejaVuSans-LICENSE.txt`.
static DEJAVU_SANS: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// plotters' ratio between a text style's size and the font's pixels per em.
const SIZE_PER_EM: f32 = 1.24;
/// Baseline offset below the anchor, in em, for `VPos::Top` (as plotters' SVG backend).
const TOP_BASELINE_EM: f32 = 0.76;
/// Half the cap height of DejaVu Sans (0.729 em): `VPos::Center` centres digits and capitals.
const CENTER_BASELINE_EM: f32 = 0.365;
/// Descent of DejaVu Sans (0.236 em): `VPos::Bottom` keeps descenders above the anchor.
const BOTTOM_BASELINE_EM: f32 = -0.236;

/// Registers the embedded font as plotters' `sans-serif` family (once per process).
pub(crate) fn ensure_registered() -> Result<(), FigureError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(
            FontFamily::SansSerif.as_str(),
            FontStyle::Normal,
            DEJAVU_SANS,
        )
        .is_ok()
    });
    if ok {
        font_ref().map(|_| ())
    } else {
        Err(FigureError::Font(
            "plotters could not load the embedded DejaVu Sans font".to_string(),
        ))
    }
}

fn font_ref() -> Result<&'static FontRef<'static>, FigureError> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(DEJAVU_SANS).ok())
        .as_ref()
        .ok_or_else(|| FigureError::Font("the embedded DejaVu Sans font is invalid".to_string()))
}

/// The plotters font description for text of `size`.
pub(crate) fn font(size: f64) -> plotters::style::FontDesc<'static> {
    plotters::style::FontDesc::new(FontFamily::SansSerif, size, FontStyle::Normal)
}

/// A line of text laid out at the origin (pen starts at x = 0, baseline at y = 0).
struct Line {
    glyphs: Vec<Glyph>,
    width: f32,
    height: f32,
    em: f32,
}

fn layout(font: &FontRef<'static>, text: &str, size: f64) -> Line {
    let em = size as f32 / SIZE_PER_EM;
    let units = font.units_per_em().unwrap_or(2048.0);
    let scale = PxScale::from(em * font.height_unscaled() / units);
    let scaled = font.as_scaled(scale);
    let mut glyphs = Vec::with_capacity(text.len());
    let mut x = 0.0f32;
    let mut prev = None;
    for c in text.chars().filter(|c| !c.is_control()) {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            x += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(scale, point(x, 0.0)));
        x += scaled.h_advance(id);
        prev = Some(id);
    }
    Line {
        glyphs,
        width: x,
        height: scaled.ascent() - scaled.descent(),
        em,
    }
}

/// Width and height in pixels of `text` at `size` (height: one line, ascent to descent).
pub(crate) fn text_size(text: &str, size: f64) -> Result<(u32, u32), FigureError> {
    let line = layout(font_ref()?, text, size);
    Ok((line.width.ceil() as u32, line.height.ceil() as u32))
}

/// Rasterises `text` anchored at `pos` by `anchor` and rotated by `transform` about
/// `pos`, calling `plot(x, y, coverage)` for every touched pixel.
pub(crate) fn rasterize<E>(
    text: &str,
    size: f64,
    anchor: Pos,
    transform: FontTransform,
    pos: (i32, i32),
    mut plot: impl FnMut(i32, i32, f32) -> Result<(), E>,
) -> Result<Result<(), E>, FigureError> {
    let font = font_ref()?;
    let line = layout(font, text, size);
    let dx = match anchor.h_pos {
        HPos::Left => 0.0,
        HPos::Center => -line.width / 2.0,
        HPos::Right => -line.width,
    };
    let baseline = line.em
        * match anchor.v_pos {
            VPos::Top => TOP_BASELINE_EM,
            VPos::Center => CENTER_BASELINE_EM,
            VPos::Bottom => BOTTOM_BASELINE_EM,
        };
    for mut glyph in line.glyphs {
        glyph.position = point(glyph.position.x + dx, baseline);
        let Some(outline) = font.outline_glyph(glyph) else {
            continue;
        };
        let bounds = outline.px_bounds();
        let (x0, y0) = (bounds.min.x as i32, bounds.min.y as i32);
        let mut result = Ok(());
        outline.draw(|x, y, coverage| {
            if result.is_ok() && coverage > 0.0 {
                let (tx, ty) = transform.transform(x0 + x as i32, y0 + y as i32);
                result = plot(pos.0 + tx, pos.1 + ty, coverage.min(1.0));
            }
        });
        if result.is_err() {
            return Ok(result);
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_grow_with_text_and_size() {
        let (w1, h1) = text_size("fcfs", 20.0).unwrap();
        let (w2, h2) = text_size("fcfs fcfs", 20.0).unwrap();
        let (w3, h3) = text_size("fcfs", 40.0).unwrap();
        assert!(
            w1 > 10 && w2 > 2 * w1 - 2 && w3 >= 2 * w1 - 2,
            "{w1} {w2} {w3}"
        );
        assert_eq!(h1, h2);
        assert!(h3 >= 2 * h1 - 2);
        assert_eq!(text_size("", 20.0).unwrap().0, 0);
    }

    #[test]
    fn anchors_place_ink_where_asked() {
        let ink = |anchor: Pos| {
            let (mut x0, mut x1, mut y0, mut y1) = (i32::MAX, i32::MIN, i32::MAX, i32::MIN);
            rasterize::<()>(
                "H",
                40.0,
                anchor,
                FontTransform::None,
                (100, 100),
                |x, y, c| {
                    if c > 0.5 {
                        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
                    }
                    Ok(())
                },
            )
            .unwrap()
            .unwrap();
            (x0, x1, y0, y1)
        };
        let (x0, _, y0, y1) = ink(Pos::new(HPos::Left, VPos::Center));
        assert!((x0 - 100).abs() <= 4, "left edge {x0}");
        assert!(
            ((y0 + y1) / 2 - 100).abs() <= 1,
            "vertical centre {y0}..{y1}"
        );
        let (_, x1, _, _) = ink(Pos::new(HPos::Right, VPos::Top));
        assert!((x1 - 100).abs() <= 4, "right edge {x1}");
    }
}
