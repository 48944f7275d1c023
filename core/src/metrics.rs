//! Run metrics: per-request latency percentiles from a bounded-memory histogram, throughput,
//! expert-load imbalance, queue depth over time, and the across-seed summaries of a sweep cell.
//! Every metric is defined in docs/metrics.md.

use crate::time::SimTime;
use serde::{Deserialize, Serialize};

/// Latencies are counted in log-linear buckets of 3 significant digits (relative error
/// <= 0.1%), in memory that does not grow with the number of requests: the layout of an HDR
/// histogram (Gil Tene's; the `hdrhistogram` crate's with 3 significant digits and a lowest
/// value of 1 ns), so its quantiles are the crate's to the bit. Values below 2^11 have a bucket
/// each; above, bucket `b` (the value's bit length less 11) holds 1024 sub-buckets of width
/// `2^b`. Bucket `b`'s sub-bucket of a value `v` is the counts' index `b x 1024 + (v >> b)`.
const SUB_BUCKET_BITS: u32 = 11;
const HALF_BUCKET_BITS: u32 = SUB_BUCKET_BITS - 1;

/// The bucket of `nanos`: 0 below 2^11, else its bit length less 11.
#[inline(always)]
fn bucket_of(nanos: u64) -> u32 {
    (64 - SUB_BUCKET_BITS) - (nanos | ((1 << SUB_BUCKET_BITS) - 1)).leading_zeros()
}

/// The counts' index of `nanos` (at most 53 x 1024 + 2047).
#[inline(always)]
fn index_of(nanos: u64) -> usize {
    let bucket = bucket_of(nanos);
    ((bucket << HALF_BUCKET_BITS) as u64 + (nanos >> bucket)) as usize
}

/// The lowest value counted at `index`.
fn lowest_at(index: usize) -> u64 {
    let bucket = (index >> HALF_BUCKET_BITS) as u32;
    if bucket == 0 {
        index as u64
    } else {
        let sub_bucket = (index as u64 & ((1 << HALF_BUCKET_BITS) - 1)) + (1 << HALF_BUCKET_BITS);
        sub_bucket << (bucket - 1)
    }
}

/// The highest value counted with `nanos`: one below the next sub-bucket's lowest, that lowest
/// capped at `u64::MAX` (as the crate caps it), and `u64::MAX` for itself.
fn highest_equivalent(nanos: u64) -> u64 {
    if nanos == u64::MAX {
        return u64::MAX;
    }
    let bucket = bucket_of(nanos);
    ((nanos >> bucket) << bucket).saturating_add(1 << bucket) - 1
}

/// The counts are kept in chunks of 1024 consecutive indices (half a bucket's sub-buckets: one
/// doubling of the value), each allocated when a sample first lands in it, with its total, so
/// that a quantile's scan skips whole chunks and memory follows the range the samples span.
const CHUNK_BITS: u32 = HALF_BUCKET_BITS;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Chunks that cover every `u64` (the largest index, `u64::MAX`'s, is 53 x 1024 + 2047).
const CHUNKS: usize = 55;

/// Streams latency samples into a histogram plus exact sums for the mean.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    /// Samples per index (`index_of`), by chunk of `CHUNK` indices; `None` where none landed.
    chunks: [Option<Box<[u64; CHUNK]>>; CHUNKS],
    /// Each chunk's samples.
    totals: [u64; CHUNKS],
    count: u64,
    /// The largest sample recorded (0 when none).
    max_ns: u64,
    sum_ns: u128,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            chunks: [const { None }; CHUNKS],
            totals: [0; CHUNKS],
            count: 0,
            max_ns: 0,
            sum_ns: 0,
        }
    }
}

/// A chunk of zero counts.
fn empty_chunk() -> Box<[u64; CHUNK]> {
    vec![0u64; CHUNK]
        .into_boxed_slice()
        .try_into()
        .expect("CHUNK counts")
}

