//! Expert-load statistics of a step's routing (the metrics `imbalance` and `load_cv`, defined
//! in docs/metrics.md): per MoE layer the most loaded expert over the mean expert load (caps.txt's
//! "max expert load / mean expert load"), averaged over layers, and the coefficient of variation
//! of the load vector; `ExpertLoad` accumulates them over a replica's steps, so any family that
//! routes tokens to experts reports them through the one recorder.

/// Coefficient of variation (population standard deviation / mean) over all entries of
/// `load`; 0 when it is empty or its mean is not positive. Every layer's entries sum to the
/// same total (prompt tokens x top_k), so the pooled CV^2 is the mean of the per-layer CV^2.
pub fn coefficient_of_variation(load: &[f32]) -> f64 {
    if load.is_empty() {
        return 0.0;
    }
    let n = load.len() as f64;
    let mean = sum_of(load) / n;
    if mean <= 0.0 {
        return 0.0;
    }
    let mut lanes = [0.0f64; LANES];
    let mut chunks = load.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            let d = f64::from(x) - mean;
            *lane += d * d;
        }
    }
    let mut squares: f64 = lanes.iter().sum();
    for &x in chunks.remainder() {
        let d = f64::from(x) - mean;
        squares += d * d;
    }
    (squares / n).sqrt() / mean
}

// The hot loops below keep LANES independent accumulators, so that they vectorize and do not
// wait on one long chain of float additions (the compiler may not reorder float sums itself).
const LANES: usize = 8;

/// Sum of `values` in f64.
pub(crate) fn sum_of(values: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(x);
        }
    }
    lanes.iter().sum::<f64>()
        + chunks
            .remainder()
            .iter()
            .map(|&x| f64::from(x))
            .sum::<f64>()
}

/// Largest of `values`, and at least 0 (negative entries count as 0; a NaN wins and makes
/// the curve lookup fail loudly). Compares the bit patterns as i32: for non-negative floats
/// the order is the same, and an integer max vectorizes where a float max does not.
pub fn max_of(values: &[f32]) -> f32 {
    let mut lanes = [0i32; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = (*lane).max(x.to_bits() as i32);
        }
    }
    let mut max = lanes.iter().copied().fold(0, i32::max);
    for &x in chunks.remainder() {
        max = max.max(x.to_bits() as i32);
    }
    f32::from_bits(max as u32)
}

/// Mean over layers of (most loaded expert / mean expert load); layers with no load are
/// skipped, and an all-zero load is 1.0 (nothing waits).
pub fn imbalance(load: &[f32], n_experts: usize) -> f64 {
    assert!(
        n_experts > 0 && load.len().is_multiple_of(n_experts),
        "imbalance: {} entries are not whole layers of {n_experts} experts",
        load.len()
    );
    let mut sum = 0.0;
    let mut layers = 0usize;
    for layer in load.chunks_exact(n_experts) {
        let total = sum_of(layer);
        if total > 0.0 {
            let max = max_of(layer);
            sum += f64::from(max) / (total / n_experts as f64);
            layers += 1;
        }
    }
    if layers == 0 {
        1.0
    } else {
        sum / layers as f64
    }
}

/// The expert-load statistics of a replica's MoE steps, summed so that replicas merge.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExpertLoad {
    /// Steps whose routing was recorded.
    pub steps: u64,
    /// Sum over those steps of `imbalance`.
    pub imbalance_sum: f64,
    /// Sum over those steps of `coefficient_of_variation`.
    pub cv_sum: f64,
    /// Sum over those steps of `coefficient_of_variation` x the replica's imbalance
    /// sensitivity (`ReplicaRecorder::with_imbalance_sensitivity`).
    pub factor_sum: f64,
}

