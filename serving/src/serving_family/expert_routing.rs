//! Where an MoE step's tokens go: each layer's `tokens x top_k` token-expert assignments spread
//! over the experts by the routing model (uniform, or a Zipf popularity whose ranking is a
//! random permutation per layer and per topic, so a topic's requests favour the same experts),
//! in whole tokens by systematic sampling. Expert `e` expects `x_e = top_k x sum over topics of
//! (the topic's tokens in the step x p_topic(e))` assignments; with the running sums `c_e` of
//! the `x_e`, taken in a random order of the experts drawn per layer and step (so that no
//! expert layout gains from the sampling's correlations), and one uniform offset `u` per layer
//! and step, it receives `floor(c_e + u) - floor(c_{e-1} + u)`. That is the floor or the ceiling of `x_e`, exactly `x_e` on average
//! over `u`, and the layer's total is exact. No expert is given more than one assignment per
//! token: each probability is capped at `1 / top_k` (the excess spread over the others). The
//! replica's expert layout (`mapping::ExpertLayout`) sends each expert's tokens to the GPUs
//! hosting it (`RoutedTokens`: per layer, tokens per expert and per GPU).
//!
//! With `experts.trace` (`replay`) a step routes by the trace instead: step `i` of the replica
//! on unseen trace step `i mod unseen`, each layer's assignments split over the layout's slots
//! (GPU by GPU, an expert held by `r` slots weighing `1 / r` in each) in proportion to the
//! trace step's counts, by rounding the cumulative shares half up (the deleted gem family's
//! rule): each slot the floor or the ceiling of its share, the layer's
//! total exact, no draw.

use super::config::ExpertRoutingTable;
use super::mapping::ExpertLayout;
use crate::cost::shape::MoeModelShape;
use crate::distributions::Zipf;
use crate::memo::{ExactKey, Memo};
use crate::recorder::expert_load::StepLoad;
use crate::rng::SimRng;
use crate::serving::RoutedTokens;
use crate::serving::expert_trace::ExpertTrace;
use crate::serving::topic_affinity::TopicAffinities;
use rand::RngExt;
use rand::distr::uniform::{UniformInt, UniformSampler};
use std::rc::Rc;
use std::sync::Arc;

/// Routes the steps of one replica.
pub struct ExpertRouter {
    n_layers: usize,
    n_experts: usize,
    top_k: u64,
    layout: Rc<ExpertLayout>,
    n_topics: usize,
    /// `[topic][layer][expert]` probabilities; empty under uniform routing.
    probability: Rc<[f64]>,
    /// Under affinity routing: the topics' drawn distributions (uncapped, for the dry-run).
    affinities: Option<Rc<TopicAffinities>>,
    /// Every layer's expected assignments per expert (`[layer][expert]`), for the tokens per
    /// topic in `expected_for`: a step with the last one's tokens per topic (a decode step of
    /// an unchanged batch) reuses them.
    expected: Vec<f64>,
    expected_for: Vec<u64>,
    /// The order of the experts in one layer's running sums (scratch, reshuffled per layer).
    order: Vec<usize>,
    rng: SimRng,
    /// A step's words of `rng`, drawn at once (`draw_words`): per layer two for the offset and
    /// one per index of the shuffle (scratch).
    words: Vec<u32>,
    /// Per word of `words`, the bound of its index (`experts` down to 2 per layer; 1 for the
    /// offset's words, which no bound concerns): `one_word`'s second operand.
    bounds: Vec<u32>,
    /// Whether a step may draw its words at once (always, but in the test that holds the two
    /// ways equal).
    bulk: bool,
    /// Tokens of the step per topic (filled by the caller before `route`).
    pub topic_tokens: Vec<u64>,
    per_expert: Vec<u32>,
    per_gpu: Vec<u32>,
    /// The tokens per expert of every pass routed since `take_step_load` (a static batch routes
    /// its prefill and each decode pass): the step's expert load the recorder measures.
    step_load: Vec<f32>,
    /// The same sums in whole numbers while they stay below 2^24 (`step_counted`: the
    /// assignments summed since `take_step_load`; no entry exceeds it), where every `f32` sum
    /// of whole numbers is exact, so `step_load` is these counts converted. Past it the counts
    /// go into `step_load` once (`step_in_floats`) and later passes add there, as `f32`.
    step_counts: Vec<u32>,
    step_counted: u64,
    step_in_floats: bool,
    /// Passes routed since `take_step_load`: the first one's counts are copied, not added to
    /// zeros, and `step_load` is only read once written.
    step_passes: u32,
    /// When observing: the steps to record, and per layer the tokens per expert of each step
    /// routed so far (step-major).
    observe: Option<(usize, Vec<Vec<f32>>)>,
    /// With a trace: the unseen steps the replica's steps route by, in turn.
    replay: Option<TraceReplay>,
    /// With a trace: the step's slots' rounded cumulative shares, `[layer][slot]` (scratch).
    uptos: Vec<u64>,
    /// With a trace over a plain layout whose shares never fall (`TraceReplay::rising`): the
    /// step's tokens per slot, `[layer][slot]`, handed to the step cost (`RoutedTokens::per_slot`).
    per_slot: Vec<u32>,
    /// With `per_slot`: the step's slots' rounded cumulative shares (scratch).
    rounded: Vec<u32>,
    /// On a plain layout (`ExpertLayout::plain`): each slot's expert, `[layer][gpu][slot]`
    /// (filled on the first drawn step), so that a drawn step hands the step cost its tokens
    /// per slot (`per_slot`) as it sums each GPU's.
    slot_experts: Vec<u32>,
}

/// The unseen steps of a trace, as cumulative shares over a layout's slots.
struct TraceReplay {
    n_unseen: usize,
    /// Slots of a layer (all the replica's GPUs).
    slots_per_layer: usize,
    /// `[layer][slot]`: the slot's expert.
    slot_experts: Vec<usize>,
    /// `[unseen step][layer][slot]`: the share of the layer's assignments that the slots up
    /// to and including this one receive; the last slot of a layer with tokens is 1.
    cumulative: Vec<f64>,
    /// The replica's steps routed so far.
    next: u64,
    /// Whether the layout has one copy and every expert in one slot (`ExpertLayout::plain`):
    /// then a GPU's tokens are the sum of its slots' (no expert split between slots).
    one_slot_each: bool,
    /// Whether, besides `one_slot_each`, every layer's cumulative shares never fall from one
    /// slot to the next (so are the rounded ones: rounding half up is monotone), as on a
    /// trace of whole counts: then a slot receives its rounded share less the one before it,
    /// with no running maximum to carry.
    rising: bool,
}

/// A cumulative share of `assignments`, rounded half up to a whole token (the shares are
/// non-negative).
#[inline]
fn whole_share(share: f64, assignments: u64) -> u64 {
    (share * assignments as f64 + 0.5) as u64
}

/// The topics' affinities an `Affinity` router draws, and its table of them capped.
struct AffinityTables {
    affinities: TopicAffinities,
    /// `[topic][layer][expert]`: each row capped as the Zipf ranks are.
    table: Vec<f64>,
    /// The drawing stream's word position after the draws.
    word_pos: u128,
}