impl LatencyRecorder {
    #[inline]
    pub fn record(&mut self, nanos: u64) {
        self.record_n(nanos, 1);
    }
    /// `count` samples of `nanos` (the same as `count` calls of `record`). A count of 0 records
    /// nothing.
    #[inline]
    pub fn record_n(&mut self, nanos: u64, count: u64) {
        if count == 0 {
            return;
        }
        let index = index_of(nanos);
        let chunk = index >> CHUNK_BITS;
        let counts = self.chunks[chunk].get_or_insert_with(empty_chunk);
        let at = &mut counts[index & (CHUNK - 1)];
        *at = at.saturating_add(count);
        self.totals[chunk] = self.totals[chunk].saturating_add(count);
        self.count = self.count.saturating_add(count);
        self.max_ns = self.max_ns.max(nanos);
        self.sum_ns += u128::from(nanos) * u128::from(count);
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    /// Adds every sample of `other` (the recorders of several replicas into one).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        for (chunk, theirs) in other.chunks.iter().enumerate() {
            let Some(theirs) = theirs else { continue };
            let mine = self.chunks[chunk].get_or_insert_with(empty_chunk);
            for (mine, &theirs) in mine.iter_mut().zip(theirs.iter()) {
                *mine = mine.saturating_add(theirs);
            }
            self.totals[chunk] = self.totals[chunk].saturating_add(other.totals[chunk]);
        }
        self.count = self.count.saturating_add(other.count);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
    }
    /// Exact mean in milliseconds (0 when empty).
    pub fn mean_ms(&self) -> f64 {
        if self.count() == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count() as f64 * 1e-6
        }
    }
    /// The `q`-quantile (0..=1) in milliseconds, within 0.1% (0 when empty): the sub-bucket
    /// where `max(1, ceil(q x count))` samples counted up from the lowest are reached, by its
    /// highest value (its lowest at `q = 0`), which is what `hdrhistogram`'s
    /// `value_at_quantile` answers. The maximum (`q >= 1`) is the largest sample's
    /// sub-bucket's highest value, the same number, without the scan.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count() == 0 {
            return 0.0;
        }
        if q >= 1.0 {
            return highest_equivalent(self.max_ns) as f64 * 1e-6;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut below = 0u64;
        for (chunk, &total) in self.totals.iter().enumerate() {
            if below + total < rank {
                below += total;
                continue;
            }
            let counts = self.chunks[chunk].as_ref().expect("a chunk with samples");
            for (offset, &count) in counts.iter().enumerate() {
                below += count;
                if below >= rank {
                    let lowest = lowest_at((chunk << CHUNK_BITS) + offset);
                    let value = if q == 0.0 {
                        lowest
                    } else {
                        highest_equivalent(lowest)
                    };
                    return value as f64 * 1e-6;
                }
            }
        }
        unreachable!("the counts sum to the count, at least the rank")
    }
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            mean_ms: self.mean_ms(),
            p50_ms: self.quantile_ms(0.50),
            p90_ms: self.quantile_ms(0.90),
            p99_ms: self.quantile_ms(0.99),
            max_ms: self.quantile_ms(1.0),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Most points a `DepthTracker` series keeps: past it, every other point is dropped and the grid
/// spacing doubles, so a run's series stays this short however long the run.
pub const MAX_SERIES_POINTS: usize = 2048;

/// Tracks a piecewise-constant count over time (queue depth): its time average, its maximum and
/// samples on a grid (the value in force at each grid instant), without events of its own. The
/// grid starts at the requested spacing and doubles whenever `MAX_SERIES_POINTS` are reached
/// (keeping the points at even grid indices), so memory and output are bounded by design.
#[derive(Clone, Debug)]
pub struct DepthTracker {
    value: u64,
    since: SimTime,
    area_ns: u128,
    max: u64,
    sample_interval_ns: u64,
    next_sample: u64,
    samples: Vec<(f64, u64)>,
}

