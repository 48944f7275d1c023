//! Which expert weights an ExpertWeave step reads: each domain's routing popularity per MoE layer
//! (Zipf over the domain's relevance ranking, the ranking the adapters' fine-tuned experts come
//! from), and, for a step's tokens per adapter, every weight's probability of being read and the
//! routed rows it receives (base experts, then the adapters' fine-tuned copies).
//!
//! A token draws `top_k` experts, each draw picking expert `e` with probability `p_e`. Over `n`
//! tokens of one adapter that is `n x top_k` draws, so the expert is missed by all of them with
//! probability `(1 - p_e)^(n top_k)` and receives `n top_k p_e` rows in expectation. A base expert
//! is read unless every adapter whose tokens still go to it misses it:
//! `P(read) = 1 - exp(sum_a n_a top_k ln(1 - p_{a,e}))`, one exponential per expert with the
//! logarithms tabulated once (the hot path of a run: one call per MoE layer per step).

use super::adapters::{EsftAdapter, domain_ranking};
use super::config::ExpertWeaveScenario;
use crate::cost::shape::MlaMoeShape;
use crate::distributions::Zipf;
use crate::serving::AdapterTokens;

/// The routing popularity of every adapter's domain in every MoE layer.
pub struct Popularity {
    n_experts: usize,
    n_layers: usize,
    /// `[adapter][layer][expert]`: probability that one routing draw picks the expert.
    probability: Vec<f64>,
    /// `[adapter][layer][expert]`: `ln(1 - probability)`.
    log_miss: Vec<f64>,
    /// `[adapter][layer][expert]`: whether the adapter fine-tuned the expert.
    tuned: Vec<bool>,
}

impl Popularity {
    pub fn new(scenario: &ExpertWeaveScenario) -> Self {
        Popularity::of(
            &scenario.shape,
            &scenario.adapters,
            scenario.cost.expert_zipf_s,
        )
    }

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
        let log_miss = probability.iter().map(|p| (-p).ln_1p()).collect();
        Popularity {
            n_experts,
            n_layers,
            probability,
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

    /// Whether `adapter` fine-tuned each expert of MoE layer `layer`.
    /// Routed experts per MoE layer.
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }

    pub fn tuned(&self, adapter: usize, layer: usize) -> &[bool] {
        &self.tuned[self.row(adapter, layer)]
    }

    /// Every expert weight MoE layer `layer` may read for the step's `adapters` tokens with
    /// top-`top_k` routing, as (probability it is read, expected routed rows), into `weights`
    /// (cleared first): the base experts in expert order, then each adapter's fine-tuned copies
    /// when `use_adapters` (its tokens are rerouted to them). A base expert is read if any
    /// token not rerouted away from it picks it; a copy if one of its adapter's tokens does.
    pub fn expected_reads(
        &self,
        layer: usize,
        adapters: &[AdapterTokens],
        top_k: u64,
        use_adapters: bool,
        weights: &mut Vec<(f64, f64)>,
    ) {
        let n = self.n_experts;
        weights.clear();
        // The base experts first accumulate (sum of draws x ln(1 - p), expected rows).
        weights.resize(n, (0.0, 0.0));
        for entry in adapters {
            let draws = (entry.tokens * top_k) as f64;
            let row = self.row(entry.adapter as usize, layer);
            let (p, log_miss) = (&self.probability[row.clone()], &self.log_miss[row.clone()]);
            let tuned = &self.tuned[row];
            for e in 0..n {
                if use_adapters && tuned[e] {
                    weights.push((-(draws * log_miss[e]).exp_m1(), draws * p[e]));
                } else {
                    weights[e].0 += draws * log_miss[e];
                    weights[e].1 += draws * p[e];
                }
            }
        }
        for weight in &mut weights[..n] {
            weight.0 = -weight.0.exp_m1();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expertweave::config::ExpertWeaveConfig;
    use std::path::Path;

    fn scenario() -> ExpertWeaveScenario {
        let text = r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
names = ["gate-math", "token-math", "gate-intent"]
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "poisson"
rate_per_s = 1.0
[workload]
horizon_s = 1
prompt_tokens = 16
output_tokens = 4
"#;
        toml::from_str::<ExpertWeaveConfig>(text)
            .unwrap()
            .validate(Path::new("."), &mut Default::default())
            .unwrap()
    }

    fn tokens(pairs: &[(u32, u64)]) -> Vec<AdapterTokens> {
        pairs
            .iter()
            .map(|&(adapter, tokens)| AdapterTokens { adapter, tokens })
            .collect()
    }

    #[test]
    fn reads_follow_the_closed_form_of_independent_draws() {
        let s = scenario();
        let popularity = Popularity::new(&s);
        // Zipf(1) over 64 ranks: the top-ranked expert has p = 1 / H_64.
        let h64: f64 = (1..=64).map(|k| 1.0 / k as f64).sum();
        let p = popularity.probabilities(0, 3);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let top = p.iter().cloned().fold(0.0, f64::max);
        assert!((top - 1.0 / h64).abs() < 1e-12);
        // Base model only: 3 tokens of adapter 0 and 2 of adapter 2 at top-6 are 18 and 12
        // draws; expert e is missed with probability (1 - p0)^18 (1 - p2)^12.
        let (p0, p2) = (
            popularity.probabilities(0, 3),
            popularity.probabilities(2, 3),
        );
        let mut weights = vec![];
        popularity.expected_reads(3, &tokens(&[(0, 3), (2, 2)]), 6, false, &mut weights);
        assert_eq!(weights.len(), 64);
        for e in 0..64 {
            let read = 1.0 - (1.0 - p0[e]).powi(18) * (1.0 - p2[e]).powi(12);
            let rows = 18.0 * p0[e] + 12.0 * p2[e];
            assert!((weights[e].0 - read).abs() < 1e-12, "expert {e}");
            assert!((weights[e].1 - rows).abs() < 1e-9, "expert {e}");
        }
        // Rerouted: adapter 0's fine-tuned experts leave the base and become its copies.
        popularity.expected_reads(3, &tokens(&[(0, 3), (2, 2)]), 6, true, &mut weights);
        let tuned0 = popularity.tuned(0, 3);
        let tuned2 = popularity.tuned(2, 3);
        let copies = tuned0.iter().chain(tuned2).filter(|&&t| t).count();
        assert_eq!(weights.len(), 64 + copies);
        let e = tuned0.iter().position(|&t| t).unwrap();
        let copy = weights[64];
        assert!((copy.0 - (1.0 - (1.0 - p0[e]).powi(18))).abs() < 1e-12);
        assert!((copy.1 - 18.0 * p0[e]).abs() < 1e-9);
        // Every routed row lands somewhere: 30 draws in all.
        let rows: f64 = weights.iter().map(|w| w.1).sum();
        assert!((rows - 30.0).abs() < 1e-9, "{rows}");
    }

    #[test]
    fn more_tokens_touch_more_experts_and_copies_add_weights() {
        let s = scenario();
        let popularity = Popularity::new(&s);
        let mut weights = vec![];
        let mut touched = |adapters: &[AdapterTokens], use_adapters: bool| {
            popularity.expected_reads(0, adapters, 6, use_adapters, &mut weights);
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