/// The tables `affinity_tables` drew, by everything the drawing reads: the stream's state
/// (seed, stream, word position), the shape, `top_k` and the concentration. The runs of one
/// seed (a CAPS grid's strategies and rates) draw the same topics: drawn once, not per run.
/// 16 kept: a Qwen1.5-MoE table is about 280 KB.
static AFFINITY_TABLES: Memo<ExactKey, AffinityTables> = Memo::new(16);

/// `TopicAffinities::generate` of `n_topics` x `layers` x `experts` from `rng` and the table of
/// its rows each capped a hair below `1 / k` (a step routes whole tokens), looked up in
/// `AFFINITY_TABLES`; `rng` ends where the draws leave it either way.
fn affinity_tables(
    n_topics: usize,
    layers: usize,
    experts: usize,
    k: usize,
    concentration: f64,
    rng: &mut SimRng,
) -> Arc<AffinityTables> {
    let mut key = ExactKey::new();
    key.bytes(&rng.get_seed())
        .u64(rng.get_stream())
        .bytes(&rng.get_word_pos().to_le_bytes())
        .usize(n_topics)
        .usize(layers)
        .usize(experts)
        .usize(k)
        .f64(concentration);
    let drawn = AFFINITY_TABLES.get_or_compute(&key, || {
        let mut rng = rng.clone();
        let affinities =
            TopicAffinities::generate(n_topics, layers, experts, concentration, &mut rng);
        let mut table = Vec::with_capacity(n_topics * layers * experts);
        for topic in 0..n_topics {
            for row in affinities.topic(topic).chunks_exact(experts) {
                let row = row.iter().map(|&p| f64::from(p)).collect();
                table.extend(capped(row, (1.0 - 1e-9) / k as f64));
            }
        }
        AffinityTables {
            affinities,
            table,
            word_pos: rng.get_word_pos(),
        }
    });
    rng.set_word_pos(drawn.word_pos);
    drawn
}

/// Each expert's whole assignments in `row`: `floor(c_e + offset) - floor(c_{e-1} + offset)`
/// over the running sums `c_e` of `expected` taken in `order`, every sum cut to `assignments`
/// and the last expert ending at it exactly; `whole` truncates a non-negative sum.
///
/// No clamp from below is needed: the terms are non-negative, so each rounded sum is at least
/// the one before (adding a non-negative float never lowers a sum, `whole` and the cut are
/// non-decreasing), and `given` never passes `assignments`.
#[inline(always)]
fn spread(
    order: &[usize],
    expected: &[f64],
    offset: f64,
    assignments: u64,
    row: &mut [u32],
    whole: impl Fn(f64) -> u64,
) {
    let (mut running, mut given) = (0.0f64, 0u64);
    let (last, rest) = order.split_last().expect("a layer has experts");
    for &e in rest {
        running += expected[e];
        let upto = whole(running + offset).min(assignments);
        debug_assert!(upto >= given);
        row[e] = (upto - given) as u32;
        given = upto;
    }
    // The last expert ends at the exact total, whatever the rounding of the sums.
    row[*last] = (assignments - given) as u32;
}

/// `rng.random_range(0..=i)`, the same draws: rand's `usize` sampler takes its `u32` one for a
/// bound within `u32` (every expert index), and this calls that one inline (`random_range` is
/// an out-of-line call, a fifth of a static batch's routing).
#[inline(always)]
fn index_up_to<R: rand::Rng + ?Sized>(rng: &mut R, i: usize) -> usize {
    debug_assert!(i <= u32::MAX as usize);
    UniformInt::<u32>::sample_single_inclusive(0, i as u32, rng).expect("0 <= i") as usize
}