impl DepthTracker {
    /// `sample_interval_ns = 0` records no time series.
    pub fn new(sample_interval_ns: u64) -> Self {
        DepthTracker {
            value: 0,
            since: SimTime::ZERO,
            area_ns: 0,
            max: 0,
            sample_interval_ns,
            next_sample: 0,
            samples: Vec::new(),
        }
    }
    /// The count changes to `value` at `now`.
    pub fn set(&mut self, now: SimTime, value: u64) {
        if value == self.value {
            // Nothing to close: the next change (or `finish`) advances over this instant with
            // the same value, pushing the same samples and adding the same area (exact integers).
            assert!(now >= self.since, "DepthTracker: time went backwards");
            return;
        }
        self.advance(now);
        self.value = value;
        self.max = self.max.max(value);
    }
    fn advance(&mut self, now: SimTime) {
        assert!(now >= self.since, "DepthTracker: time went backwards");
        if self.sample_interval_ns > 0 {
            while self.next_sample < now.0 {
                if self.samples.len() == MAX_SERIES_POINTS {
                    self.halve();
                    continue;
                }
                self.samples
                    .push((self.next_sample as f64 / 1e9, self.value));
                self.next_sample = self.next_sample.saturating_add(self.sample_interval_ns);
            }
        }
        self.area_ns += u128::from(now.0 - self.since.0) * u128::from(self.value);
        self.since = now;
    }
    /// Keeps the points at even grid indices and doubles the spacing; the next point is the first
    /// of the doubled grid after the last one kept.
    fn halve(&mut self) {
        let mut index = 0;
        self.samples.retain(|_| {
            index += 1;
            index % 2 == 1
        });
        self.sample_interval_ns = self.sample_interval_ns.saturating_mul(2);
        self.next_sample = (self.samples.len() as u64).saturating_mul(self.sample_interval_ns);
    }
    /// Closes the record at `end` and returns (time average, max, samples).
    pub fn finish(mut self, end: SimTime) -> (f64, u64, Vec<(f64, u64)>) {
        self.advance(end);
        let mean = if end.0 == 0 {
            0.0
        } else {
            self.area_ns as f64 / end.0 as f64
        };
        (mean, self.max, self.samples)
    }
}

/// Mean, sample standard deviation and the half-width of a 95% Student-t confidence interval of
/// the mean, across the seeds of one sweep cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcrossSeeds {
    pub mean: f64,
    pub std: f64,
    pub ci95: f64,
    pub n: usize,
}

impl AcrossSeeds {
    pub fn of(values: &[f64]) -> AcrossSeeds {
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let n = values.len();
        assert!(n > 0, "AcrossSeeds::of needs at least one value");
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return AcrossSeeds {
                mean,
                std: 0.0,
                ci95: 0.0,
                n,
            };
        }
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let std = var.sqrt();
        let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
            .expect("n >= 2 gives a valid t distribution")
            .inverse_cdf(0.975);
        AcrossSeeds {
            mean,
            std,
            ci95: t * std / (n as f64).sqrt(),
            n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_equal_samples_records_as_its_samples_one_by_one() {
        let (mut one_by_one, mut runs) = (LatencyRecorder::default(), LatencyRecorder::default());
        for (nanos, count) in [
            (7_000_000u64, 3u64),
            (250_000, 1),
            (7_000_000, 2),
            (9e12 as u64, 4),
        ] {
            for _ in 0..count {
                one_by_one.record(nanos);
            }
            runs.record_n(nanos, count);
        }
        assert_eq!(runs.count(), 10);
        assert_eq!(runs.sum_ns, one_by_one.sum_ns);
        assert_eq!(runs.chunks, one_by_one.chunks);
        assert_eq!(runs.totals, one_by_one.totals);
        assert_eq!(runs.summary(), one_by_one.summary());
    }

    /// The crate whose layout the recorder keeps, fed the same samples: `hdrhistogram` with 3
    /// significant digits, auto-resizing from 1 ns.
    struct Reference(hdrhistogram::Histogram<u64>);

    impl Reference {
        fn new() -> Self {
            Reference(hdrhistogram::Histogram::new(3).expect("valid precision"))
        }
        fn record_n(&mut self, nanos: u64, count: u64) {
            if count > 0 {
                self.0.record_n(nanos, count).expect("auto-resizing");
            }
        }
        fn merge(&mut self, other: &Reference) {
            self.0.add(&other.0).expect("same precision");
        }
        /// `value_at_quantile` in milliseconds (0 when empty): the crate's full scan.
        fn quantile_ms(&self, q: f64) -> f64 {
            if self.0.is_empty() {
                0.0
            } else {
                self.0.value_at_quantile(q) as f64 * 1e-6
            }
        }
    }

    #[test]
    fn the_buckets_are_the_crates() {
        // Every value's lowest and highest equivalents, at each bucket's edges and at random
        // values across the whole u64 range.
        use rand::RngExt;
        let crate_layout = hdrhistogram::Histogram::<u64>::new(3).expect("valid precision");
        let mut rng = crate::rng::stream(4, "recorder-buckets");
        let mut values = vec![0, 1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, u64::MAX];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
        }
        values.extend((0..20_000).map(|_| rng.random::<u64>() >> rng.random_range(0..64)));
        for v in values {
            let lowest = lowest_at(index_of(v));
            assert_eq!(lowest, crate_layout.lowest_equivalent(v), "{v}");
            assert_eq!(
                highest_equivalent(v),
                crate_layout.highest_equivalent(v),
                "{v}"
            );
            assert_eq!(index_of(lowest), index_of(v), "{v}");
        }
    }

