//! The CAPS request model: semantic topics with per-layer expert-affinity distributions, each
//! request's expert-load vector (the tokens its prompt routes to every expert of every MoE layer),
//! and the router dry-run's prediction of that vector.
//!
//! Model: `serving::topic_affinity` (shared with the serving family's `affinity` expert
//! routing): per (topic, layer) a Dirichlet(`affinity_concentration`) distribution over the
//! routed experts, a secondary topic per request mixed in with weight `1 - topic_purity`, the
//! *expected* load `min(n, n x top_k x p)` per (layer, expert), and the dry-run's optional
//! multiplicative Gaussian noise (`prediction_noise`).
//!
//! A request's token counts and secondary topic are drawn when it arrives (`make_request`); its
//! load vector and the dry-run's prediction are computed when it first becomes a batch
//! candidate (`route`), which the scheduler does in arrival order, so the `prediction` stream is
//! drawn in the same order either way and memory follows the candidate window, not the queue.

use crate::arrivals::Arrival;
use crate::rng::SimRng;
pub use crate::serving::topic_affinity::TopicAffinities;
use crate::serving::topic_affinity::noisy_prediction;
use crate::time::SimTime;
use rand::RngExt;
use rand_distr::{Distribution, LogNormal};
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
        self.affinities.expected_load(
            request.topic as usize,
            request.secondary_topic as usize,
            self.topic_purity,
            request.prompt_tokens,
            self.top_k,
            &mut buffer,
        );
        request.noisy_prediction = noisy_prediction(&buffer, self.prediction_noise, prediction);
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
