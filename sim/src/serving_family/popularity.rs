//! The routing popularity of ExpertWeave's adapters (the serving family's `[adapters]` router,
//! `adapters::AdapterRouter`, routes a step's tokens by it): each domain's routing popularity per
//! MoE layer (Zipf over the domain's relevance ranking, the ranking the adapters' fine-tuned
//! experts come from), and which experts each adapter fine-tuned.
//!
//! A token routes to `top_k` distinct experts, drawn one after another with probability
//! proportional to `p_e` among those not drawn yet (a router's top-k over noisy scores). The
//! probability `pi_e` that expert `e` is among one token's `top_k` is taken as
//! `1 - exp(-lambda p_e)` with `lambda` solving `sum_e pi_e = top_k` (Rosen's approximation of
//! successive sampling; exact in the sum: every token fills `top_k` distinct experts), so over
//! `n` tokens the expert is missed with probability `(1 - pi_e)^n` (`inclusion`; the
//! expertweave family priced its expected reads from it until issue 28 deleted the family).

use crate::cost::shape::MlaMoeShape;
use crate::distributions::Zipf;
use crate::policies::memory::adapters::{EsftAdapter, domain_ranking};

/// The routing popularity of every adapter's domain in every MoE layer.
pub struct Popularity {
    n_experts: usize,
    n_layers: usize,
    /// `[adapter][layer][expert]`: probability that one routing draw picks the expert.
    probability: Vec<f64>,
    /// `[adapter][layer][expert]`: probability that the expert is among one token's `top_k`.
    inclusion: Vec<f64>,
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
        for (row, p) in probability.chunks_exact(n_experts).enumerate() {
            let lambda = inclusion_rate(p, top_k);
            let at = row * n_experts;
            for (e, &pe) in p.iter().enumerate() {
                inclusion[at + e] = -(-lambda * pe).exp_m1();
            }
        }
        Popularity {
            n_experts,
            n_layers,
            probability,
            inclusion,
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
}