    #[test]
    fn every_quantile_is_the_crates() {
        // Random recorders (runs of equal samples, zero counts, values from 0 to the whole u64
        // range) and their running merges, restarted now and then: each quantile, the maximum
        // included, equals the crate's own scan of the same samples to the bit.
        use rand::RngExt;
        let mut rng = crate::rng::stream(9, "recorder-quantiles");
        let quantiles = [
            0.0, 1e-9, 0.001, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999999, 1.0,
        ];
        let (mut merged, mut merged_reference) = (LatencyRecorder::default(), Reference::new());
        for case in 0..300 {
            let (mut recorder, mut reference) = (LatencyRecorder::default(), Reference::new());
            let n = [0, 1, 2, 3, 10, 500, 2048, 3000, 20_000][case % 9];
            for _ in 0..n {
                let nanos = match rng.random_range(0..5u32) {
                    0 => rng.random_range(0..2_000u64),
                    1 => rng.random_range(0..u64::from(u32::MAX)),
                    2 => rng.random::<u64>() >> rng.random_range(0..64),
                    _ => rng.random_range(1_000_000..50_000_000u64),
                };
                let count = rng.random_range(0..4u64);
                recorder.record_n(nanos, count);
                reference.record_n(nanos, count);
            }
            for (recorder, reference) in [(&recorder, &reference), (&merged, &merged_reference)] {
                assert_eq!(recorder.count(), reference.0.len());
                for q in quantiles {
                    assert_eq!(
                        recorder.quantile_ms(q).to_bits(),
                        reference.quantile_ms(q).to_bits(),
                        "{q} of {} samples",
                        recorder.count()
                    );
                }
            }
            if case % 7 == 0 {
                (merged, merged_reference) = (LatencyRecorder::default(), Reference::new());
            }
            merged.merge(&recorder);
            merged_reference.merge(&reference);
        }
    }

    #[test]
    fn latency_quantiles_within_a_tenth_of_a_percent() {
        let mut recorder = LatencyRecorder::default();
        for ms in 1..=1000u64 {
            recorder.record(ms * 1_000_000);
        }
        assert!((recorder.mean_ms() - 500.5).abs() < 1e-9);
        let p99 = recorder.quantile_ms(0.99);
        assert!((p99 - 990.0).abs() / 990.0 < 1e-3, "p99 {p99}");
        let p50 = recorder.quantile_ms(0.5);
        assert!((p50 - 500.0).abs() / 500.0 < 1e-3, "p50 {p50}");
    }

    #[test]
    fn merged_recorders_hold_both_sample_sets() {
        // 1..=500 ms in one, 501..=1000 ms in the other: the merge is the 1..=1000 recorder.
        let (mut low, mut high) = (LatencyRecorder::default(), LatencyRecorder::default());
        for ms in 1..=500u64 {
            low.record(ms * 1_000_000);
            high.record((ms + 500) * 1_000_000);
        }
        low.merge(&high);
        assert_eq!(low.count(), 1000);
        assert!((low.mean_ms() - 500.5).abs() < 1e-9);
        let p99 = low.quantile_ms(0.99);
        assert!((p99 - 990.0).abs() / 990.0 < 1e-3, "p99 {p99}");
    }

