//! Expert-load statistics of a step's routing (the metrics `imbalance` and `load_cv`, defined
//! in docs/metrics.md): per MoE layer the most loaded expert over the mean expert load (caps.txt's
//! "max expert load / mean expert load"), averaged over layers, and the coefficient of variation
//! of the load vector; `ExpertLoad` accumulates them over a replica's steps, so any family that
//! routes tokens to experts reports them through the one recorder.

/// Coefficient of variation (population standard deviation / mean) over all entries of
/// `load`; 0 when it is empty or its mean is not positive. Every layer's entries sum to the
/// same total (prompt tokens x top_k), so the pooled CV^2 is the mean of the per-layer CV^2.
pub fn coefficient_of_variation(load: &[f32]) -> f64 {
    cv_about(load, sum_of(load), f64::from)
}

/// The coefficient of variation of `load` (each entry's value by `value`) whose entries sum
/// to `sum`: the squared deviations from the mean summed in `LANES` lanes, then the rest.
#[inline(always)]
fn cv_about<T: Copy>(load: &[T], sum: f64, value: impl Fn(T) -> f64) -> f64 {
    if load.is_empty() {
        return 0.0;
    }
    let n = load.len() as f64;
    let mean = sum / n;
    if mean <= 0.0 {
        return 0.0;
    }
    let mut lanes = [0.0f64; LANES];
    let mut chunks = load.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            let d = value(x) - mean;
            *lane += d * d;
        }
    }
    let mut squares: f64 = lanes.iter().sum();
    for &x in chunks.remainder() {
        let d = value(x) - mean;
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
    imbalance_by(load, n_experts, |layer| {
        (sum_of(layer), f64::from(max_of(layer)))
    })
}

/// `imbalance` and `coefficient_of_variation` of whole counts whose every layer sums below 2^24
/// (`StepLoad::Counts`): the same bits as of the counts as `f32`. Any `f64` sum of them is
/// exact in any order, so a layer's is its whole-number sum, as is the whole load's; the largest
/// count is the largest `f32`, and each deviation reads the same value. Every count is below
/// 2^24, so it is its own `i32` (whose maximum and conversion to `f64` vectorize at SSE2).
fn stats_of_counts(counts: &[u32], n_experts: usize) -> (f64, f64) {
    let mut all = 0u64;
    let imbalance = imbalance_by(counts, n_experts, |layer| {
        let total: u32 = layer.iter().sum();
        let max = layer.iter().fold(0i32, |max, &n| max.max(n as i32));
        all += u64::from(total);
        (f64::from(total), f64::from(max))
    });
    (
        imbalance,
        cv_about(counts, all as f64, |n| f64::from(n as i32)),
    )
}

/// `imbalance` over the layers of `load`, each layer's total and largest entry by
/// `total_and_max`.
#[inline(always)]
fn imbalance_by<T>(
    load: &[T],
    n_experts: usize,
    mut total_and_max: impl FnMut(&[T]) -> (f64, f64),
) -> f64 {
    assert!(
        n_experts > 0 && load.len().is_multiple_of(n_experts),
        "imbalance: {} entries are not whole layers of {n_experts} experts",
        load.len()
    );
    let mut sum = 0.0;
    let mut layers = 0usize;
    for layer in load.chunks_exact(n_experts) {
        let (total, max) = total_and_max(layer);
        if total > 0.0 {
            sum += max / (total / n_experts as f64);
            layers += 1;
        }
    }
    if layers == 0 {
        1.0
    } else {
        sum / layers as f64
    }
}

/// One step's expert load: tokens per expert, `layers x n_experts` entries, layer-major.
#[derive(Clone, Copy, Debug)]
pub enum StepLoad<'a> {
    /// As `f32` sums.
    Floats(&'a [f32]),
    /// In whole tokens, each layer's summing below 2^24, where every `f32` sum of whole
    /// numbers is exact: the statistics are those of the counts as `f32`, bit for bit,
    /// computed without the conversion.
    Counts(&'a [u32]),
}

impl<'a> From<&'a [f32]> for StepLoad<'a> {
    fn from(load: &'a [f32]) -> Self {
        StepLoad::Floats(load)
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
    pub fn add(&mut self, load: StepLoad<'_>, n_experts: usize, sensitivity: f64) {
        let (imbalance, cv) = match load {
            StepLoad::Floats(load) => (imbalance(load, n_experts), coefficient_of_variation(load)),
            StepLoad::Counts(counts) => {
                debug_assert!(
                    counts.chunks(n_experts.max(1)).all(|layer| layer
                        .iter()
                        .map(|&n| u64::from(n))
                        .sum::<u64>()
                        < 1 << 24)
                );
                stats_of_counts(counts, n_experts)
            }
        };
        self.steps += 1;
        self.imbalance_sum += imbalance;
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
    fn whole_counts_give_the_bits_of_their_f32_load() {
        // Loads of whole counts (8, 16 and 60 experts, 1 to 5 layers: whole lanes and a
        // remainder; layers with no load, all-zero loads, counts near 2^24 per layer): the
        // imbalance and CV computed from the counts are the bits of those of the `f32` load.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for round in 0..600 {
            let experts = [8, 16, 60][round % 3];
            let layers = 1 + round % 5;
            let scale = [2, 9, 300, 16_000, (1 << 24) / experts as u64][round % 5];
            let counts: Vec<u32> = (0..layers * experts)
                .map(|i| {
                    if round % 7 == 0 || (round % 4 == 1 && i / experts == 0) {
                        0
                    } else {
                        next(scale) as u32
                    }
                })
                .collect();
            let floats: Vec<f32> = counts.iter().map(|&n| n as f32).collect();
            let (mut a, mut b) = (ExpertLoad::default(), ExpertLoad::default());
            a.add(StepLoad::Counts(&counts), experts, 0.7);
            b.add(StepLoad::Floats(&floats), experts, 0.7);
            let bits = |l: &ExpertLoad| [l.imbalance_sum, l.cv_sum, l.factor_sum].map(f64::to_bits);
            assert_eq!(bits(&a), bits(&b), "round {round}");
        }
    }

    #[test]
    fn accumulated_statistics_are_means_over_steps_and_merge_by_sums() {
        let mut a = ExpertLoad::default();
        assert_eq!((a.imbalance(), a.load_cv()), (1.0, 0.0), "no MoE step");
        a.add(StepLoad::Floats(&[4.0, 0.0, 1.0, 1.0]), 2, 1.0); // imbalance 1.5, CV 1.5 / 1.5 = 1
        a.add(StepLoad::Floats(&[2.0, 2.0, 2.0, 2.0]), 2, 1.0); // imbalance 1, CV 0
        assert_eq!(a.imbalance(), 1.25);
        assert!((a.load_cv() - 0.5).abs() < 1e-12);
        let mut b = ExpertLoad::default();
        b.add(StepLoad::Floats(&[3.0, 1.0]), 2, 1.0); // imbalance 1.5, CV 0.5
        a.merge(&b);
        assert_eq!(a.steps, 3);
        assert!((a.imbalance() - 4.0 / 3.0).abs() < 1e-12);
        assert!((a.load_cv() - 0.5).abs() < 1e-12);
    }
}
