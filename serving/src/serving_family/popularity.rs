//! The routing popularity of ExpertWeave's adapters (the serving family's `[adapters]` router,
//! `adapters::AdapterRouter`, routes a step's tokens by it): each domain's routing popularity per
//! MoE layer (Zipf over the domain's relevance ranking, the ranking the adapters' fine-tuned
//! experts come from), and which experts each adapter fine-tuned.

use crate::cost::shape::MlaMoeShape;
use crate::distributions::Zipf;
use crate::policies::memory::adapters::{EsftAdapter, domain_ranking};

/// The routing popularity of every adapter's domain in every MoE layer.
pub struct Popularity {
    n_experts: usize,
    n_layers: usize,
    /// `[adapter][layer][expert]`: probability that one routing draw picks the expert.
    probability: Vec<f64>,
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
        Popularity {
            n_experts,
            n_layers,
            probability,
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
}
