//! Axis ranges, tick positions and tick labels.
//!
//! [`Axis`] is a plotters coordinate (`Ranged`) that is linear or base-10
//! logarithmic and chooses its own tick positions, so that tick labels are
//! "nice" numbers (1-2-2.5-5 steps on linear axes, 1-2-5 mantissas or whole
//! decades on log axes) and so that the layout code can measure the labels
//! before the chart is built.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};

/// One axis of a panel: a range, a scale and optionally fixed tick positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    /// Tick positions to use instead of computed ones (e.g. the x values of the data).
    pub fixed: Option<Vec<f64>>,
}

impl Axis {
    /// Position of `v` along the axis: 0 at `lo`, 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        if self.log {
            if v <= 0.0 {
                return f64::NEG_INFINITY;
            }
            let (a, b) = (self.lo.log10(), self.hi.log10());
            (v.log10() - a) / (b - a)
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// At most `max` tick positions inside the range.
    pub fn ticks(&self, max: usize) -> Vec<f64> {
        if max == 0 {
            return Vec::new();
        }
        if let Some(fixed) = &self.fixed
            && fixed.len() <= max
        {
            return fixed.clone();
        }
        if self.log {
            log_ticks(self.lo, self.hi, max)
        } else {
            linear_ticks(self.lo, self.hi, max)
        }
    }
}

impl Axis {
    /// At most `max` positions for light grid lines (log axes only; none otherwise).
    pub fn minor_ticks(&self, max: usize) -> Vec<f64> {
        if self.log && self.fixed.is_none() {
            log_minor_ticks(self.lo, self.hi, max)
        } else {
            Vec::new()
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = self.fraction(*value);
        // Keep far-out values (and log of non-positive values) finite and bounded.
        let t = if t.is_nan() { 0.0 } else { t.clamp(-1.0, 2.0) };
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let max = hint.max_num_points();
        if hint.weight().allow_light_points() {
            self.minor_ticks(max)
        } else {
            self.ticks(max)
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format(value: &f64) -> String {
        format_tick(*value)
    }
}

/// Nice linear ticks: multiples of 1, 2, 2.5 or 5 times a power of ten; at most `max`.
pub(crate) fn linear_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let span = hi - lo;
    if max == 0 || !span.is_finite() || span <= 0.0 {
        return if max == 0 { Vec::new() } else { vec![lo] };
    }
    let raw = span / max as f64;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0] {
        let step = m * mag;
        if step < raw * (1.0 - 1e-9) {
            continue;
        }
        let k0 = (lo / step - 1e-9).ceil() as i64;
        let k1 = (hi / step + 1e-9).floor() as i64;
        if k1 < k0 || (k1 - k0) as usize >= max {
            continue;
        }
        return (k0..=k1)
            .map(|k| {
                let v = k as f64 * step;
                if v.abs() < step * 1e-9 { 0.0 } else { v }
            })
            .collect();
    }
    vec![lo, hi]
}

/// Log ticks, at most `max`: mantissas 1-2-5, else 1-3, else 1, else every n-th decade.
/// Ranges too narrow for three 1-2-5 ticks get nice linear ticks instead (still
/// placed on the log scale), which label them better than scattered mantissas.
pub(crate) fn log_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    if max == 0 {
        return Vec::new();
    }
    let one_two_five = mantissa_ticks(lo, hi, &[1.0, 2.0, 5.0]);
    if one_two_five.len() < 3 {
        return linear_ticks(lo, hi, max.min(6));
    }
    for ticks in [
        one_two_five,
        mantissa_ticks(lo, hi, &[1.0, 3.0]),
        mantissa_ticks(lo, hi, &[1.0]),
    ] {
        if ticks.len() <= max {
            return ticks;
        }
    }
    // Even one tick per decade is too many: keep every `stride`-th decade.
    let decades = mantissa_ticks(lo, hi, &[1.0]);
    let stride = decades.len().div_ceil(max) as i32;
    decades
        .into_iter()
        .filter(|v| (v.log10().round() as i32).rem_euclid(stride) == 0)
        .collect()
}

/// Minor grid positions on a log axis: every mantissa 1..9, if that fits in `max`
/// and the range is wide enough for [`log_ticks`] to use mantissas; else nothing.
pub(crate) fn log_minor_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    if mantissa_ticks(lo, hi, &[1.0, 2.0, 5.0]).len() < 3 {
        return Vec::new();
    }
    let all = mantissa_ticks(lo, hi, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    if all.len() <= max { all } else { Vec::new() }
}