/// The unit float `rng.random::<f64>()` makes of the two words `lo` and `hi` (its `u64`, low
/// word first): the 53 high bits times 2^-53.
#[inline(always)]
fn unit_f64(lo: u32, hi: u32) -> f64 {
    let value = (u64::from(hi) << 32) | u64::from(lo);
    (value >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Fisher-Yates over `order` with one word per index, from the last position down:
/// `index_up_to(i)`'s index where it takes one word (`one_word`), the high half of the word
/// times `i + 1`.
#[inline(always)]
fn shuffle(order: &mut [usize], words: &[u32]) {
    for (i, &word) in (1..order.len()).rev().zip(words) {
        let j = (u64::from(word) * (i as u64 + 1)) >> 32;
        order.swap(i, j as usize);
    }
}

/// Each slot's tokens on a plain layout, its expert's in `row` (`experts_of`: the slots'
/// experts, `n` per GPU), into `slots`, and each GPU's, the sum of its `n` slots', into
/// `on_gpus`: `ExpertLayout::gpu_sums`' values, the slots kept.
#[inline(always)]
fn slot_rows(row: &[u32], experts_of: &[u32], n: usize, slots: &mut [u32], on_gpus: &mut [u32]) {
    if n == 2 {
        for ((on_gpu, pair), experts) in on_gpus
            .iter_mut()
            .zip(slots.chunks_exact_mut(2))
            .zip(experts_of.chunks_exact(2))
        {
            let (a, b) = (row[experts[0] as usize], row[experts[1] as usize]);
            (pair[0], pair[1]) = (a, b);
            *on_gpu = a + b;
        }
        return;
    }
    for ((on_gpu, gpu_slots), experts) in on_gpus
        .iter_mut()
        .zip(slots.chunks_exact_mut(n))
        .zip(experts_of.chunks_exact(n))
    {
        let mut sum = 0;
        for (slot, &e) in gpu_slots.iter_mut().zip(experts) {
            *slot = row[e as usize];
            sum += *slot;
        }
        *on_gpu = sum;
    }
}

/// Whether `index_up_to` takes one word for each index drawn from `words` with its bound
/// in `bounds` (`index_up_to(bound - 1)`): rand's sampler draws a second word only where the
/// first's product with the bound has a low half above `2^32 - bound`. A bound of 1 always
/// passes.
#[inline(always)]
fn one_word(words: &[u32], bounds: &[u32]) -> bool {
    words.iter().zip(bounds).fold(true, |all, (&word, &bound)| {
        all & (word.wrapping_mul(bound) <= bound.wrapping_neg())
    })
}

/// `weights` (summing to 1) with none above `cap`: the excess of the capped ones spread over the
/// rest in proportion, until none is above (`cap x len >= 1` keeps it feasible).
pub(crate) fn capped(mut weights: Vec<f64>, cap: f64) -> Vec<f64> {
    loop {
        let excess: f64 = weights.iter().map(|&w| (w - cap).max(0.0)).sum();
        if excess <= 1e-12 {
            return weights;
        }
        let free: f64 = weights.iter().filter(|&&w| w < cap).sum();
        for w in &mut weights {
            if *w >= cap {
                *w = cap;
            } else {
                *w += excess * *w / free;
            }
        }
    }
}

impl ExpertRouter {
    /// The router of `shape`'s layers under `routing`, for `n_topics` topics, the popularity
    /// rankings drawn from `popularity` and the per-step offsets from `offsets`.
    pub fn new(
        shape: &MoeModelShape,
        routing: ExpertRoutingTable,
        n_topics: u32,
        layout: Rc<ExpertLayout>,
        popularity: &mut SimRng,
        offsets: SimRng,
    ) -> ExpertRouter {
        let (layers, experts, k) = (shape.n_layers, shape.n_experts, shape.top_k);
        // A router sending every token to every expert has no popularity to model.
        let routing = if k >= experts {
            ExpertRoutingTable::Uniform
        } else {
            routing
        };
        let n_topics = match routing {
            ExpertRoutingTable::Uniform => 1,
            ExpertRoutingTable::Zipf { .. } | ExpertRoutingTable::Affinity { .. } => {
                n_topics as usize
            }
        };
        let mut affinities = None;
        let probability = match routing {
            ExpertRoutingTable::Uniform => Vec::new(),
            ExpertRoutingTable::Zipf { exponent } => {
                let zipf = Zipf::new(experts, exponent).expect("a validated exponent");
                // Capped a hair below 1 / k, so that rounding the running sums can never give
                // an expert more assignments than the tokens (k < experts keeps the cap
                // feasible).
                let by_rank = capped(
                    (0..experts).map(|rank| zipf.probability(rank)).collect(),
                    (1.0 - 1e-9) / k as f64,
                );
                let mut table = Vec::with_capacity(n_topics * layers * experts);
                let mut order: Vec<usize> = (0..experts).collect();
                let mut by_expert = vec![0.0; experts];
                for _ in 0..n_topics * layers {
                    // Fisher-Yates: the expert of each popularity rank.
                    for i in (1..experts).rev() {
                        order.swap(i, popularity.random_range(0..=i));
                    }
                    for (rank, &expert) in order.iter().enumerate() {
                        by_expert[expert] = by_rank[rank];
                    }
                    table.extend_from_slice(&by_expert);
                }
                table
            }
            ExpertRoutingTable::Affinity { concentration, .. } => {
                let drawn = affinity_tables(n_topics, layers, experts, k, concentration, popularity);
                affinities = Some(Rc::new(drawn.affinities.clone()));
                drawn.table.clone()
            }
        };
        ExpertRouter {
            n_layers: layers,
            n_experts: experts,
            top_k: k as u64,
            per_gpu: vec![0; layers * layout.gpus()],
            layout,
            n_topics,
            probability: probability.into(),
            affinities,
            expected: vec![0.0; layers * experts],
            expected_for: Vec::new(),
            order: (0..experts).collect(),
            rng: offsets,
            words: Vec::new(),
            bounds: Vec::new(),
            bulk: true,
            topic_tokens: vec![0; n_topics],
            per_expert: vec![0; layers * experts],
            step_load: vec![0.0; layers * experts],
            step_counts: vec![0; layers * experts],
            step_counted: 0,
            step_in_floats: false,
            step_passes: 0,
            observe: None,
            replay: None,
            uptos: Vec::new(),
            per_slot: Vec::new(),
            rounded: Vec::new(),
            slot_experts: Vec::new(),
        }
    }

    /// Routes every later step by `trace`'s unseen steps (those after its first
    /// `observed_steps`), in turn, over this router's layout.
    pub fn replay(&mut self, trace: &ExpertTrace, observed_steps: usize) {
        let layout = &self.layout;
        let slots_per_layer = layout.gpus() * layout.slots_per_gpu;
        let n_unseen = trace.n_steps() - observed_steps;
        let mut slot_experts = Vec::with_capacity(self.n_layers * slots_per_layer);
        let mut holders = Vec::with_capacity(self.n_layers * slots_per_layer);
        for layer in 0..self.n_layers {
            for (expert, slots) in layout.layer_slots(layer) {
                slot_experts.push(expert);
                holders.push(f64::from(slots));
            }
        }
        let mut cumulative = vec![0.0; n_unseen * self.n_layers * slots_per_layer];
        for u in 0..n_unseen {
            for layer in 0..self.n_layers {
                let counts = trace.step(layer, observed_steps + u);
                let total: f64 = counts.iter().map(|&c| f64::from(c)).sum();
                if total <= 0.0 {
                    continue;
                }
                let row = &mut cumulative[(u * self.n_layers + layer) * slots_per_layer..]
                    [..slots_per_layer];
                let slots = layer * slots_per_layer..(layer + 1) * slots_per_layer;
                let mut running = 0.0;
                for ((out, &e), &r) in row
                    .iter_mut()
                    .zip(&slot_experts[slots.clone()])
                    .zip(&holders[slots])
                {
                    running += f64::from(counts[e]) / r;
                    *out = running / total;
                }
                // Every expert is placed, so the slots hold the whole layer; pin the rounding.
                *row.last_mut().expect("a layer has slots") = 1.0;
            }
        }
        let one_slot_each = layout.plain();
        let rising = one_slot_each
            && cumulative.chunks_exact(slots_per_layer).all(|row| {
                row[0] >= 0.0 && row.windows(2).all(|pair| pair[0] <= pair[1])
            });
        self.per_slot = if rising {
            vec![0; self.n_layers * slots_per_layer]
        } else {
            Vec::new()
        };
        self.replay = Some(TraceReplay {
            n_unseen,
            slots_per_layer,
            slot_experts,
            cumulative,
            next: 0,
            one_slot_each,
            rising,
        });
    }

    /// Whether a step's tokens must be counted per topic (topics route differently).
    pub fn topical(&self) -> bool {
        self.n_topics > 1
    }

    /// Records the tokens per expert of the next `steps` steps routed (an observation window).
    pub fn observe(&mut self, steps: usize) {
        self.observe = Some((steps, vec![Vec::new(); self.n_layers]));
    }

    /// Steps recorded so far, and whether the window is full.
    pub fn observed_steps(&self) -> (usize, bool) {
        match &self.observe {
            Some((steps, window)) => {
                let seen = window[0].len() / self.n_experts;
                (seen, seen >= *steps)
            }
            None => (0, true),
        }
    }

    /// Per layer, the tokens per expert of each step observed (step-major).
    pub fn take_observed(&mut self) -> Vec<Vec<f32>> {
        self.observe
            .take()
            .map(|(_, window)| window)
            .unwrap_or_default()
    }

    /// The experts of each layer.
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }

    /// The tokens per expert (`layers x experts`, layer-major) of every pass routed since the
    /// last call, which starts the next step's sum: the whole counts while they sum below 2^24
    /// (`StepLoad::Counts`: each layer's sum is at most the assignments counted), else their
    /// `f32` sums.
    pub fn take_step_load(&mut self, mut out: impl FnMut(StepLoad<'_>)) {
        if self.step_in_floats {
            out(StepLoad::Floats(&self.step_load));
        } else {
            if self.step_passes == 0 {
                self.step_counts.fill(0);
            }
            out(StepLoad::Counts(&self.step_counts));
        }
        (self.step_counted, self.step_in_floats, self.step_passes) = (0, false, 0);
    }

    /// Adds the pass just routed (`per_expert`, `assignments` per layer) to the step's load:
    /// in whole numbers below 2^24 in all, then as `f32` sums (the counts so far converted
    /// first: exact, as every `f32` sum of them was).
    fn add_step_load(&mut self, assignments: u64) {
        let first = self.step_passes == 0;
        self.step_passes += 1;
        if !self.step_in_floats && self.step_counted + assignments < 1 << 24 {
            self.step_counted += assignments;
            if first {
                self.step_counts.copy_from_slice(&self.per_expert);
            } else {
                for (sum, &n) in self.step_counts.iter_mut().zip(&self.per_expert) {
                    *sum += n;
                }
            }
            return;
        }
        if !self.step_in_floats {
            self.step_in_floats = true;
            if first {
                self.step_load.fill(0.0);
            } else {
                for (sum, &n) in self.step_load.iter_mut().zip(&self.step_counts) {
                    *sum = n as f32;
                }
            }
        }
        for (sum, &n) in self.step_load.iter_mut().zip(&self.per_expert) {
            *sum += n as f32;
        }
    }

    /// The routing model's expectations, for the router dry-run of a static replica's batch
    /// former.
    pub fn popularity(&self) -> ExpertPopularity {
        ExpertPopularity {
            n_layers: self.n_layers,
            n_experts: self.n_experts,
            top_k: self.top_k,
            n_topics: self.n_topics,
            probability: Rc::clone(&self.probability),
            affinities: self.affinities.clone(),
        }
    }

    /// Each layer's expected assignments per expert for the tokens per topic in
    /// `topic_tokens`: `top_k x tokens x p`, summed over the topics in order.
    fn expect(&mut self) {
        let experts = self.n_experts;
        self.expected_for.clone_from(&self.topic_tokens);
        if self.probability.is_empty() {
            let total: u64 = self.topic_tokens.iter().sum();
            let each = (total * self.top_k) as f64 / experts as f64;
            self.expected.fill(each);
            return;
        }
        self.expected.fill(0.0);
        for (layer, expected) in self.expected.chunks_exact_mut(experts).enumerate() {
            for (topic, &tokens) in self.topic_tokens.iter().enumerate() {
                if tokens == 0 {
                    continue;
                }
                let weight = (tokens * self.top_k) as f64;
                let p = &self.probability[(topic * self.n_layers + layer) * experts..][..experts];
                for (x, &p) in expected.iter_mut().zip(p) {
                    *x += weight * p;
                }
            }
        }
    }

    /// Routes the step whose tokens per topic are in `topic_tokens` (one entry unless
    /// `topical`), drawing one offset per layer.
    pub fn route(&mut self, total_tokens: u64) -> RoutedTokens<'_> {
        if !self.topical() {
            self.topic_tokens[0] = total_tokens;
        }
        let total: u64 = self.topic_tokens.iter().sum();
        let assignments = total * self.top_k;
        let (experts, gpus) = (self.n_experts, self.layout.gpus());
        let unseen = self.replay.as_mut().map(|replay| {
            let u = (replay.next % replay.n_unseen as u64) as usize;
            replay.next += 1;
            u
        });
        // Below 2^30 assignments (see below) on a rising replay: slot by slot, every layer.
        let by_slot = self.replay.as_ref().is_some_and(|r| r.rising) && assignments < 1 << 30;
        if let (true, Some(u)) = (by_slot, unseen) {
            self.route_rising(u, assignments);
        } else if let (Some(replay), Some(u)) = (&self.replay, unseen) {
            // Every slot's rounded cumulative share of the step, all layers in one pass (the
            // unseen step's shares are contiguous): below 2^30 assignments every value is under
            // 2^31, where converting through `i32` (which vectorizes) truncates as `u64` does.
            let n = replay.slots_per_layer * self.n_layers;
            let shares = &replay.cumulative[u * n..][..n];
            self.uptos.resize(n, 0);
            if assignments < 1 << 30 {
                let a = assignments as f64;
                for (upto, &share) in self.uptos.iter_mut().zip(shares) {
                    *upto = (share * a + 0.5) as i32 as u64;
                }
            } else {
                for (upto, &share) in self.uptos.iter_mut().zip(shares) {
                    *upto = whole_share(share, assignments);
                }
            }
        }
        if unseen.is_none() && self.expected_for != self.topic_tokens {
            self.expect();
        }
        // The step's offsets and shuffles drawn as one run of words (the words its layers
        // would draw one by one, in the same order), where no index needs a second word.
        let drawn = unseen.is_none() && assignments > 0 && self.bulk && self.draw_words();
        // On a plain layout each slot takes its expert's tokens whole: below 2^30 assignments
        // (`RoutedTokens::per_slot`'s bound) the slots' tokens are kept as the GPUs' are summed.
        let slotted = unseen.is_none() && self.layout.plain() && assignments < 1 << 30;
        if slotted && self.slot_experts.is_empty() {
            self.slot_experts = (0..self.n_layers)
                .flat_map(|layer| self.layout.layer_slots(layer).map(|(e, _)| e as u32))
                .collect();
            self.per_slot.resize(self.slot_experts.len(), 0);
        }
        for layer in (0..self.n_layers).filter(|_| !by_slot) {
            let row = &mut self.per_expert[layer * experts..][..experts];
            if let (Some(replay), Some(_)) = (&self.replay, unseen) {
                let n = replay.slots_per_layer;
                let shares = &self.uptos[layer * n..][..n];
                let slot_experts = &replay.slot_experts[layer * n..][..n];
                row.fill(0);
                let on_gpus = &mut self.per_gpu[layer * gpus..][..gpus];
                let mut given = 0u64;
                if replay.one_slot_each {
                    // Each expert in one slot, GPU by GPU: a GPU's tokens are what its slots
                    // were given, the growth of `given` over them (`slot_tokens`' sum).
                    for ((shares, experts), on_gpu) in shares
                        .chunks_exact(n / gpus)
                        .zip(slot_experts.chunks_exact(n / gpus))
                        .zip(on_gpus.iter_mut())
                    {
                        let start = given;
                        for (&upto, &e) in shares.iter().zip(experts) {
                            let upto = upto.max(given);
                            row[e] += (upto - given) as u32;
                            given = upto;
                        }
                        *on_gpu = (given - start) as u32;
                    }
                    continue;
                }
                for (&upto, &e) in shares.iter().zip(slot_experts) {
                    let upto = upto.max(given);
                    row[e] += (upto - given) as u32;
                    given = upto;
                }
                for (g, on_gpu) in on_gpus.iter_mut().enumerate() {
                    *on_gpu = self.layout.slot_tokens(layer, row, g).sum();
                }
                continue;
            }
            // The running sums follow a fresh random order of the experts: systematic sampling
            // makes neighbours in its order share the assignments (two experts expecting half
            // a token each rarely both get one), which must not favour any expert layout.
            let offset: f64 = if assignments == 0 {
                0.0
            } else if drawn {
                let words = &self.words[layer * (experts + 1)..][..experts + 1];
                shuffle(&mut self.order, &words[2..]);
                unit_f64(words[0], words[1])
            } else {
                let offset = self.rng.random();
                for i in (1..experts).rev() {
                    self.order.swap(i, index_up_to(&mut self.rng, i));
                }
                offset
            };
            // The running sums are non-negative (so is the offset): below 2^62 assignments a
            // sum not cut to `assignments` is under 2^63, where converting through `i64`
            // truncates as `u64` does, in fewer instructions.
            let (order, expected) = (&self.order, &self.expected[layer * experts..][..experts]);
            if assignments < 1 << 62 {
                spread(order, expected, offset, assignments, row, |sum| sum as i64 as u64);
            } else {
                spread(order, expected, offset, assignments, row, |sum| sum as u64);
            }
            let on_gpus = &mut self.per_gpu[layer * gpus..][..gpus];
            if slotted {
                let n = self.layout.slots_per_gpu;
                let slots = &mut self.per_slot[layer * gpus * n..][..gpus * n];
                let experts_of = &self.slot_experts[layer * gpus * n..][..gpus * n];
                slot_rows(row, experts_of, n, slots, on_gpus);
            } else {
                self.layout.gpu_sums(layer, row, on_gpus);
            }
        }
        self.add_step_load(assignments);
        if let Some((steps, window)) = &mut self.observe
            && window[0].len() < *steps * experts
        {
            for (layer, w) in window.iter_mut().enumerate() {
                w.extend(
                    self.per_expert[layer * experts..][..experts]
                        .iter()
                        .map(|&n| n as f32),
                );
            }
        }
        RoutedTokens {
            layers: self.n_layers,
            per_expert: &self.per_expert,
            per_gpu: &self.per_gpu,
            per_slot: if by_slot || slotted {
                &self.per_slot
            } else {
                &[]
            },
            copies: &[],
        }
    }

    /// Draws the step's words into `words`: per layer the offset's two (`unit_f64`) and one
    /// per index of the shuffle (`shuffle`), the words `rng.random()` and `index_up_to` would
    /// take one at a time. Rand's index sampler takes a second word where the first's low
    /// product passes `2^32 - bound` (`one_word`, about once in 10^8 for 16 experts); if any
    /// index would, the stream is put back where it was and `false` returned (the layers then
    /// draw one by one).
    fn draw_words(&mut self) -> bool {
        let experts = self.n_experts;
        if experts > u32::MAX as usize {
            return false;
        }
        let per_layer = experts + 1;
        if self.words.is_empty() {
            self.words = vec![0; per_layer * self.n_layers];
            self.bounds = (0..self.n_layers)
                .flat_map(|_| [1, 1].into_iter().chain((2..=experts as u32).rev()))
                .collect();
        }
        self.rng.fill(&mut self.words[..]);
        let single = one_word(&self.words, &self.bounds);
        if !single {
            let end = self.rng.get_word_pos();
            self.rng.set_word_pos(end - self.words.len() as u128);
        }
        single
    }

    /// `route`'s replay of unseen step `u` on a rising replay (`TraceReplay::rising`) with
    /// fewer than 2^30 `assignments`: each slot's rounded cumulative share less the one before
    /// it (the running maximum of `route`'s general replay is the share itself where the shares
    /// never fall), into `per_slot`, its expert's entry of `per_expert` and its GPU's of
    /// `per_gpu`. The rounding of a share `s` is `(s * a + 0.5) as u64`, which for values in
    /// `[0, 2^31)` is their floor, computed here in vector-friendly steps (`floor_below_2_31`).
    fn route_rising(&mut self, u: usize, assignments: u64) {
        let replay = self.replay.as_ref().expect("a replay");
        let (experts, gpus, n) = (self.n_experts, self.layout.gpus(), replay.slots_per_layer);
        let all = n * self.n_layers;
        let shares = &replay.cumulative[u * all..][..all];
        let a = assignments as f64;
        self.rounded.resize(all, 0);
        for (upto, &share) in self.rounded.iter_mut().zip(shares) {
            *upto = floor_below_2_31(share * a + 0.5);
        }
        for (layer, (slots, uptos)) in self
            .per_slot
            .chunks_exact_mut(n)
            .zip(self.rounded.chunks_exact(n))
            .enumerate()
        {
            slots[0] = uptos[0];
            for ((tokens, &upto), &before) in slots[1..].iter_mut().zip(&uptos[1..]).zip(uptos) {
                *tokens = upto - before;
            }
            // Each expert in one slot: its tokens are the slot's.
            let row = &mut self.per_expert[layer * experts..][..experts];
            row.fill(0);
            let slot_experts = &replay.slot_experts[layer * n..][..n];
            for (&tokens, &e) in slots.iter().zip(slot_experts) {
                row[e] = tokens;
            }
            let on_gpus = &mut self.per_gpu[layer * gpus..][..gpus];
            for (on_gpu, slots) in on_gpus.iter_mut().zip(slots.chunks_exact(n / gpus)) {
                *on_gpu = slots.iter().sum();
            }
        }
    }
}

/// `x as u32` for `x` in `[0, 2^31)`: its floor, from the nearest whole number (adding and
/// taking away 2^52 rounds to it exactly), less one where that is above `x`; the whole number
/// is the low bits of its sum with 2^52. Plain float operations, without the saturating
/// conversion's checks, so a loop of them vectorizes.
#[inline(always)]
fn floor_below_2_31(x: f64) -> u32 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    let nearest = (x + TWO_52) - TWO_52;
    let floor = if nearest > x { nearest - 1.0 } else { nearest };
    (floor + TWO_52).to_bits() as u32
}

