//! MOSAIC's per-model regression of session time (mosaic.txt section 4.1.2, equations 2-3):
//! the points of a profiling sweep (sessions of growing size on one resident replica, each its
//! calls' mean and longest output and its wall), `T = b0 + b1 P O_mean + b2 O_max` fitted to
//! them by least squares, and the prediction for a session of `P` calls from the calibration
//! set's mean and longest output: the serving family's calibration pass
//! (`serving_family::session_calibration`; the mosaic family's own, until its deletion).

use nalgebra::{DMatrix, DVector};
use serde::Serialize;

/// One point of a model's profiling sweep.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    pub prompts: u32,
    pub mean_output: f64,
    pub max_output: u32,
    pub session_s: f64,
    pub tokens_per_s: f64,
}

/// A model's regression of session time T^(P, O_mean, O_max) = b0 + b1 P O_mean + b2 O_max,
/// fitted by least squares (nalgebra SVD) on its sweep (b2 = 0 when the sweep cannot separate it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionRegression {
    pub coefficients: [f64; 3],
    /// Calibration-set statistics the prediction uses (equation 2).
    pub mean_output: f64,
    pub max_output: u32,
    pub calibration_prompts: u32,
    pub sweep: Vec<SweepPoint>,
}

impl SessionRegression {
    /// T^_m for a session of `prompts` prompts.
    pub fn predict_s(&self, prompts: u32) -> f64 {
        let [b0, b1, b2] = self.coefficients;
        let t = b0 + b1 * f64::from(prompts) * self.mean_output + b2 * f64::from(self.max_output);
        if t > 0.0 {
            t
        } else {
            // A degenerate fit: fall back to the largest sweep point's rate.
            let last = self.sweep.last().expect("a sweep has points");
            last.session_s / f64::from(last.prompts) * f64::from(prompts)
        }
    }
}

/// Singular values of the column-scaled design below this share of the largest count as zero:
/// the features are then taken as not separable (condition numbers up to 1e10 are solved).
const RANK_TOLERANCE: f64 = 1e-10;

