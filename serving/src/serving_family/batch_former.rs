//! The static replica kind's batch former (`replica.batch_former`, docs/serving-family.md):
//! CAPS's former (`super::selector_former::SelectorFormer`: the window of the oldest waiting
//! requests, the batch seeded with the oldest, filled by any CAPS `BatchSelector`) whose router
//! dry-run predicts each request's load on the replica's real expert layout. A request's load
//! vector is per layer and per GPU: the tokens its prompt is expected to send to each GPU (the
//! routing model's expectation for its topic, `ExpertPopularity::expected`, spread over the
//! experts' copies and replicas by the layout, `ExpertLayout::gpu_expected`). Per GPU rather
//! than per expert because a layer waits for its most loaded GPU and the mapping decides which
//! experts share one: balancing experts a mapping puts together anyway gains nothing, and a
//! selector that sees GPU loads composes with the mapping. With `replica.scheduler.loads =
//! "experts"` the vector is per layer and per expert instead (`ExpertDryRun`, CAPS's load
//! vector: on one GPU, the per-GPU vector is one entry per layer and shows request sizes only).
//! A dense replica's vector is one entry, its prompt tokens (the selectors then see request
//! sizes only).

use super::expert_routing::ExpertPopularity;
use super::mapping::ExpertLayout;
use super::selector_former::DryRun;
use crate::rng::SimRng;
use crate::serving::QueuedRequest;
use crate::serving::topic_affinity::{TopicAffinities, noisy_prediction};
use crate::time::SimTime;
use std::rc::Rc;

/// A request waiting at a static replica.
#[derive(Clone, Debug)]
pub struct ServingCandidate {
    pub id: u64,
    pub arrival: SimTime,
    pub topic: u32,
    /// The topic its prompt mixes in under affinity routing (`serving::topic_affinity`; 0
    /// otherwise).
    pub secondary_topic: u32,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// The dry-run's load vector (empty until it ran): what the batch's tokens are expected to
    /// route.
    pub load: Vec<f32>,
    /// What a noisy dry-run predicts instead (`AffinityDryRun`); `None` when exact.
    pub prediction: Option<Vec<f32>>,
}

impl ServingCandidate {
    /// The request as the serving replica queues it.
    pub fn queued(&self) -> QueuedRequest {
        QueuedRequest {
            id: self.id,
            workflow: self.id,
            stage: 0,
            submitted: self.arrival,
            workflow_arrival: self.arrival,
            enqueued_iteration: 0,
            prompt_tokens: self.prompt_tokens,
            predicted_stage_tokens: f64::from(self.output_tokens),
            predicted_total_tokens: f64::from(self.output_tokens),
            attained_service: 0,
            rank_noise: 0.0,
            topic: self.topic,
        }
    }
    /// The dry-run's load vector (empty before it ran), or its noisy prediction: what the
    /// selectors see.
    pub fn predicted(&self) -> &[f32] {
        self.prediction.as_deref().unwrap_or(&self.load)
    }
}

/// The dry-run of a static serving replica.
pub type BoxedDryRun<'a> = Box<dyn DryRun + 'a>;

/// The router dry-run on a replica's expert layout: layers x GPUs expected tokens.
pub struct LayoutDryRun {
    popularity: ExpertPopularity,
    layout: Rc<ExpertLayout>,
    /// One layer's expected assignments per expert (scratch).
    per_expert: Vec<f64>,
}

impl LayoutDryRun {
    pub fn new(popularity: ExpertPopularity, layout: Rc<ExpertLayout>) -> LayoutDryRun {
        LayoutDryRun {
            per_expert: vec![0.0; popularity.n_experts],
            popularity,
            layout,
        }
    }
}

impl DryRun for LayoutDryRun {
    fn dims(&self) -> usize {
        self.popularity.n_layers * self.layout.gpus()
    }
    fn route(&mut self, request: &mut ServingCandidate, mut buffer: Vec<f32>) {
        let gpus = self.layout.gpus();
        buffer.clear();
        buffer.resize(self.dims(), 0.0);
        for (layer, out) in buffer.chunks_exact_mut(gpus).enumerate() {
            self.popularity.expected(
                request.topic,
                layer,
                u64::from(request.prompt_tokens),
                &mut self.per_expert,
            );
            self.layout.gpu_expected(layer, &self.per_expert, out);
        }
        request.load = buffer;
    }
}

