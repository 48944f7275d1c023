//! Which expert weights a step of ExpertWeave's adapters reads (the expertweave family's
//! expected reads; the serving family's `[adapters]` router routes whole tokens by the same
//! popularity): each domain's routing popularity per MoE layer
//! (Zipf over the domain's relevance ranking, the ranking the adapters' fine-tuned experts come
//! from), and, for a step's tokens per adapter, every weight's probability of being read and the
//! routed rows it receives (base experts, then the adapters' fine-tuned copies).
//!
//! A token routes to `top_k` distinct experts, drawn one after another with probability
//! proportional to `p_e` among those not drawn yet (a router's top-k over noisy scores; live
//! mode draws them so). The probability `pi_e` that expert `e` is among one token's `top_k` is
//! taken as `1 - exp(-lambda p_e)` with `lambda` solving `sum_e pi_e = top_k` (Rosen's
//! approximation of successive sampling; exact in the sum: every token fills `top_k` distinct
//! experts). Over `n` tokens of one adapter the expert is missed with probability
//! `(1 - pi_e)^n = exp(-n lambda p_e)` and receives `n pi_e` rows in expectation. A base
//! expert is read unless every adapter whose tokens still go to it misses it:
//! `P(read) = 1 - exp(sum_a n_a ln(1 - pi_{a,e}))`, one exponential per expert with the
//! logarithms tabulated once (the hot path of a run: one call per MoE layer per step). (Until
//! issue 31 the draws were independent, `top_k` per token with replacement: a token that drew
//! a popular expert twice read fewer experts than its `top_k`, which no router does.)

use crate::cost::shape::MlaMoeShape;
use crate::distributions::Zipf;
use crate::policies::memory::adapters::{EsftAdapter, domain_ranking};
use crate::serving::AdapterTokens;

/// The routing popularity of every adapter's domain in every MoE layer.
pub struct Popularity {
    n_experts: usize,
    n_layers: usize,
    /// `[adapter][layer][expert]`: probability that one routing draw picks the expert.
    probability: Vec<f64>,
    /// `[adapter][layer][expert]`: probability that the expert is among one token's `top_k`.
    inclusion: Vec<f64>,
    /// `[adapter][layer][expert]`: `ln(1 - inclusion)`.
    log_miss: Vec<f64>,
    /// `[adapter][layer][expert]`: whether the adapter fine-tuned the expert.
    tuned: Vec<bool>,
}

impl Popularity {
    /// The popularity of `adapters`' domains over `shape`'s MoE layers, each domain's ranking
    /// drawn with Zipf exponent `expert_zipf_s` (validated: positive and finite).
    pub fn of(shape: &MlaMoeShape, adapters: &[EsftAdapter], expert_zipf_s: f64) -> Self {
        let n_experts = shape.n_routed_experts as usize;
        let n_layers = shape.n_moe_layers() as usize;
        let zipf = Zipf::new(n_experts, expert_zipf_s)
            .expect("validated: at least one expert and a finite exponent");
        let size = adapters.len() * n_layers * n_experts;
        let mut probability = vec![0.0; size];
        let mut tuned = vec![false; size];
        for (a, adapter) in adapters.iter().enumerate() {
            for layer in 0..n_layers {
                let row = (a * n_layers + layer) * n_experts;
                let ranking = domain_ranking(&adapter.domain, layer, n_experts as u32);
                for (rank, &expert) in ranking.iter().enumerate() {
                    probability[row + expert as usize] = zipf.probability(rank);
                }
                for &expert in &adapter.experts[layer] {
                    tuned[row + expert as usize] = true;
                }
            }
        }
        let top_k = (shape.top_k as usize).min(n_experts);
        let mut inclusion = vec![0.0; size];
        let mut log_miss = vec![0.0; size];
        for (row, p) in probability.chunks_exact(n_experts).enumerate() {
            let lambda = inclusion_rate(p, top_k);
            let at = row * n_experts;
            for (e, &pe) in p.iter().enumerate() {
                log_miss[at + e] = -lambda * pe;
                inclusion[at + e] = -(-lambda * pe).exp_m1();
            }
        }
        Popularity {
            n_experts,
            n_layers,
            probability,
            inclusion,
            log_miss,
            tuned,
        }
    }

    fn row(&self, adapter: usize, layer: usize) -> std::ops::Range<usize> {
        let start = (adapter * self.n_layers + layer) * self.n_experts;
        start..start + self.n_experts
    }

    /// Probability that one routing draw of a token of `adapter` picks each expert of MoE
    /// layer `layer`.
    pub fn probabilities(&self, adapter: usize, layer: usize) -> &[f64] {
        &self.probability[self.row(adapter, layer)]
    }

