//! The topic-affinity routing model (CAPS's request model, caps.txt; docs/serving-family.md,
//! "Expert routing"): per topic and MoE layer a routing distribution over the `E` routed experts
//! drawn from a symmetric Dirichlet(`concentration`) (a small concentration puts most of a
//! topic's mass on a few experts, the semantic hotspot); a request mixes its own topic with one
//! secondary topic, `p[l] = purity x a[t][l] + (1 - purity) x a[s][l]`, and its prompt of `n`
//! tokens loads expert `e` of layer `l` with the *expected* `min(n, n x top_k x p[l][e])` tokens
//! (an expert sees a token at most once), kept in f32 rather than sampled per token. The router
//! dry-run sees that vector, or with `prediction_noise > 0` each entry times `1 + noise x z`,
//! `z` standard normal, clamped at zero. The caps family's request model and the serving
//! family's `experts.routing.kind = "affinity"` both compute their load vectors here.

use crate::rng::SimRng;
use multiversion::multiversion;
use rand_distr::{Distribution, Gamma, StandardNormal};

/// Per-topic, per-layer expert routing distributions.
#[derive(Clone, Debug)]
pub struct TopicAffinities {
    n_layers: usize,
    n_experts: usize,
    /// `[topic][layer][expert]`, every (topic, layer) row sums to 1.
    probs: Vec<f32>,
}

impl TopicAffinities {
    /// Draws `n_topics` x `n_layers` Dirichlet(`concentration`) distributions over `n_experts`.
    pub fn generate(
        n_topics: usize,
        n_layers: usize,
        n_experts: usize,
        concentration: f64,
        rng: &mut SimRng,
    ) -> Self {
        assert!(n_topics > 0 && n_layers > 0 && n_experts > 0 && concentration > 0.0);
        let gamma = Gamma::new(concentration, 1.0).expect("positive concentration");
        let mut probs = Vec::with_capacity(n_topics * n_layers * n_experts);
        let mut row = vec![0.0f64; n_experts];
        for _ in 0..n_topics * n_layers {
            let mut total = 0.0;
            for value in row.iter_mut() {
                // Guard against a row of underflowed zeros at tiny concentrations.
                *value = gamma.sample(rng).max(f64::MIN_POSITIVE);
                total += *value;
            }
            probs.extend(row.iter().map(|v| (v / total) as f32));
        }
        TopicAffinities {
            n_layers,
            n_experts,
            probs,
        }
    }

    pub fn n_topics(&self) -> usize {
        self.probs.len() / (self.n_layers * self.n_experts)
    }
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }
    /// Entries of one load vector: layers x experts.
    pub fn dims(&self) -> usize {
        self.n_layers * self.n_experts
    }
    /// The routing distributions of `topic`, layer-major.
    pub fn topic(&self, topic: usize) -> &[f32] {
        let dims = self.dims();
        &self.probs[topic * dims..(topic + 1) * dims]
    }

    /// The expected load vector of a prompt of `prompt_tokens` tokens of `topic` mixed with
    /// `secondary` (weight `1 - purity`), each token routed to `top_k` experts per layer:
    /// `min(n, n x top_k x p)` per (layer, expert), layer-major, written into `buffer`.
    pub fn expected_load(
        &self,
        topic: usize,
        secondary: usize,
        purity: f64,
        prompt_tokens: u32,
        top_k: usize,
        buffer: &mut Vec<f32>,
    ) {
        let n = prompt_tokens as f32;
        let scale = n * top_k as f32;
        buffer.clear();
        mixed_load(
            self.topic(topic),
            self.topic(secondary),
            purity as f32,
            scale,
            n,
            buffer,
        );
    }
}

/// `min(n, scale x (purity x a + (1 - purity) x b))` of each pair of `own` and `other` into
/// `buffer`, compiled for baseline x86-64 and for AVX (picked at run time): the same IEEE
/// operations per entry either way (no fused multiply-add), so the same bits, eight entries
/// an instruction where the CPU has AVX.
#[multiversion(targets("x86_64+avx"))]
fn mixed_load(own: &[f32], other: &[f32], purity: f32, scale: f32, n: f32, buffer: &mut Vec<f32>) {
    buffer.extend(
        own.iter()
            .zip(other)
            .map(|(a, b)| (scale * (purity * a + (1.0 - purity) * b)).min(n)),
    );
}

/// The router dry-run's prediction of `load`: each entry times `1 + noise x z` (`z` standard
/// normal from `rng`, one per entry in order), clamped at zero; `None` when `noise` is 0 (the
/// prediction is exact).
pub fn noisy_prediction(load: &[f32], noise: f64, rng: &mut SimRng) -> Option<Vec<f32>> {
    (noise > 0.0).then(|| {
        load.iter()
            .map(|&value| {
                let z: f64 = StandardNormal.sample(rng);
                (value as f64 * (1.0 + noise * z)).max(0.0) as f32
            })
            .collect()
    })
}

