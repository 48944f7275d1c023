//! Numeric helpers shared by the CPU references: bf16 <-> f32 conversion, the SiLU
//! activation, an f32 dot product, seeded input generators that never produce zeros, and the
//! relative Frobenius error every GPU test compares with.

use half::bf16;
use rand::RngExt;
use std::sync::Arc;

/// A weight matrix, shared: a backend keeps a device copy of a weight it has seen (the CUDA
/// backend uploads each one once, keyed by the allocation), so problems that differ only in
/// their inputs share one `Arc` instead of a fresh copy of the weights.
pub type Weights = Arc<[bf16]>;

/// Converts bf16 values to f32 (exact: every bf16 is an f32).
pub fn widen(values: &[bf16], out: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(values) {
        *o = v.to_f32();
    }
}

/// Rounds an f32 to bf16 with round-to-nearest-even, as `f32_to_bf16` in the CUDA source.
pub fn narrow(value: f32) -> bf16 {
    bf16::from_f32(value)
}

/// SiLU, `x / (1 + exp(-x))`, in f32 as the CUDA source computes it.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// f32 dot product with eight partial sums (so the compiler can vectorize it); the
/// summation order differs from the GPU's sequential one by far less than bf16 rounding.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let rest_a = chunks_a.remainder();
    let rest_b = chunks_b.remainder();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for lane in 0..8 {
            lanes[lane] += ca[lane] * cb[lane];
        }
    }
    let mut total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (x, y) in rest_a.iter().zip(rest_b) {
        total += x * y;
    }
    total
}

/// `len` bf16 values with magnitudes in [0.1, 1] x `scale` and random signs (never zero),
/// drawn from the stream `(seed, name)`.
pub fn random_bf16(len: usize, scale: f32, seed: u64, name: &str) -> Vec<bf16> {
    let mut rng = expertsim_scenario::rng::stream(seed, name);
    (0..len)
        .map(|_| {
            let magnitude: f32 = rng.random_range(0.1f32..=1.0);
            let sign = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            bf16::from_f32(sign * magnitude * scale)
        })
        .collect()
}

/// Like [`random_bf16`] but cheap for very large buffers (the output head's weights):
/// a table of 4093 random values repeated. Timing does not depend on the values.
pub fn synthetic_bf16(len: usize, scale: f32, seed: u64, name: &str) -> Vec<bf16> {
    let table = random_bf16(4093, scale, seed, name);
    (0..len).map(|i| table[i % table.len()]).collect()
}

/// `len` positive f32 weights in [0.1, 1] from the stream `(seed, name)`.
pub fn random_weights(len: usize, seed: u64, name: &str) -> Vec<f32> {
    let mut rng = expertsim_scenario::rng::stream(seed, name);
    (0..len).map(|_| rng.random_range(0.1f32..=1.0)).collect()
}

/// `||got - want||_2 / ||want||_2` over f64 copies: the error of a whole output relative to its
/// size, robust to the few elements a bf16 rounding moves by one ulp. `f64::INFINITY` when the
/// lengths differ or an element of `got` is not finite (an unwritten, poisoned output).
pub fn relative_frobenius(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        diff += (g - w) * (g - w);
        norm += w * w;
    }
    (diff / norm).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_sequential_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 + i as f32 * 0.25).collect();
        let expected: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert!(
            (f64::from(dot(&a, &b)) - expected).abs() < 1e-3,
            "{}",
            dot(&a, &b)
        );
    }

    #[test]
    fn generators_are_seeded_and_never_zero() {
        let a = random_bf16(1000, 0.5, 7, "x");
        assert_eq!(a, random_bf16(1000, 0.5, 7, "x"));
        assert_ne!(a, random_bf16(1000, 0.5, 8, "x"));
        assert!(
            a.iter()
                .all(|v| v.to_f32() != 0.0 && v.to_f32().abs() <= 0.5)
        );
        let s = synthetic_bf16(10_000, 1.0, 7, "w");
        assert!(s.iter().all(|v| v.to_f32() != 0.0));
    }

    #[test]
    fn relative_frobenius_is_the_norm_ratio_and_refuses_unwritten_outputs() {
        let want = [3.0, 4.0];
        assert_eq!(relative_frobenius(&want, &want), 0.0);
        // |(0.3, 0.4)| / |(3, 4)| = 0.5 / 5.
        assert!((relative_frobenius(&[3.3, 4.4], &want) - 0.1).abs() < 1e-12);
        assert_eq!(relative_frobenius(&[3.0, f64::NAN], &want), f64::INFINITY);
        assert_eq!(relative_frobenius(&[3.0], &want), f64::INFINITY);
    }

    #[test]
    fn narrow_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
        assert_eq!(narrow(1.0 + 1.0 / 256.0).to_f32(), 1.0);
        assert_eq!(narrow(1.0 + 3.0 / 256.0).to_f32(), 1.0 + 4.0 / 256.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    }
}
