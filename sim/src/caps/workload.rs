//! The CAPS request model: semantic topics with per-layer expert-affinity distributions, each
//! request's expert-load vector (the tokens its prompt routes to every expert of every MoE layer),
//! and the router dry-run's prediction of that vector.
//!
//! Model. Topic `t` has, for every MoE layer `l`, a routing distribution `a[t][l]` over the `E`
//! routed experts drawn from a symmetric Dirichlet(`affinity_concentration`): a small
//! concentration puts most of a topic's routing mass on a few experts (the semantic hotspot of
//! caps.txt: "Request 1 (Python) -> Experts [12, 15, 23, 45]"). A request of topic `t` mixes its
//! topic with one secondary topic `s` drawn uniformly per request (a prompt is never about one
//! thing only): `p[l] = purity * a[t][l] + (1 - purity) * a[s][l]`. Its prompt of `n` tokens
//! routes each token to `top_k` distinct experts per layer, so the expected load is
//! `load[l][e] = min(n, n * top_k * p[l][e])` (an expert sees a token at most once). Loads are
//! kept as expected counts (f32) rather than sampled per token: sampling every token's routing
//! would cost `n * top_k * L` draws per request and would add only multinomial noise around the
//! same expectation. The router dry-run returns the exact vector, or the vector with independent
//! multiplicative Gaussian noise of relative standard deviation `prediction_noise` per entry
//! (clamped at zero).
//!
//! A request's token counts and secondary topic are drawn when it arrives (`make_request`); its
//! load vector and the dry-run's prediction are computed when it first becomes a batch
//! candidate (`route`), which the scheduler does in arrival order, so the `prediction` stream is
//! drawn in the same order either way and memory follows the candidate window, not the queue.

use crate::arrivals::Arrival;
use crate::rng::SimRng;
use crate::time::SimTime;
use rand::RngExt;
use rand_distr::{Distribution, Gamma, LogNormal, StandardNormal};
use serde::{Deserialize, Serialize};

/// A token-count distribution: log-normal with the given median and log-space sigma, rounded
/// and clamped to `[1, max]`. Used when the arrival process (a trace) gives no token count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenDistribution {
    pub median: f64,
    pub sigma: f64,
    pub max: u32,
}

impl TokenDistribution {
    fn sample(&self, rng: &mut SimRng) -> u32 {
        // Validated beforehand: median > 0, sigma >= 0, max >= 1.
        let dist =
            LogNormal::new(self.median.ln(), self.sigma).expect("validated token distribution");
        let value: f64 = dist.sample(rng);
        (value.round() as u32).clamp(1, self.max)
    }
}

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
    /// Entries of one load vector: layers x experts.
    pub fn dims(&self) -> usize {
        self.n_layers * self.n_experts
    }
    /// The routing distributions of `topic`, layer-major.
    pub fn topic(&self, topic: usize) -> &[f32] {
        let dims = self.dims();
        &self.probs[topic * dims..(topic + 1) * dims]
    }
}

/// The parameters of the request model (the `[workload]` table minus what the arrivals decide).
#[derive(Clone, Debug)]
pub struct RequestModel {
    pub affinities: TopicAffinities,
    pub top_k: usize,
    pub topic_purity: f64,
    pub prompt_tokens: TokenDistribution,
    pub output_tokens: TokenDistribution,
    pub prediction_noise: f64,
}

/// One request in the CAPS serving model.
#[derive(Clone, Debug)]
pub struct MoeRequest {
    pub id: u64,
    pub arrival: SimTime,
    pub topic: u32,
    /// The topic its prompt mixes in with weight `1 - topic_purity`.
    pub secondary_topic: u32,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// What the GPU will see: routed prompt tokens per (layer, expert), layer-major; empty until
    /// [`RequestModel::route`].
    pub true_load: Vec<f32>,
    /// What the router dry-run predicts when it is noisy; `None` when it is exact.
    pub noisy_prediction: Option<Vec<f32>>,
}

impl MoeRequest {
    /// The router dry-run's load vector: what the batch selectors see.
    pub fn predicted(&self) -> &[f32] {
        self.noisy_prediction.as_deref().unwrap_or(&self.true_load)
    }
}

/// The random streams a request's arrival draws from, one per concern (the router dry-run's
/// noise has its own, `"prediction"`, passed to [`RequestModel::route`]).
pub struct RequestStreams {
    pub tokens: SimRng,
    pub mixing: SimRng,
}