/// `sum = 0 + value` (`first`) or `sum += value`, each optionally times `scale`, entry by
/// entry, compiled for baseline x86-64 and for AVX (picked at run time): the same IEEE
/// operations per entry either way (no fused multiply-add), so the same bits, eight entries an
/// instruction with AVX. `first` gives the bits of a zeroed `sums` plus `values` (the addition
/// onto +0 is kept: it turns -0 into +0) without zeroing it first.
#[multiversion(targets("x86_64+avx"))]
fn add_scaled(sums: &mut [f32], values: &[f32], scale: Option<f32>, first: bool) {
    match (scale, first) {
        (None, false) => {
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum += *value;
            }
        }
        (None, true) => {
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum = 0.0 + *value;
            }
        }
        (Some(scale), false) => {
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum += *value * scale;
            }
        }
        (Some(scale), true) => {
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum = 0.0 + *value * scale;
            }
        }
    }
}

/// A static batch's expected routing kept between batches (`layers x experts` each): what a
/// replica priced from expected routing hands its step cost as
/// `StepWork::expected_routing`.
pub struct BatchRouting {
    layers: usize,
    prefill: Vec<f32>,
    decode: Vec<f32>,
    /// Whether `decode` holds only zeros (it is not rewritten for batches without decodes).
    decode_zero: bool,
}

impl BatchRouting {
    pub fn new(layers: usize, experts: usize) -> BatchRouting {
        BatchRouting {
            layers,
            prefill: vec![0.0; layers * experts],
            decode: vec![0.0; layers * experts],
            decode_zero: true,
        }
    }

    /// The expected routing of the batch of `requests` (load vector, prompt tokens): the
    /// prefill is the sum of their loads (the prefill's routed tokens per layer and expert),
    /// in order onto zero; the decode, when the batch has decode passes (`decodes`), the sum
    /// of each load / its prompt tokens (one decode pass routes one token per request as its
    /// prompt did on average), else zero.
    pub fn of<'a>(
        &mut self,
        requests: impl Iterator<Item = (&'a [f32], u32)>,
        decodes: bool,
    ) -> super::ExpectedRouting<'_> {
        let mut first = true;
        for (load, prompt_tokens) in requests {
            add_scaled(&mut self.prefill, load, None, first);
            if decodes {
                let scale = 1.0 / prompt_tokens as f32;
                add_scaled(&mut self.decode, load, Some(scale), first);
            }
            first = false;
        }
        if first {
            self.prefill.fill(0.0);
        }
        if decodes && !first {
            self.decode_zero = false;
        } else if !self.decode_zero {
            self.decode.fill(0.0);
            self.decode_zero = true;
        }
        super::ExpectedRouting {
            layers: self.layers,
            prefill: &self.prefill,
            decode: &self.decode,
        }
    }

    /// The last batch's prefill routing per layer and expert (its expert load).
    pub fn prefill(&self) -> &[f32] {
        &self.prefill
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    #[test]
    fn batch_routing_is_the_sum_onto_zeros_bit_for_bit() {
        // Loads with -0, tiny and large entries; batches with and without decodes, in turn,
        // so that a batch without decodes follows one with them.
        let loads: Vec<Vec<f32>> = (0..5)
            .map(|r| {
                (0..37)
                    .map(|j| match (r * 37 + j) % 6 {
                        0 => -0.0,
                        1 => 1e-30 * j as f32,
                        2 => 0.1 * (r + 1) as f32,
                        _ => (j * j) as f32 / 3.0 + r as f32,
                    })
                    .collect()
            })
            .collect();
        let prompts = [3u32, 17, 1, 128, 7];
        let mut routing = BatchRouting::new(1, 37);
        for (batch, decodes) in [(0..3, true), (1..5, false), (2..3, true), (0..0, false)] {
            let (mut prefill, mut decode) = (vec![0.0f32; 37], vec![0.0f32; 37]);
            for r in batch.clone() {
                for j in 0..37 {
                    prefill[j] += loads[r][j];
                    if decodes {
                        decode[j] += loads[r][j] * (1.0 / prompts[r] as f32);
                    }
                }
            }
            let got = routing.of(batch.map(|r| (&loads[r][..], prompts[r])), decodes);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(got.prefill), bits(&prefill));
            assert_eq!(bits(got.decode), bits(&decode));
        }
    }

    #[test]
    fn affinity_rows_are_distributions() {
        let affinities = TopicAffinities::generate(5, 4, 60, 0.3, &mut stream(3, "topics"));
        for topic in 0..5 {
            for row in affinities.topic(topic).chunks(60) {
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-4, "row sums to {sum}");
                assert!(row.iter().all(|p| *p >= 0.0));
            }
        }
    }

    #[test]
    fn small_concentration_makes_hotspots() {
        // With concentration 0.3 over 60 experts the top 4 experts of a layer carry far more than
        // the 4/60 = 6.7% a uniform router gives.
        let affinities = TopicAffinities::generate(8, 24, 60, 0.3, &mut stream(3, "topics"));
        let mut top4_share = 0.0;
        let mut rows = 0;
        for topic in 0..8 {
            for row in affinities.topic(topic).chunks(60) {
                let mut sorted = row.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                top4_share += sorted[..4].iter().sum::<f32>();
                rows += 1;
            }
        }
        let mean = top4_share / rows as f32;
        assert!(mean > 0.3, "mean top-4 share {mean}");
    }
}