/// A replica's routing model as expectations (shared with its `ExpertRouter`).
#[derive(Clone, Debug)]
pub struct ExpertPopularity {
    pub n_layers: usize,
    pub n_experts: usize,
    top_k: u64,
    n_topics: usize,
    probability: Rc<[f64]>,
    /// Under affinity routing: the topics' drawn distributions (`serving::topic_affinity`).
    pub affinities: Option<Rc<TopicAffinities>>,
}

impl ExpertPopularity {
    /// Experts each token is routed to, per layer.
    pub fn top_k(&self) -> usize {
        self.top_k as usize
    }

    /// The assignments each expert of `layer` expects from `tokens` tokens of `topic`
    /// (`tokens x top_k x p_topic(e)`), into `out` (one per expert).
    pub fn expected(&self, topic: u32, layer: usize, tokens: u64, out: &mut [f64]) {
        let assignments = (tokens * self.top_k) as f64;
        if self.probability.is_empty() {
            out.fill(assignments / self.n_experts as f64);
            return;
        }
        let topic = topic as usize % self.n_topics;
        let p =
            &self.probability[(topic * self.n_layers + layer) * self.n_experts..][..self.n_experts];
        for (o, &p) in out.iter_mut().zip(p) {
            *o = assignments * p;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;
    use rand::Rng;

    fn mixtral_router(routing: ExpertRoutingTable, topics: u32) -> ExpertRouter {
        let shape = MoeModelShape::mixtral_8x7b();
        ExpertRouter::new(
            &shape,
            routing,
            topics,
            Rc::new(ExpertLayout::linear(32, 8, 4, 4)),
            &mut stream(1, "popularity"),
            stream(1, "offsets"),
        )
    }

    #[test]
    fn index_up_to_draws_what_random_range_draws() {
        // The shuffle's index, inline, against rand's own `random_range(0..=i)` on twin streams:
        // the same index at every bound, and the streams stay in step.
        let (mut a, mut b) = (stream(3, "offsets"), stream(3, "offsets"));
        for round in 0..20_000usize {
            let i = [1, 2, 7, 15, 127, 1000, u32::MAX as usize][round % 7];
            assert_eq!(index_up_to(&mut a, i), b.random_range(0..=i), "round {round}");
        }
        assert_eq!(a.random::<u64>(), b.random::<u64>());
    }

    #[test]
    fn a_step_drawn_at_once_routes_as_one_drawn_word_by_word() {
        // Twin routers, one drawing each step's words at once and one word by word: the same
        // counts per expert and GPU at every step (one token, a decode batch, prefills, none)
        // and the streams in step after each, on Mixtral (8 experts, top-2) and Scout (16,
        // top-1, 2 per GPU).
        let scout = MoeModelShape::llama_4_scout();
        let shapes = [
            (MoeModelShape::mixtral_8x7b(), ExpertLayout::linear(32, 8, 4, 4)),
            (scout.clone(), ExpertLayout::linear(scout.n_layers, 16, 8, 8)),
        ];
        for (shape, layout) in shapes {
            let layout = Rc::new(layout);
            let new = || {
                ExpertRouter::new(
                    &shape,
                    ExpertRoutingTable::Zipf { exponent: 1.0 },
                    3,
                    Rc::clone(&layout),
                    &mut stream(5, "popularity"),
                    stream(5, "offsets"),
                )
            };
            let (mut bulk, mut each) = (new(), new());
            each.bulk = false;
            let mixes: [[u64; 3]; 8] = [
                [1, 0, 0],
                [3, 2, 3],
                [3, 2, 3],
                [0, 0, 0],
                [700, 20, 1500],
                [0, 1, 1],
                [40_000, 0, 1],
                [2, 2, 2],
            ];
            for step in 0..400 {
                let mix = mixes[step % mixes.len()];
                bulk.topic_tokens.copy_from_slice(&mix);
                each.topic_tokens.copy_from_slice(&mix);
                let a = bulk.route(mix.iter().sum());
                let (a_experts, a_gpus) = (a.per_expert.to_vec(), a.per_gpu.to_vec());
                let b = each.route(mix.iter().sum());
                assert_eq!(a_experts, b.per_expert, "step {step}");
                assert_eq!(a_gpus, b.per_gpu, "step {step}");
                assert_eq!(bulk.rng.get_word_pos(), each.rng.get_word_pos(), "step {step}");
            }
            assert_eq!(bulk.order, each.order);
        }
    }

    #[test]
    fn a_plain_layouts_tokens_per_slot_are_its_experts() {
        // On plain layouts (linear, and one whose GPUs hold other experts on every layer, one
        // and two and four slots per GPU), each drawn step hands on every slot's tokens:
        // `slot_tokens` of its expert's count, GPU by GPU, summing to the GPU's. A layout
        // with two copies is not plain and hands on none.
        let mut shape = MoeModelShape::mixtral_8x7b();
        (shape.n_layers, shape.n_experts, shape.top_k) = (3, 8, 2);
        let shifted = |slots: usize| {
            let gpus = 8 / slots;
            let mappings: Vec<_> = (0..3)
                .map(|l| crate::policies::mapping::LayerMapping {
                    slots: (0..gpus)
                        .map(|g| (0..slots).map(|j| (slots * g + j + 3 * l) % 8).collect())
                        .collect(),
                })
                .collect();
            ExpertLayout::new(8, &[mappings])
        };
        let layouts = [
            ExpertLayout::linear(3, 8, 4, 4),
            shifted(1),
            shifted(2),
            shifted(4),
            ExpertLayout::linear(3, 8, 4, 8),
        ];
        for layout in layouts {
            let layout = Rc::new(layout);
            let mut r = ExpertRouter::new(
                &shape,
                ExpertRoutingTable::Zipf { exponent: 1.0 },
                1,
                Rc::clone(&layout),
                &mut stream(2, "popularity"),
                stream(2, "offsets"),
            );
            for tokens in [0, 1, 5, 37, 900, 3, 120_000] {
                let routed = r.route(tokens);
                if !layout.plain() {
                    assert!(routed.per_slot.is_empty());
                    continue;
                }
                let (gpus, n) = (layout.gpus(), layout.slots_per_gpu);
                assert_eq!(routed.per_slot.len(), 3 * gpus * n);
                for layer in 0..3 {
                    let row = &routed.per_expert[layer * 8..][..8];
                    for g in 0..gpus {
                        let want: Vec<u32> = layout.slot_tokens(layer, row, g).collect();
                        let got = &routed.per_slot[(layer * gpus + g) * n..][..n];
                        assert_eq!(got, want, "layer {layer}, GPU {g}, {tokens} tokens");
                        assert_eq!(routed.per_gpu[layer * gpus + g], want.iter().sum::<u32>());
                    }
                }
            }
        }
    }

    #[test]
    fn a_steps_load_in_whole_numbers_is_the_float_sum_of_its_passes() {
        // Steps of several passes, small and then large enough that their sum passes 2^24
        // (where `f32` sums stop being exact): `take_step_load` gives the bits of the pass
        // by pass `f32` sum, and starts the next step from nothing.
        let shape = MoeModelShape::mixtral_8x7b();
        let mut r = mixtral_router(ExpertRoutingTable::Zipf { exponent: 1.0 }, 1);
        let steps: [&[u64]; 8] = [
            &[7, 7, 7, 7],
            &[],
            &[12],
            &[1_000, 3, 0, 3],
            &[4_000_000, 4_000_000, 500_000, 3],
            &[9_000_000, 1, 2],
            &[60_000_000, 3, 60_000_001],
            &[2, 0],
        ];
        for (i, passes) in steps.iter().enumerate() {
            let mut want = vec![0.0f32; shape.n_layers * shape.n_experts];
            for &tokens in *passes {
                let routed = r.route(tokens);
                for (sum, &n) in want.iter_mut().zip(routed.per_expert) {
                    *sum += n as f32;
                }
            }
            let mut got = Vec::new();
            r.take_step_load(|load| {
                got = match load {
                    StepLoad::Floats(load) => load.to_vec(),
                    StepLoad::Counts(counts) => counts.iter().map(|&n| n as f32).collect(),
                }
            });
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "step {i}");
        }
        assert!(!r.step_in_floats && r.step_counted == 0 && r.step_passes == 0);
    }

    /// Words handed out in a given order, for rand's samplers.
    struct Words(std::vec::IntoIter<u32>);

    impl rand::TryRng for Words {
        type Error = std::convert::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            Ok(self.0.next().expect("a word left"))
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            let lo = u64::from(self.0.next().expect("a word left"));
            Ok((u64::from(self.0.next().expect("a word left")) << 32) | lo)
        }
        fn try_fill_bytes(&mut self, _: &mut [u8]) -> Result<(), Self::Error> {
            unreachable!("the samplers here take words")
        }
    }