/// The router dry-run per expert (`replica.scheduler.loads = "experts"`): layers x experts
/// expected tokens, CAPS's load vector, whatever GPUs the experts share.
pub struct ExpertDryRun {
    popularity: ExpertPopularity,
    /// One layer's expected assignments per expert (scratch).
    per_expert: Vec<f64>,
}

impl ExpertDryRun {
    pub fn new(popularity: ExpertPopularity) -> ExpertDryRun {
        ExpertDryRun {
            per_expert: vec![0.0; popularity.n_experts],
            popularity,
        }
    }
}

impl DryRun for ExpertDryRun {
    fn dims(&self) -> usize {
        self.popularity.n_layers * self.popularity.n_experts
    }
    fn route(&mut self, request: &mut ServingCandidate, mut buffer: Vec<f32>) {
        buffer.clear();
        for layer in 0..self.popularity.n_layers {
            self.popularity.expected(
                request.topic,
                layer,
                u64::from(request.prompt_tokens),
                &mut self.per_expert,
            );
            buffer.extend(self.per_expert.iter().map(|&x| x as f32));
        }
        request.load = buffer;
    }
}

/// The router dry-run under affinity routing with `replica.scheduler.loads = "experts"`: CAPS's
/// load vector (`TopicAffinities::expected_load`: the request's topic mixed with its secondary
/// topic, `min(n, n x top_k x p)` per layer and expert) and, when `noise > 0`, the noisy
/// prediction the selectors see instead.
pub struct AffinityDryRun {
    affinities: Rc<TopicAffinities>,
    purity: f64,
    noise: f64,
    top_k: usize,
    prediction: SimRng,
}

impl AffinityDryRun {
    pub fn new(
        affinities: Rc<TopicAffinities>,
        purity: f64,
        noise: f64,
        top_k: usize,
        prediction: SimRng,
    ) -> AffinityDryRun {
        AffinityDryRun {
            affinities,
            purity,
            noise,
            top_k,
            prediction,
        }
    }
}

impl DryRun for AffinityDryRun {
    fn dims(&self) -> usize {
        self.affinities.dims()
    }
    fn route(&mut self, request: &mut ServingCandidate, mut buffer: Vec<f32>) {
        self.affinities.expected_load(
            request.topic as usize,
            request.secondary_topic as usize,
            self.purity,
            request.prompt_tokens,
            self.top_k,
            &mut buffer,
        );
        request.prediction = noisy_prediction(&buffer, self.noise, &mut self.prediction);
        request.load = buffer;
    }
}

/// The dry-run of a dense replica: one entry, the prompt's tokens.
pub struct PromptDryRun;