    #[test]
    fn depth_series_stays_bounded_and_on_a_doubled_grid() {
        // 10,000 unit-spaced changes: the series keeps at most MAX_SERIES_POINTS points, on a
        // grid of spacing 8 (4096 < 10,000 / 2048 rounds up to the power of two 8), and each
        // point is the value in force at its instant (the value set at t is t here).
        let mut depth = DepthTracker::new(1);
        for t in 0..10_000u64 {
            depth.set(SimTime(t), t);
        }
        let (_, max, samples) = depth.finish(SimTime(10_000));
        assert_eq!(max, 9_999);
        assert!(samples.len() <= MAX_SERIES_POINTS, "{}", samples.len());
        assert!(samples.len() > MAX_SERIES_POINTS / 2);
        for (i, &(seconds, value)) in samples.iter().enumerate() {
            let at = (i as u64) * 8;
            assert_eq!((seconds * 1e9).round() as u64, at);
            assert_eq!(value, at, "point {i}");
        }
    }

    /// Setting the value it already holds changes nothing: a tracker told every value, repeats
    /// included, ends as one told only the changes (samples across several halvings, mean,
    /// max), and its mean is the hand-summed time average.
    #[test]
    fn repeating_the_value_changes_no_record() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(3, "depth-repeats");
        let (mut every, mut changes) = (DepthTracker::new(10), DepthTracker::new(10));
        let (mut t, mut last, mut area) = (0u64, 0u64, 0u128);
        for _ in 0..20_000 {
            let value = rng.random_range(0..3u64);
            every.set(SimTime(t), value);
            if value != last {
                changes.set(SimTime(t), value);
            }
            let gap = rng.random_range(0..40u64);
            area += u128::from(gap) * u128::from(value);
            (t, last) = (t + gap, value);
        }
        let (mean, max, samples) = every.finish(SimTime(t));
        assert_eq!((mean, max, samples.clone()), changes.finish(SimTime(t)));
        assert_eq!(mean, area as f64 / t as f64);
        assert_eq!(max, 2);
        assert!(samples.len() > MAX_SERIES_POINTS / 2, "{}", samples.len());
    }

    #[test]
    fn depth_tracker_time_average_and_grid_samples() {
        let mut depth = DepthTracker::new(1_000);
        depth.set(SimTime(0), 2);
        depth.set(SimTime(1_500), 4);
        depth.set(SimTime(3_000), 0);
        let (mean, max, samples) = depth.finish(SimTime(4_000));
        // (2 * 1500 + 4 * 1500 + 0 * 1000) / 4000
        assert!((mean - 2.25).abs() < 1e-12);
        assert_eq!(max, 4);
        assert_eq!(samples, vec![(0.0, 2), (1e-6, 2), (2e-6, 4), (3e-6, 0)]);
    }

    #[test]
    fn confidence_interval_uses_student_t() {
        let s = AcrossSeeds::of(&[1.0, 2.0, 3.0, 4.0]);
        assert!((s.mean - 2.5).abs() < 1e-12);
        assert!((s.std - 1.2909944).abs() < 1e-6);
        // t(0.975, 3) = 3.182446
        assert!(
            (s.ci95 - 3.182446 * 1.2909944 / 2.0).abs() < 1e-4,
            "{}",
            s.ci95
        );
        assert_eq!(AcrossSeeds::of(&[7.0]).ci95, 0.0);
    }
}

/// Which direction of a metric is an improvement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

/// A scalar metric a family reports: its name in results and figures, a label with its unit, and
/// which direction is better (for improvements over a baseline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub better: Better,
}

/// The metrics a run may report below zero (a signed change or error); every other metric is a
/// count, a time, a rate or a share, never negative, which `expertsim_scenario::partial::cell_file` holds a
/// cell file read back (a resumed or merged sweep) to (its test holds every name here to a
/// registered family's metric).
pub const SIGNED_METRICS: &[&str] = &["accuracy_change_pp", "prediction_error_pct"];

/// What one simulation run of any family reports: its scalar metrics (every name listed in the
/// family's `MetricInfo` table, in that order) and family-specific detail (time series, mappings,
/// timelines) as JSON for the result document and the figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOutput {
    pub scalars: Vec<(String, f64)>,
    pub details: serde_json::Value,
}

impl RunOutput {
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}