    #[test]
    fn one_word_is_where_rands_index_sampler_takes_one_word() {
        // Words whose low product with the bound is at, just past and far below the sampler's
        // threshold (3 x 0x5555_5555 = 2^32 - 1, past 2^32 - 3), on bounds 2 to 16: `one_word`
        // says whether `index_up_to` took a second word, and `shuffle`'s index is its index
        // wherever it took one.
        let mut words = vec![0, 1, u32::MAX, 0x5555_5555, 0x5555_5554, 0x8000_0000];
        words.extend((0..200u32).map(|i| i.wrapping_mul(0x9E37_79B9)));
        let mut seconds = 0;
        for bound in 2..=16u32 {
            for &word in &words {
                let mut source = Words(vec![word, 0xFFFF_FFFF].into_iter());
                let index = index_up_to(&mut source, bound as usize - 1);
                let took_one = source.0.len() == 1;
                let pair = [word, 0, word];
                let bounds = [bound, bound, 1];
                assert_eq!(one_word(&pair, &bounds), took_one, "word {word:#x}, bound {bound}");
                seconds += usize::from(!took_one);
                if took_one {
                    let mut order: Vec<usize> = (0..bound as usize).collect();
                    shuffle(&mut order, &[word]);
                    let last = bound as usize - 1;
                    assert_eq!(order[last], index, "word {word:#x}, bound {bound}");
                }
            }
        }
        assert!(seconds > 0, "some word takes a second one");
    }