impl DryRun for PromptDryRun {
    fn dims(&self) -> usize {
        1
    }
    fn route(&mut self, request: &mut ServingCandidate, mut buffer: Vec<f32>) {
        buffer.clear();
        buffer.push(request.prompt_tokens as f32);
        request.load = buffer;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::shape::MoeModelShape;
    use crate::rng::stream;
    use crate::serving_family::config::ExpertRoutingTable;
    use crate::serving_family::expert_routing::ExpertRouter;

    /// Mixtral-8x7B's router, top-2, Zipf exponent 1 over each layer's experts, on `layout`.
    fn zipf_mixtral(layout: &Rc<ExpertLayout>) -> ExpertRouter {
        ExpertRouter::new(
            &MoeModelShape::mixtral_8x7b(),
            ExpertRoutingTable::Zipf { exponent: 1.0 },
            2,
            Rc::clone(layout),
            &mut stream(3, "popularity"),
            stream(3, "offsets"),
        )
    }

    /// A 10-token prompt of topic 1, one output token, not yet routed.
    fn ten_token_prompt_of_topic_1() -> ServingCandidate {
        ServingCandidate {
            id: 0,
            arrival: SimTime::ZERO,
            topic: 1,
            secondary_topic: 0,
            prompt_tokens: 10,
            output_tokens: 1,
            load: Vec::new(),
            prediction: None,
        }
    }

    #[test]
    fn load_vector_is_the_prompts_expected_tokens_per_gpu_under_the_layout() {
        // Mixtral (8 experts, top-2), uniform routing, EP 4 on 4 GPUs (two experts per GPU):
        // a 100-token prompt sends 100 x 2 / 8 = 25 tokens to each expert of every layer, 50
        // to each GPU. With EP 2 over 4 GPUs (two copies of the group) each GPU hosts four
        // experts at half their tokens: again 50.
        let shape = MoeModelShape::mixtral_8x7b();
        for (ep, gpus) in [(4, 4), (2, 4)] {
            let layout = Rc::new(ExpertLayout::linear(32, 8, ep, gpus));
            let router = ExpertRouter::new(
                &shape,
                ExpertRoutingTable::Uniform,
                1,
                Rc::clone(&layout),
                &mut stream(1, "popularity"),
                stream(1, "offsets"),
            );
            let mut dry_run = LayoutDryRun::new(router.popularity(), layout);
            let mut request = ServingCandidate {
                id: 0,
                arrival: SimTime::ZERO,
                topic: 0,
                secondary_topic: 0,
                prompt_tokens: 100,
                output_tokens: 1,
                load: Vec::new(),
                prediction: None,
            };
            dry_run.route(&mut request, Vec::new());
            assert_eq!(request.load.len(), 32 * gpus);
            assert!(request.load.iter().all(|&x| (x - 50.0).abs() < 1e-4));
        }
    }

    #[test]
    fn the_expert_dry_run_gives_each_experts_expected_tokens_whatever_the_layout() {
        // Zipf exponent 1 over Mixtral's 8 experts, top-2: a 10-token prompt expects
        // 20 x p(e) tokens at expert e of every layer, p the topic's popularity of layer and
        // expert (its hottest 1 / H(8)); 32 x 8 entries, each layer summing to 20. The
        // per-GPU vector of one GPU would be a single 20 per layer.
        let layout = Rc::new(ExpertLayout::linear(32, 8, 1, 1));
        let router = zipf_mixtral(&layout);
        let popularity = router.popularity();
        let mut dry_run = ExpertDryRun::new(popularity.clone());
        assert_eq!(dry_run.dims(), 32 * 8);
        let mut request = ten_token_prompt_of_topic_1();
        dry_run.route(&mut request, Vec::new());
        let h: f64 = (1..=8).map(|r| 1.0 / f64::from(r)).sum();
        let mut expected = vec![0.0; 8];
        for (layer, row) in request.load.chunks(8).enumerate() {
            popularity.expected(1, layer, 10, &mut expected);
            for (got, want) in row.iter().zip(&expected) {
                assert!((f64::from(*got) - want).abs() < 1e-4);
            }
            assert!((row.iter().sum::<f32>() - 20.0).abs() < 1e-3);
            let max = row.iter().copied().fold(0.0f32, f32::max);
            assert!((f64::from(max) - 20.0 / h).abs() < 1e-3, "{max}");
        }
        let mut gpus = LayoutDryRun::new(popularity, layout);
        assert_eq!(gpus.dims(), 32, "one GPU: one entry per layer");
        gpus.route(&mut request, Vec::new());
        assert!(request.load.iter().all(|&x| (x - 20.0).abs() < 1e-3));
    }

    #[test]
    fn a_zipf_topic_loads_the_gpus_of_its_hot_experts() {
        // Zipf exponent 1 over 8 experts: the hottest expert takes 1 / H(8) = 0.368 of a
        // layer's assignments (below the 1 / top_k = 0.5 cap). With one expert per GPU (EP 8),
        // a 10-token prompt of top-2 puts 20 x 0.368 = 7.36 tokens on that expert's GPU and
        // the layer's 20 in total.
        let layout = Rc::new(ExpertLayout::linear(32, 8, 8, 8));
        let router = zipf_mixtral(&layout);
        let mut dry_run = LayoutDryRun::new(router.popularity(), layout);
        let mut request = ten_token_prompt_of_topic_1();
        dry_run.route(&mut request, Vec::new());
        let h: f64 = (1..=8).map(|r| 1.0 / f64::from(r)).sum();
        for layer in request.load.chunks(8) {
            assert!((layer.iter().sum::<f32>() - 20.0).abs() < 1e-3);
            let max = layer.iter().copied().fold(0.0f32, f32::max);
            assert!((f64::from(max) - 20.0 / h).abs() < 1e-3, "{max}");
        }
    }
}