impl ExpertLoad {
    /// Records one step's load (`layers x n_experts` tokens, layer-major), its CV weighted by
    /// `sensitivity` for the imbalance factor.
    pub fn add(&mut self, load: &[f32], n_experts: usize, sensitivity: f64) {
        self.steps += 1;
        self.imbalance_sum += imbalance(load, n_experts);
        let cv = coefficient_of_variation(load);
        self.cv_sum += cv;
        self.factor_sum += cv * sensitivity;
    }

    /// Adds another replica's statistics.
    pub fn merge(&mut self, other: &ExpertLoad) {
        self.steps += other.steps;
        self.imbalance_sum += other.imbalance_sum;
        self.cv_sum += other.cv_sum;
        self.factor_sum += other.factor_sum;
    }

    /// caps.txt's imbalance factor: 1 + the mean over the recorded steps of CV x sensitivity
    /// (the `cv` execution model's sensitivity where it prices the steps, else 1); 1 when no
    /// step routed experts.
    pub fn imbalance_factor(&self) -> f64 {
        if self.steps == 0 {
            1.0
        } else {
            1.0 + self.factor_sum / self.steps as f64
        }
    }

    /// Mean over the recorded steps of the per-layer max/mean expert load; 1 (balanced) when no
    /// step routed experts (a dense model).
    pub fn imbalance(&self) -> f64 {
        if self.steps == 0 {
            1.0
        } else {
            self.imbalance_sum / self.steps as f64
        }
    }

    /// Mean over the recorded steps of the load vector's coefficient of variation; 0 when no
    /// step routed experts.
    pub fn load_cv(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.cv_sum / self.steps as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficient_of_variation_and_imbalance_of_simple_loads() {
        assert_eq!(coefficient_of_variation(&[]), 0.0);
        assert_eq!(coefficient_of_variation(&[0.0, 0.0]), 0.0);
        assert_eq!(coefficient_of_variation(&[3.0; 120]), 0.0);
        assert!((coefficient_of_variation(&[1.0, 3.0]) - 0.5).abs() < 1e-12);
        assert_eq!(imbalance(&[5.0; 120], 60), 1.0);
        assert_eq!(imbalance(&[0.0; 120], 60), 1.0);
        // Layer 0: [4, 0] -> max/mean 2; layer 1: [1, 1] -> 1.
        assert_eq!(imbalance(&[4.0, 0.0, 1.0, 1.0], 2), 1.5);
    }

    #[test]
    fn lane_reductions_match_plain_loops() {
        let values: Vec<f32> = (0..61)
            .map(|i| ((i * 37) % 23) as f32 * 0.75 - 3.0)
            .collect();
        let plain_max = values.iter().copied().fold(0.0f32, f32::max);
        assert_eq!(max_of(&values), plain_max);
        assert_eq!(max_of(&[-2.0, -1.0]), 0.0);
        assert_eq!(max_of(&[]), 0.0);
        let plain_sum: f64 = values.iter().map(|&x| f64::from(x)).sum();
        assert!((sum_of(&values) - plain_sum).abs() < 1e-9);
    }

    #[test]
    fn accumulated_statistics_are_means_over_steps_and_merge_by_sums() {
        let mut a = ExpertLoad::default();
        assert_eq!((a.imbalance(), a.load_cv()), (1.0, 0.0), "no MoE step");
        a.add(&[4.0, 0.0, 1.0, 1.0], 2, 1.0); // imbalance 1.5, CV 1.5 / 1.5 = 1
        a.add(&[2.0, 2.0, 2.0, 2.0], 2, 1.0); // imbalance 1, CV 0
        assert_eq!(a.imbalance(), 1.25);
        assert!((a.load_cv() - 0.5).abs() < 1e-12);
        let mut b = ExpertLoad::default();
        b.add(&[3.0, 1.0], 2, 1.0); // imbalance 1.5, CV 0.5
        a.merge(&b);
        assert_eq!(a.steps, 3);
        assert!((a.imbalance() - 4.0 / 3.0).abs() < 1e-12);
        assert!((a.load_cv() - 0.5).abs() < 1e-12);
    }
}
