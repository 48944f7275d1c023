//! Numeric helpers shared by the CPU references: bf16 <-> f32 conversion, the SiLU
//! activation, an f32 dot product, and seeded input generators that never produce zeros.

use half::bf16;
use rand::RngExt;

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
    let mut rng = sim::rng::stream(seed, name);
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
    let mut rng = sim::rng::stream(seed, name);
    (0..len).map(|_| rng.random_range(0.1f32..=1.0)).collect()
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
    fn narrow_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
        assert_eq!(narrow(1.0 + 1.0 / 256.0).to_f32(), 1.0);
        assert_eq!(narrow(1.0 + 3.0 / 256.0).to_f32(), 1.0 + 4.0 / 256.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    }
}
