//! The sequential colour scale of heatmaps: viridis (perceptually uniform, readable
//! with the common colour-vision deficiencies and in grayscale).

use plotters::style::RGBColor;

/// viridis sampled at 0, 0.1, ..., 1 (matplotlib's values).
const VIRIDIS: [(u8, u8, u8); 11] = [
    (0x44, 0x01, 0x54),
    (0x48, 0x24, 0x75),
    (0x41, 0x44, 0x87),
    (0x35, 0x5f, 0x8d),
    (0x2a, 0x78, 0x8e),
    (0x21, 0x91, 0x8c),
    (0x22, 0xa8, 0x84),
    (0x44, 0xbf, 0x70),
    (0x7a, 0xd1, 0x51),
    (0xbd, 0xdf, 0x26),
    (0xfd, 0xe7, 0x25),
];

/// The colour of `t` in `0..=1` (clamped; NaN gives the low end).
pub(crate) fn viridis(t: f64) -> RGBColor {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let pos = t * (VIRIDIS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(VIRIDIS.len() - 2);
    let f = pos - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Whether text on `color` should be white (dark background) rather than black.
pub(crate) fn is_dark(color: RGBColor) -> bool {
    let l = 0.2126 * f64::from(color.0) + 0.7152 * f64::from(color.1) + 0.0722 * f64::from(color.2);
    l < 128.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_and_clamping() {
        assert_eq!(viridis(0.0), RGBColor(0x44, 0x01, 0x54));
        assert_eq!(viridis(1.0), RGBColor(0xfd, 0xe7, 0x25));
        assert_eq!(viridis(-3.0), viridis(0.0));
        assert_eq!(viridis(7.0), viridis(1.0));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
        assert_eq!(viridis(0.5), RGBColor(0x21, 0x91, 0x8c));
        // Monotone in lightness (green channel rises throughout).
        let g: Vec<u8> = (0..=20).map(|i| viridis(f64::from(i) / 20.0).1).collect();
        assert!(g.windows(2).all(|w| w[0] <= w[1]), "{g:?}");
        assert!(is_dark(viridis(0.0)) && !is_dark(viridis(1.0)));
    }
}