    #[test]
    fn unit_f64_is_the_float_random_draws() {
        let (mut a, mut b) = (stream(9, "offsets"), stream(9, "offsets"));
        for _ in 0..10_000 {
            let (lo, hi) = (a.next_u32(), a.next_u32());
            assert_eq!(unit_f64(lo, hi).to_bits(), b.random::<f64>().to_bits());
        }
    }

    #[test]
    fn a_stream_put_back_draws_the_same_words_again() {
        // `draw_words`' way back: the word position less the words drawn at once.
        let (mut a, mut b) = (stream(4, "offsets"), stream(4, "offsets"));
        let _: u32 = a.next_u32();
        let _: u32 = b.next_u32();
        let mut words = vec![0u32; 17 * 48];
        a.fill(&mut words[..]);
        let end = a.get_word_pos();
        a.set_word_pos(end - words.len() as u128);
        for &word in &words {
            assert_eq!(a.next_u32(), word);
            assert_eq!(b.next_u32(), word);
        }
        assert_eq!(a.next_u32(), b.next_u32());
    }

    #[test]
    fn every_layer_routes_tokens_times_top_k_in_whole_tokens() {
        // 13 tokens at top-2: 26 assignments per layer; uniform over 8 experts each gets 3 or 4
        // (26 / 8 = 3.25), no more than 13 (one per token); a GPU's two experts 6 to 8.
        let mut r = mixtral_router(ExpertRoutingTable::Uniform, 1);
        for _ in 0..50 {
            let routed = r.route(13);
            assert_eq!(routed.layers, 32);
            for layer in 0..32 {
                let experts = &routed.per_expert[layer * 8..][..8];
                assert_eq!(experts.iter().sum::<u32>(), 26);
                assert!(experts.iter().all(|&n| n == 3 || n == 4), "{experts:?}");
                let gpus = &routed.per_gpu[layer * 4..][..4];
                assert_eq!(gpus.iter().sum::<u32>(), 26);
                for (g, &n) in gpus.iter().enumerate() {
                    assert_eq!(n, experts[2 * g] + experts[2 * g + 1]);
                }
            }
        }
    }