/// `m * 10^k` for every mantissa `m` in `set` and every decade `k`, inside `[lo, hi]`.
fn mantissa_ticks(lo: f64, hi: f64, set: &[f64]) -> Vec<f64> {
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (k0..=k1)
        .flat_map(|k| set.iter().map(move |m| m * 10f64.powi(k)))
        .filter(|&v| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9))
        .collect()
}

/// A short label for a tick value: at most five significant digits, no trailing
/// zeros, scientific notation for very large or very small magnitudes.
pub(crate) fn format_tick(v: f64) -> String {
    let a = v.abs();
    if a < 1e-12 {
        return "0".to_string();
    }
    if !(1e-3..1e6).contains(&a) {
        let s = format!("{v:.2e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{exp}", trim_zeros(mantissa));
    }
    let decimals = (4 - a.log10().floor() as i32).clamp(0, 8) as usize;
    trim_zeros(&format!("{v:.decimals$}"))
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short_and_exact() {
        assert_eq!(format_tick(0.0), "0");
        assert_eq!(format_tick(-0.0), "0");
        assert_eq!(format_tick(0.1 + 0.2), "0.3");
        assert_eq!(format_tick(2.5), "2.5");
        assert_eq!(format_tick(1500.0), "1500");
        assert_eq!(format_tick(-40.0), "-40");
        assert_eq!(format_tick(0.00125), "0.00125");
        assert_eq!(format_tick(2.0e6), "2e6");
        assert_eq!(format_tick(1.5e-5), "1.5e-5");
    }

    #[test]
    fn linear_ticks_are_nice_and_bounded() {
        assert_eq!(
            linear_ticks(0.0, 105.0, 8),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        let t = linear_ticks(0.0, 1.0, 8);
        assert!(t.len() <= 8 && t.len() >= 4, "{t:?}");
        assert_eq!(t.first(), Some(&0.0));
        assert!(linear_ticks(0.0, 1.0, 0).is_empty());
        for (lo, hi) in [(-3.3, 7.1), (0.001, 0.0013), (1e5, 9e5), (12.0, 13.0)] {
            for max in 2..12 {
                let t = linear_ticks(lo, hi, max);
                assert!(
                    !t.is_empty() && t.len() <= max,
                    "{lo}..{hi} max {max}: {t:?}"
                );
                assert!(t.iter().all(|&v| v >= lo - 1e-9 && v <= hi + 1e-9));
            }
        }
    }

    #[test]
    fn log_ticks_pick_density_by_budget() {
        assert_eq!(
            log_ticks(0.9, 1100.0, 8),
            vec![1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
        );
        assert_eq!(log_ticks(0.9, 1100.0, 5), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(
            log_ticks(9.0, 1100.0, 8),
            vec![10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(log_ticks(40.0, 260.0, 8), vec![50.0, 100.0, 200.0]);
        assert_eq!(log_minor_ticks(40.0, 260.0, 80).len(), 8);
        assert!(log_minor_ticks(40.0, 260.0, 5).is_empty());
        // Narrower than one mantissa step: falls back to linear ticks.
        let t = log_ticks(310.0, 390.0, 8);
        assert!(
            t.len() >= 2 && t.iter().all(|&v| (310.0..=390.0).contains(&v)),
            "{t:?}"
        );
        // Many decades: a stride.
        let t = log_ticks(1e-3, 1e12, 5);
        assert!(t.len() <= 5 && t.len() >= 3, "{t:?}");
    }

    #[test]
    fn map_is_monotone_and_handles_log_of_zero() {
        let ax = Axis {
            lo: 1.0,
            hi: 100.0,
            log: true,
            fixed: None,
        };
        assert_eq!(ax.map(&1.0, (0, 100)), 0);
        assert_eq!(ax.map(&10.0, (0, 100)), 50);
        assert_eq!(ax.map(&100.0, (0, 100)), 100);
        assert_eq!(ax.map(&0.0, (0, 100)), -100);
        let ax = Axis {
            lo: 0.0,
            hi: 10.0,
            log: false,
            fixed: None,
        };
        assert_eq!(ax.map(&5.0, (400, 0)), 200);
    }
}