/// Least squares of `rows` (features, target) through nalgebra's SVD of the design matrix
/// (never the normal equations, which square its condition number), with the columns scaled
/// to unit norm first so that features of different magnitudes do not read as
/// ill-conditioned; `None` when the design is rank-deficient (fewer rows than features, a
/// zero column, or a scaled singular value below `RANK_TOLERANCE` of the largest).
fn least_squares<const D: usize>(rows: &[([f64; D], f64)]) -> Option<[f64; D]> {
    if rows.len() < D {
        return None;
    }
    let norms: [f64; D] =
        std::array::from_fn(|c| rows.iter().map(|(x, _)| x[c] * x[c]).sum::<f64>().sqrt());
    if norms.iter().any(|n| !(n.is_finite() && *n > 0.0)) {
        return None;
    }
    let design = DMatrix::from_fn(rows.len(), D, |r, c| rows[r].0[c] / norms[c]);
    let target = DVector::from_iterator(rows.len(), rows.iter().map(|(_, y)| *y));
    let svd = design.svd(true, true);
    let largest = svd.singular_values.max();
    if svd
        .singular_values
        .iter()
        .any(|&s| s.partial_cmp(&(RANK_TOLERANCE * largest)) != Some(std::cmp::Ordering::Greater))
    {
        return None;
    }
    let scaled = svd.solve(&target, 0.0).ok()?;
    let x: [f64; D] = std::array::from_fn(|c| scaled[c] / norms[c]);
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Fits the regression from sweep points.
pub fn fit_regression(sweep: &[SweepPoint]) -> [f64; 3] {
    let rows3: Vec<([f64; 3], f64)> = sweep
        .iter()
        .map(|p| {
            (
                [
                    1.0,
                    f64::from(p.prompts) * p.mean_output,
                    f64::from(p.max_output),
                ],
                p.session_s,
            )
        })
        .collect();
    if let Some(c) = least_squares(&rows3) {
        return c;
    }
    let rows2: Vec<([f64; 2], f64)> = rows3.iter().map(|(x, y)| ([x[0], x[1]], *y)).collect();
    if let Some([b0, b1]) = least_squares(&rows2) {
        return [b0, b1, 0.0];
    }
    [0.0; 3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_plane() {
        let rows: Vec<([f64; 3], f64)> = (0..10)
            .map(|i| {
                let x1 = f64::from(i);
                let x2 = f64::from(i * i % 7);
                ([1.0, x1, x2], 2.0 + 3.0 * x1 - 0.5 * x2)
            })
            .collect();
        let c = least_squares(&rows).unwrap();
        for (got, want) in c.iter().zip([2.0, 3.0, -0.5]) {
            assert!((got - want).abs() < 1e-9, "{c:?}");
        }
        // Collinear features are singular.
        let flat: Vec<([f64; 2], f64)> = (0..5).map(|i| ([1.0, 1.0], f64::from(i))).collect();
        assert!(least_squares(&flat).is_none());
    }

    /// The normal equations of `rows` solved by Gaussian elimination with partial pivoting
    /// (what `least_squares` did before nalgebra): the oracle of what goes wrong.
    fn normal_equations<const D: usize>(rows: &[([f64; D], f64)]) -> Option<[f64; D]> {
        let mut a = [[0.0; D]; D];
        let mut b = [0.0; D];
        for (x, y) in rows {
            for i in 0..D {
                b[i] += x[i] * y;
                for j in 0..D {
                    a[i][j] += x[i] * x[j];
                }
            }
        }
        let scale = (0..D).map(|i| a[i][i].abs()).fold(0.0, f64::max);
        for col in 0..D {
            let pivot = (col..D).max_by(|&r, &s| a[r][col].abs().total_cmp(&a[s][col].abs()))?;
            if a[pivot][col].abs() <= 1e-10 * scale.max(1e-300) {
                return None;
            }
            a.swap(col, pivot);
            b.swap(col, pivot);
            let pivot_row = a[col];
            for r in 0..D {
                if r != col {
                    let f = a[r][col] / pivot_row[col];
                    for (cell, &p) in a[r].iter_mut().zip(&pivot_row).skip(col) {
                        *cell -= f * p;
                    }
                    b[r] -= f * b[col];
                }
            }
        }
        let x: [f64; D] = std::array::from_fn(|i| b[i] / a[i][i]);
        x.iter().all(|v| v.is_finite()).then_some(x)
    }

    /// Two nearly collinear features (the third column differs from the second by 1e-7 of a
    /// pattern): the design's condition number is about 1e8, its normal equations' about
    /// 1e16, past what f64 elimination resolves. The SVD recovers the known coefficients; the
    /// normal equations call the system singular or return wrong ones.
    #[test]
    fn least_squares_solves_an_ill_conditioned_design() {
        let truth = [2.0, 3.0, -0.5];
        let rows: Vec<([f64; 3], f64)> = (0..20)
            .map(|i| {
                let x1 = f64::from(i);
                let x2 = x1 + 1e-7 * f64::from(i * i % 7);
                ([1.0, x1, x2], truth[0] + truth[1] * x1 + truth[2] * x2)
            })
            .collect();
        let design = DMatrix::from_fn(rows.len(), 3, |r, c| rows[r].0[c]);
        let singular = design.singular_values();
        let condition = singular.max() / singular.min();
        assert!((1e7..1e10).contains(&condition), "condition {condition:e}");
        let error = |c: [f64; 3]| {
            c.iter()
                .zip(truth)
                .map(|(got, want)| (got - want).abs())
                .fold(0.0, f64::max)
        };
        let c = least_squares(&rows).expect("full rank");
        assert!(error(c) < 1e-5, "{c:?}");
        match normal_equations(&rows) {
            None => {}
            Some(wrong) => assert!(error(wrong) > 1e-2, "{wrong:?}"),
        }
    }
}