    #[test]
    fn each_step_routes_by_its_own_tokens_per_topic() {
        // Steps whose tokens per topic repeat, change, and come back: every expert's count is
        // the floor or the ceiling of what that step's own mix expects of it, and a GPU's
        // tokens are its two experts'.
        let mut r = mixtral_router(ExpertRoutingTable::Zipf { exponent: 1.2 }, 3);
        let popularity = r.popularity();
        let steps: [[u64; 3]; 7] = [
            [5, 3, 0],
            [5, 3, 0],
            [0, 8, 0],
            [5, 3, 0],
            [0, 0, 9],
            [0, 0, 9],
            [1, 1, 1],
        ];
        let mut one = [0.0; 8];
        for (step, mix) in steps.iter().enumerate() {
            r.topic_tokens.copy_from_slice(mix);
            let routed = r.route(mix.iter().sum());
            for layer in 0..32 {
                let mut expected = [0.0; 8];
                for (topic, &tokens) in mix.iter().enumerate() {
                    popularity.expected(topic as u32, layer, tokens, &mut one);
                    for (x, o) in expected.iter_mut().zip(one) {
                        *x += o;
                    }
                }
                let experts = &routed.per_expert[layer * 8..][..8];
                for (e, (&n, &x)) in experts.iter().zip(&expected).enumerate() {
                    let n = f64::from(n);
                    assert!(
                        n >= (x - 1e-9).floor() && n <= (x + 1e-9).ceil(),
                        "step {step}, layer {layer}, expert {e}: {n} for {x}"
                    );
                }
                let gpus = &routed.per_gpu[layer * 4..][..4];
                for (g, &n) in gpus.iter().enumerate() {
                    assert_eq!(n, experts[2 * g] + experts[2 * g + 1]);
                }
            }
        }
    }

    #[test]
    fn systematic_sampling_is_unbiased_for_a_single_token() {
        // One token, top-2 of 8 uniform experts: each expert's expected count is 2/8 = 1/4.
        // Over 4,000 steps x 32 layers (128,000 draws of 0 or 1, standard error 0.0012 per
        // expert's mean), each mean within 0.01 of 0.25; and a token never picks one expert
        // twice.
        let mut r = mixtral_router(ExpertRoutingTable::Uniform, 1);
        let mut sums = [0u64; 8];
        let steps = 4_000;
        for _ in 0..steps {
            let routed = r.route(1);
            for layer in 0..32 {
                for (e, &n) in routed.per_expert[layer * 8..][..8].iter().enumerate() {
                    assert!(n <= 1);
                    sums[e] += u64::from(n);
                }
            }
        }
        for (e, &s) in sums.iter().enumerate() {
            let mean = s as f64 / (steps * 32) as f64;
            assert!((mean - 0.25).abs() < 0.01, "expert {e}: {mean}");
        }
    }

    #[test]
    fn zipf_popularity_is_capped_at_one_per_token_and_differs_by_topic() {
        // Exponent 3 over 8 experts: rank 0 would take 1 / (1 + 1/8 + 1/27 + ...) = 0.84 of the
        // assignments, above the 1/2 a top-2 router can give one expert: capped at (a hair
        // below) 1/2, so 100 tokens give the hottest expert 99 or 100 of the 200 assignments.
        let shape = MoeModelShape::mixtral_8x7b();
        let mut r = ExpertRouter::new(
            &shape,
            ExpertRoutingTable::Zipf { exponent: 3.0 },
            2,
            Rc::new(ExpertLayout::linear(32, 8, 4, 4)),
            &mut stream(2, "popularity"),
            stream(2, "offsets"),
        );
        assert!(r.topical());
        r.topic_tokens.copy_from_slice(&[100, 0]);
        let first: Vec<u32> = r.route(100).per_expert[..8].to_vec();
        assert_eq!(first.iter().sum::<u32>(), 200);
        assert!(
            (99..=100).contains(first.iter().max().unwrap()),
            "{first:?}"
        );
        r.topic_tokens.copy_from_slice(&[0, 100]);
        let second: Vec<u32> = r.route(100).per_expert[..8].to_vec();
        let hottest = |v: &[u32]| (0..8).max_by_key(|&e| v[e]).unwrap();
        assert_ne!(
            hottest(&first),
            hottest(&second),
            "topics rank the experts by their own permutations (seed 2)"
        );
        let w = capped(vec![0.84, 0.1, 0.06], 0.5);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((w[0] - 0.5).abs() < 1e-12 && (w[1] / w[2] - 0.1 / 0.06).abs() < 1e-9);
    }