    /// Routed experts per MoE layer.
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }

    /// Whether `adapter` fine-tuned each expert of MoE layer `layer`.
    pub fn tuned(&self, adapter: usize, layer: usize) -> &[bool] {
        &self.tuned[self.row(adapter, layer)]
    }

    /// Probability that expert `e` of MoE layer `layer` is among one token's top-k, for a
    /// token of `adapter` (sums to `top_k` over the experts).
    pub fn inclusion(&self, adapter: usize, layer: usize) -> &[f64] {
        &self.inclusion[self.row(adapter, layer)]
    }

    /// Every expert weight MoE layer `layer` may read for the step's `adapters` tokens (each
    /// routed to the model's `top_k` distinct experts), as (probability it is read, expected
    /// routed rows), into `weights` (cleared first): the base experts in expert order, then
    /// each adapter's fine-tuned copies when `use_adapters` (its tokens are rerouted to them).
    /// A base expert is read if any token not rerouted away from it picks it; a copy if one of
    /// its adapter's tokens does.
    pub fn expected_reads(
        &self,
        layer: usize,
        adapters: &[AdapterTokens],
        use_adapters: bool,
        weights: &mut Vec<(f64, f64)>,
    ) {
        let n = self.n_experts;
        weights.clear();
        // The base experts first accumulate (sum of tokens x ln(1 - pi), expected rows).
        weights.resize(n, (0.0, 0.0));
        for entry in adapters {
            let tokens = entry.tokens as f64;
            let row = self.row(entry.adapter as usize, layer);
            let (pi, log_miss) = (&self.inclusion[row.clone()], &self.log_miss[row.clone()]);
            let tuned = &self.tuned[row];
            for e in 0..n {
                if use_adapters && tuned[e] {
                    weights.push((-(tokens * log_miss[e]).exp_m1(), tokens * pi[e]));
                } else {
                    weights[e].0 += tokens * log_miss[e];
                    weights[e].1 += tokens * pi[e];
                }
            }
        }
        for weight in &mut weights[..n] {
            weight.0 = -weight.0.exp_m1();
        }
    }
}