impl RequestModel {
    /// Builds request `id` for `arrival`: token counts the arrival left open and the secondary
    /// topic are drawn; the load vector is left to [`Self::route`].
    pub fn make_request(
        &self,
        id: u64,
        arrival: &Arrival,
        streams: &mut RequestStreams,
    ) -> MoeRequest {
        let prompt_tokens = arrival
            .prompt_tokens
            .filter(|&n| n > 0)
            .unwrap_or_else(|| self.prompt_tokens.sample(&mut streams.tokens));
        let output_tokens = arrival
            .output_tokens
            .filter(|&n| n > 0)
            .unwrap_or_else(|| self.output_tokens.sample(&mut streams.tokens));
        let n_topics = self.affinities.n_topics();
        let topic = arrival.topic as usize % n_topics;
        let secondary = streams.mixing.random_range(0..n_topics);
        MoeRequest {
            id,
            arrival: arrival.time,
            topic: topic as u32,
            secondary_topic: secondary as u32,
            prompt_tokens,
            output_tokens,
            true_load: Vec::new(),
            noisy_prediction: None,
        }
    }

    /// The router dry-run of `request`: its load vector, written into `buffer` (a recycled
    /// vector of a served request, which spares an allocation per request), and the noisy
    /// prediction drawn from `prediction` when `prediction_noise > 0`.
    pub fn route(&self, request: &mut MoeRequest, prediction: &mut SimRng, mut buffer: Vec<f32>) {
        let own = self.affinities.topic(request.topic as usize);
        let other = self.affinities.topic(request.secondary_topic as usize);
        let n = request.prompt_tokens as f32;
        let scale = n * self.top_k as f32;
        let purity = self.topic_purity as f32;
        buffer.clear();
        buffer.extend(
            own.iter()
                .zip(other)
                .map(|(a, b)| (scale * (purity * a + (1.0 - purity) * b)).min(n)),
        );
        request.noisy_prediction = (self.prediction_noise > 0.0).then(|| {
            buffer
                .iter()
                .map(|&value| {
                    let z: f64 = StandardNormal.sample(prediction);
                    (value as f64 * (1.0 + self.prediction_noise * z)).max(0.0) as f32
                })
                .collect()
        });
        request.true_load = buffer;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn model(noise: f64) -> RequestModel {
        RequestModel {
            affinities: TopicAffinities::generate(4, 3, 10, 0.3, &mut stream(1, "topics")),
            top_k: 2,
            topic_purity: 0.8,
            prompt_tokens: TokenDistribution {
                median: 100.0,
                sigma: 0.5,
                max: 1000,
            },
            output_tokens: TokenDistribution {
                median: 10.0,
                sigma: 0.0,
                max: 1000,
            },
            prediction_noise: noise,
        }
    }
    /// Request `id` made and routed.
    fn routed(
        model: &RequestModel,
        id: u64,
        arrival: &Arrival,
        s: &mut RequestStreams,
    ) -> MoeRequest {
        let mut request = model.make_request(id, arrival, s);
        assert!(request.true_load.is_empty(), "not routed before `route`");
        model.route(&mut request, &mut stream(1, "pred"), Vec::new());
        request
    }
    fn streams() -> RequestStreams {
        RequestStreams {
            tokens: stream(1, "tokens"),
            mixing: stream(1, "mix"),
        }
    }
    fn arrival(topic: u32, prompt: Option<u32>) -> Arrival {
        Arrival {
            time: SimTime(5),
            topic,
            prompt_tokens: prompt,
            output_tokens: None,
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

    #[test]
    fn each_layer_routes_top_k_per_token() {
        let model = model(0.0);
        let request = routed(&model, 0, &arrival(1, Some(50)), &mut streams());
        assert_eq!(request.prompt_tokens, 50);
        for layer in request.true_load.chunks(10) {
            let sum: f32 = layer.iter().sum();
            // top_k = 2 routings per token, minus what the one-visit-per-token cap removes.
            assert!(sum <= 100.0 + 1e-3 && sum > 60.0, "layer load {sum}");
            assert!(layer.iter().all(|v| *v <= 50.0 + 1e-4));
        }
        assert_eq!(request.true_load, request.predicted());
    }

    #[test]
    fn same_topic_requests_share_hot_experts() {
        let model = model(0.0);
        let mut s = streams();
        let a = routed(&model, 0, &arrival(2, Some(100)), &mut s);
        let b = routed(&model, 1, &arrival(2, Some(100)), &mut s);
        let c = routed(&model, 2, &arrival(3, Some(100)), &mut s);
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        assert!(dot(&a.true_load, &b.true_load) > dot(&a.true_load, &c.true_load));
    }

    #[test]
    fn noisy_prediction_differs_but_stays_non_negative() {
        let model = model(0.3);
        let request = routed(&model, 0, &arrival(0, Some(80)), &mut streams());
        assert_ne!(request.true_load, request.predicted());
        assert!(request.predicted().iter().all(|v| *v >= 0.0));
        let rel: f32 =
            request.predicted().iter().sum::<f32>() / request.true_load.iter().sum::<f32>();
        assert!((rel - 1.0).abs() < 0.2, "noise is zero-mean: ratio {rel}");
    }
}