    #[test]
    fn the_floor_below_2_31_is_the_saturating_conversion() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![0.0, 0.5, 0.999_999_999, 1.0, 1.5, 2.5, 3.0, 2_147_483_647.5];
        values.extend([(1u64 << 31) as f64 - 1e-6, 1_073_741_824.5, 4_503_599.5]);
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let scale = [1.0, 100.0, 65_536.0, 2_147_483_647.0][(x % 4) as usize];
            values.push((x >> 11) as f64 / (1u64 << 53) as f64 * scale);
        }
        for v in values {
            assert_eq!(floor_below_2_31(v), v as u32, "{v}");
        }
    }

    #[test]
    fn a_plain_layout_replays_each_slot_its_rounded_share_less_the_one_before() {
        // Three layers of 8 experts on 4 GPUs, two slots each (each expert in one slot), a
        // trace of whole counts: the general rule (running maximum of the rounded cumulative
        // shares, in u64) gives each slot, expert and GPU what `route` gives.
        let mut shape = MoeModelShape::mixtral_8x7b();
        (shape.n_layers, shape.n_experts, shape.top_k) = (3, 8, 2);
        // Layer l: GPU g holds experts 2g + l and 2g + 1 + l (mod 8).
        let mappings: Vec<_> = (0..3)
            .map(|l| crate::policies::mapping::LayerMapping {
                slots: (0..4)
                    .map(|g| vec![(2 * g + l) % 8, (2 * g + 1 + l) % 8])
                    .collect(),
            })
            .collect();
        let layout = Rc::new(ExpertLayout::new(8, &[mappings]));
        assert!(layout.plain());
        let mut r = ExpertRouter::new(
            &shape,
            ExpertRoutingTable::Uniform,
            1,
            layout.clone(),
            &mut stream(1, "popularity"),
            stream(1, "offsets"),
        );
        // One observed step, three unseen; layer 1 of unseen step 1 has no tokens.
        let (steps, layers, experts) = (4, 3, 8);
        let mut counts = Vec::new();
        for layer in 0..layers {
            for step in 0..steps {
                for e in 0..experts {
                    let c = if layer == 1 && step == 2 {
                        0.0
                    } else {
                        ((e * 7 + step * 3 + layer * 5) % 11) as f32
                    };
                    counts.push(c);
                }
            }
        }
        let trace = ExpertTrace::from_counts(layers, experts, steps, counts);
        r.replay(&trace, 1);
        for (i, tokens) in [5u64, 0, 1, 37, 1000, 3, 8191].into_iter().enumerate() {
            let u = 1 + i % 3;
            let a = tokens * 2;
            let mut per_expert = vec![0u32; layers * experts];
            let mut per_slot = Vec::new();
            for layer in 0..layers {
                let step = trace.step(layer, u);
                let total: f64 = step.iter().map(|&c| f64::from(c)).sum();
                let (mut running, mut given) = (0.0, 0u64);
                let slots: Vec<(usize, u32)> = layout.layer_slots(layer).collect();
                for (s, &(e, _)) in slots.iter().enumerate() {
                    running += f64::from(step[e]);
                    let share = if total <= 0.0 {
                        0.0
                    } else if s + 1 == slots.len() {
                        1.0
                    } else {
                        running / total
                    };
                    let upto = whole_share(share, a).max(given);
                    per_slot.push((upto - given) as u32);
                    per_expert[layer * experts + e] += (upto - given) as u32;
                    given = upto;
                }
            }
            let routed = r.route(tokens);
            assert_eq!(routed.per_expert, per_expert.as_slice(), "step {i}");
            assert_eq!(routed.per_slot, per_slot.as_slice(), "step {i}");
            for layer in 0..layers {
                let row = &routed.per_expert[layer * experts..][..experts];
                for g in 0..4 {
                    let on_gpu: u32 = layout.slot_tokens(layer, row, g).sum();
                    assert_eq!(routed.per_gpu[layer * 4 + g], on_gpu, "step {i}");
                    let slots: Vec<u32> = layout.slot_tokens(layer, row, g).collect();
                    assert_eq!(&routed.per_slot[(layer * 4 + g) * 2..][..2], slots.as_slice());
                }
            }
        }
    }

    #[test]
    fn a_trace_routes_whole_tokens_over_the_slots_by_cumulative_rounding() {
        // The deleted gem family's case (its server's routing test): one layer, 4 experts; observed
        // step 0 (not routed), unseen step 1 with counts 3, 1, 0, 4. Three GPUs, two slots
        // each: GPU 0 hosts experts 0 and 3, GPU 1 experts 0 and 1, GPU 2 experts 2 and 3
        // (experts 0 and 3 in two slots, each weighing half). A step of 5 tokens at top-2 makes
        // 10 assignments over the total of 8: x 1.25. Slot shares in GPU order 1.5, 2, 1.5, 1,
        // 0, 2, cumulative x 1.25 = 1.875, 4.375, 6.25, 7.5, 7.5, 10, rounded half up 2, 4, 6,
        // 8, 8, 10: slots 2, 2, 2, 2, 0, 2; experts 4, 2, 0, 4. Each GPU's tokens are its
        // slots' shares of its experts' (4 split 2 + 2): 4, 4, 2.
        let mut shape = MoeModelShape::mixtral_8x7b();
        (shape.n_layers, shape.n_experts) = (1, 4);
        let layout = ExpertLayout::new(
            4,
            &[vec![crate::policies::mapping::LayerMapping {
                slots: vec![vec![0, 3], vec![0, 1], vec![2, 3]],
            }]],
        );
        let mut r = ExpertRouter::new(
            &shape,
            ExpertRoutingTable::Uniform,
            1,
            Rc::new(layout),
            &mut stream(1, "popularity"),
            stream(1, "offsets"),
        );
        let trace = ExpertTrace::from_counts(1, 4, 2, vec![9.0, 9.0, 9.0, 9.0, 3.0, 1.0, 0.0, 4.0]);
        r.replay(&trace, 1);
        let routed = r.route(5);
        assert_eq!(routed.per_expert, &[4, 2, 0, 4]);
        assert_eq!(routed.per_gpu, &[4, 4, 2]);
        // Experts in two slots: no tokens per slot handed on.
        assert!(routed.per_slot.is_empty());
        // Every step replays the one unseen step (no draw); a step of 0 tokens routes none.
        for _ in 0..3 {
            assert_eq!(r.route(5).per_expert, &[4, 2, 0, 4]);
        }
        assert_eq!(r.route(0).per_expert, &[0, 0, 0, 0]);
        // Two unseen steps alternate; a trace step without tokens routes none.
        let two = ExpertTrace::from_counts(
            1,
            4,
            3,
            vec![1.0, 1.0, 1.0, 1.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        );
        r.replay(&two, 1);
        assert_eq!(r.route(3).per_expert, &[6, 0, 0, 0]);
        assert_eq!(r.route(3).per_expert, &[0, 0, 0, 0]);
        assert_eq!(r.route(3).per_expert, &[6, 0, 0, 0]);
    }
}