/// `lambda` with `sum_e (1 - exp(-lambda p_e)) = top_k` (at least one expert with `p_e > 0`
/// for each of the `top_k`; the sum grows from 0 without bound in `lambda` up to the number of
/// experts with a positive probability), by bisection on a bracket doubled until it holds.
fn inclusion_rate(p: &[f64], top_k: usize) -> f64 {
    let positive = p.iter().filter(|&&x| x > 0.0).count();
    let k = top_k.min(positive) as f64;
    if k == 0.0 {
        return 0.0;
    }
    // Just under the number of positive experts when every one is taken (the sum only reaches
    // it in the limit).
    let target = if k >= positive as f64 { k - 1e-9 } else { k };
    let filled = |lambda: f64| p.iter().map(|&x| -(-lambda * x).exp_m1()).sum::<f64>();
    let mut hi = 1.0;
    while filled(hi) < target && hi < 1e12 {
        hi *= 2.0;
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if filled(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::memory::adapters::esft_adapter;

    /// gate-math, token-math and gate-intent on the ESFT base, Zipf(1) over each ranking.
    fn popularity() -> Popularity {
        let shape = MlaMoeShape::esft_vanilla_16b();
        let adapters: Vec<EsftAdapter> = ["gate-math", "token-math", "gate-intent"]
            .iter()
            .map(|name| esft_adapter(name, &shape).unwrap())
            .collect();
        Popularity::of(&shape, &adapters, 1.0)
    }

    fn tokens(pairs: &[(u32, u64)]) -> Vec<AdapterTokens> {
        pairs
            .iter()
            .map(|&(adapter, tokens)| AdapterTokens { adapter, tokens })
            .collect()
    }

    #[test]
    fn reads_follow_the_closed_form_of_distinct_top_k_draws() {
        let popularity = popularity();
        // Zipf(1) over 64 ranks: the top-ranked expert has p = 1 / H_64.
        let h64: f64 = (1..=64).map(|k| 1.0 / k as f64).sum();
        let p = popularity.probabilities(0, 3);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let top = p.iter().cloned().fold(0.0, f64::max);
        assert!((top - 1.0 / h64).abs() < 1e-12);
        // Each token fills its 6 distinct experts: the inclusion probabilities sum to 6, each
        // at most 1, in the order of the draw probabilities.
        let (pi0, pi2) = (popularity.inclusion(0, 3), popularity.inclusion(2, 3));
        assert!((pi0.iter().sum::<f64>() - 6.0).abs() < 1e-9);
        assert!(pi0.iter().all(|&x| (0.0..1.0).contains(&x)));
        let order = |v: &[f64]| {
            let mut i: Vec<usize> = (0..v.len()).collect();
            i.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
            i
        };
        assert_eq!(order(p), order(pi0));
        // A popular expert is drawn by more than its share of independent draws would, since a
        // token never draws it twice: pi <= 6 p where p is large, pi > 1 - (1 - p)^6.
        let e = order(p)[0];
        assert!(pi0[e] < 6.0 * p[e] && pi0[e] > 1.0 - (1.0 - p[e]).powi(6));
        // Base model only: 3 tokens of adapter 0 and 2 of adapter 2; expert e is missed by all
        // with probability (1 - pi0)^3 (1 - pi2)^2.
        let mut weights = vec![];
        popularity.expected_reads(3, &tokens(&[(0, 3), (2, 2)]), false, &mut weights);
        assert_eq!(weights.len(), 64);
        for e in 0..64 {
            let read = 1.0 - (1.0 - pi0[e]).powi(3) * (1.0 - pi2[e]).powi(2);
            let rows = 3.0 * pi0[e] + 2.0 * pi2[e];
            assert!((weights[e].0 - read).abs() < 1e-9, "expert {e}");
            assert!((weights[e].1 - rows).abs() < 1e-9, "expert {e}");
        }
        // One token reads exactly its 6 experts in expectation.
        popularity.expected_reads(3, &tokens(&[(0, 1)]), false, &mut weights);
        let read: f64 = weights.iter().map(|w| w.0).sum();
        assert!((read - 6.0).abs() < 1e-9, "{read}");
        // Rerouted: adapter 0's fine-tuned experts leave the base and become its copies.
        popularity.expected_reads(3, &tokens(&[(0, 3), (2, 2)]), true, &mut weights);
        let tuned0 = popularity.tuned(0, 3);
        let tuned2 = popularity.tuned(2, 3);
        let copies = tuned0.iter().chain(tuned2).filter(|&&t| t).count();
        assert_eq!(weights.len(), 64 + copies);
        let e = tuned0.iter().position(|&t| t).unwrap();
        let copy = weights[64];
        assert!((copy.0 - (1.0 - (1.0 - pi0[e]).powi(3))).abs() < 1e-9);
        assert!((copy.1 - 3.0 * pi0[e]).abs() < 1e-9);
        // Every routed row lands somewhere: 5 tokens x 6 experts.
        let rows: f64 = weights.iter().map(|w| w.1).sum();
        assert!((rows - 30.0).abs() < 1e-9, "{rows}");
    }

    /// The inclusion probabilities against the draws they describe: 200,000 tokens of
    /// successive draws without replacement (as live mode routes them) hit each expert within
    /// 0.01 of its inclusion probability (Rosen's approximation; the draws' own standard error
    /// is under 0.0012).
    #[test]
    fn inclusion_probabilities_match_distinct_successive_draws() {
        use rand::RngExt;
        let popularity = popularity();
        let (p, pi) = (popularity.probabilities(1, 2), popularity.inclusion(1, 2));
        let mut rng = crate::rng::stream(5, "inclusion-test");
        let mut hits = vec![0u64; p.len()];
        let tokens = 200_000;
        for _ in 0..tokens {
            let mut chosen: Vec<usize> = Vec::with_capacity(6);
            while chosen.len() < 6 {
                let u: f64 = rng.random();
                let (mut acc, mut pick) = (0.0, p.len() - 1);
                for (e, &x) in p.iter().enumerate() {
                    acc += x;
                    if u < acc {
                        pick = e;
                        break;
                    }
                }
                if !chosen.contains(&pick) {
                    chosen.push(pick);
                }
            }
            for e in chosen {
                hits[e] += 1;
            }
        }
        for e in 0..p.len() {
            let observed = hits[e] as f64 / tokens as f64;
            assert!(
                (observed - pi[e]).abs() < 0.01,
                "expert {e}: {observed} vs {}",
                pi[e]
            );
        }
    }

    #[test]
    fn more_tokens_touch_more_experts_and_copies_add_weights() {
        let popularity = popularity();
        let mut weights = vec![];
        let mut touched = |adapters: &[AdapterTokens], use_adapters: bool| {
            popularity.expected_reads(0, adapters, use_adapters, &mut weights);
            weights.iter().map(|w| w.0).sum::<f64>()
        };
        let few = touched(&tokens(&[(0, 4)]), true);
        let many = touched(&tokens(&[(0, 400)]), true);
        assert!(few < many && many <= 64.0 + 12.0, "{few} {many}");
        let mixed = tokens(&[(0, 50), (1, 50), (2, 50)]);
        let base = touched(&mixed, false);
        assert!(touched(&mixed, true) > base && base <= 64.0);
    }
}
