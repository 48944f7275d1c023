//! Batched rerouting (ExpertWeave section 4.3): the router's top-k expert ids, each token's
//! adapter id and one layer's adapter expert map give the ids of the experts to run in the
//! virtual weight tensor. `rerouted[t][j] = map[aid[t]][ids[t][j]]`, or `ids[t][j]` for a
//! base-model token (`aid = -1`). As one fused kernel, and as the unfused sequence of vector
//! operations (broadcast the adapter ids, compute offsets into the map, gather) it replaces.

use crate::KernelInputError;
use rand::RngExt;

/// The adapter id of a token that uses the base model.
pub const BASE_MODEL: i32 = -1;

/// Fused kernel or the three-kernel sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RerouteVariant {
    Fused,
    Unfused,
}

impl RerouteVariant {
    /// `"fused"` or `"unfused"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RerouteVariant::Fused => "fused",
            RerouteVariant::Unfused => "unfused",
        }
    }
}

/// Inputs of one layer's rerouting.
#[derive(Clone, Debug, PartialEq)]
pub struct RerouteProblem {
    pub n_experts: usize,
    pub top_k: usize,
    /// Rows of the expert map (adapters that can be served at once).
    pub max_adapters: usize,
    /// `[tokens][top_k]`, each in `0..n_experts`.
    pub topk_ids: Vec<i32>,
    /// `[tokens]`, each [`BASE_MODEL`] or in `0..max_adapters`.
    pub adapter_ids: Vec<i32>,
    /// `[max_adapters][n_experts]`: the expert's index in the virtual weight tensor for that
    /// adapter (its own index when the adapter did not fine-tune it).
    pub expert_map: Vec<i32>,
}

/// The intermediate buffers of the unfused sequence, and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfusedStages {
    /// The adapter id of each (token, slot).
    pub broadcast_adapter_ids: Vec<i32>,
    /// Index into the flattened map, or -1 for base-model tokens.
    pub map_offsets: Vec<i32>,
    pub rerouted: Vec<i32>,
}

impl RerouteProblem {
    /// Tokens in the batch.
    pub fn tokens(&self) -> usize {
        self.adapter_ids.len()
    }

    /// Checks lengths and index ranges so that no kernel reads out of bounds.
    pub fn validate(&self) -> Result<(), KernelInputError> {
        let bad = |problem: String| Err(KernelInputError::new("reroute", problem));
        if self.n_experts == 0 || self.top_k == 0 || self.top_k > self.n_experts {
            return bad(format!(
                "need 1 <= top_k ({}) <= n_experts ({})",
                self.top_k, self.n_experts
            ));
        }
        if self.adapter_ids.is_empty() {
            return bad("no tokens".into());
        }
        if self.topk_ids.len() != self.tokens() * self.top_k {
            return bad(format!(
                "topk_ids has {} entries, expected tokens x top_k = {}",
                self.topk_ids.len(),
                self.tokens() * self.top_k
            ));
        }
        if self.expert_map.len() != self.max_adapters * self.n_experts
            || self.expert_map.len() > i32::MAX as usize
        {
            return bad(format!(
                "expert_map has {} entries, expected max_adapters x n_experts = {}",
                self.expert_map.len(),
                self.max_adapters * self.n_experts
            ));
        }
        if let Some(i) = self
            .topk_ids
            .iter()
            .position(|&id| id < 0 || id as usize >= self.n_experts)
        {
            return bad(format!(
                "topk_ids[{i}] = {} is not an expert of 0..{}",
                self.topk_ids[i], self.n_experts
            ));
        }
        if let Some(t) = self
            .adapter_ids
            .iter()
            .position(|&a| a < BASE_MODEL || (a >= 0 && a as usize >= self.max_adapters))
        {
            return bad(format!(
                "adapter_ids[{t}] = {} is neither -1 (base model) nor an adapter of 0..{}",
                self.adapter_ids[t], self.max_adapters
            ));
        }
        if let Some(i) = self.expert_map.iter().position(|&v| v < 0) {
            return bad(format!("expert_map[{i}] is negative"));
        }
        Ok(())
    }

    /// A random batch: `n_adapters` adapters (of `max_adapters` map rows), each fine-tuning
    /// `tuned_per_adapter` distinct experts placed after the base experts in the virtual
    /// tensor; tokens pick the base model or an adapter uniformly.
    pub fn random(
        tokens: usize,
        n_experts: usize,
        top_k: usize,
        n_adapters: usize,
        tuned_per_adapter: usize,
        seed: u64,
    ) -> RerouteProblem {
        let mut rng = expertsim_scenario::rng::stream(seed, "reroute");
        let max_adapters = n_adapters.max(1);
        let tuned = tuned_per_adapter.min(n_experts);
        let mut expert_map = Vec::with_capacity(max_adapters * n_experts);
        for a in 0..max_adapters {
            let mut row: Vec<i32> = (0..n_experts as i32).collect();
            let mut chosen = Vec::new();
            while chosen.len() < tuned {
                let e = rng.random_range(0..n_experts);
                if !chosen.contains(&e) {
                    chosen.push(e);
                }
            }
            for (j, e) in chosen.into_iter().enumerate() {
                row[e] = (n_experts + a * tuned + j) as i32;
            }
            expert_map.extend(row);
        }
        let mut topk_ids = Vec::with_capacity(tokens * top_k);
        for _ in 0..tokens {
            let start = topk_ids.len();
            while topk_ids.len() - start < top_k {
                let e = rng.random_range(0..n_experts) as i32;
                if !topk_ids[start..].contains(&e) {
                    topk_ids.push(e);
                }
            }
        }
        let adapter_ids = (0..tokens)
            .map(|_| rng.random_range(0..=n_adapters) as i32 - 1)
            .collect();
        RerouteProblem {
            n_experts,
            top_k,
            max_adapters,
            topk_ids,
            adapter_ids,
            expert_map,
        }
    }
}

/// The fused operator: one pass, one output buffer.
pub fn reroute_fused_cpu(p: &RerouteProblem) -> Result<Vec<i32>, KernelInputError> {
    p.validate()?;
    Ok(p.topk_ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let aid = p.adapter_ids[i / p.top_k];
            if aid < 0 {
                id
            } else {
                p.expert_map[aid as usize * p.n_experts + id as usize]
            }
        })
        .collect())
}

/// The unfused sequence: broadcast, offsets, gather, each a full pass with its own buffer.
pub fn reroute_unfused_cpu(p: &RerouteProblem) -> Result<UnfusedStages, KernelInputError> {
    p.validate()?;
    let broadcast_adapter_ids: Vec<i32> = (0..p.topk_ids.len())
        .map(|i| p.adapter_ids[i / p.top_k])
        .collect();
    let map_offsets: Vec<i32> = broadcast_adapter_ids
        .iter()
        .zip(&p.topk_ids)
        .map(|(&aid, &id)| {
            if aid < 0 {
                -1
            } else {
                aid * p.n_experts as i32 + id
            }
        })
        .collect();
    let rerouted = map_offsets
        .iter()
        .zip(&p.topk_ids)
        .map(|(&off, &id)| {
            if off < 0 {
                id
            } else {
                p.expert_map[off as usize]
            }
        })
        .collect();
    Ok(UnfusedStages {
        broadcast_adapter_ids,
        map_offsets,
        rerouted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written as nested loops over tokens and slots.
    fn reroute_plain(p: &RerouteProblem) -> Vec<i32> {
        let mut out = Vec::new();
        for t in 0..p.tokens() {
            for j in 0..p.top_k {
                let id = p.topk_ids[t * p.top_k + j];
                let aid = p.adapter_ids[t];
                out.push(if aid == BASE_MODEL {
                    id
                } else {
                    p.expert_map[aid as usize * p.n_experts + id as usize]
                });
            }
        }
        out
    }

    #[test]
    fn fused_and_unfused_match_the_definition() {
        for (tokens, adapters, seed) in [(1, 1, 1), (57, 3, 2), (300, 20, 3)] {
            let p = RerouteProblem::random(tokens, 64, 6, adapters, 8, seed);
            let want = reroute_plain(&p);
            assert_eq!(reroute_fused_cpu(&p).unwrap(), want);
            let stages = reroute_unfused_cpu(&p).unwrap();
            assert_eq!(stages.rerouted, want);
            // Some tokens really were rerouted, and base tokens were not.
            assert!(want.iter().any(|&id| id >= 64) || tokens < 10);
            for (i, &aid) in stages.broadcast_adapter_ids.iter().enumerate() {
                if aid == BASE_MODEL {
                    assert_eq!(want[i], p.topk_ids[i]);
                }
            }
        }
    }

    #[test]
    fn invalid_inputs_are_typed_errors() {
        let mut p = RerouteProblem::random(10, 8, 2, 2, 2, 1);
        p.adapter_ids[4] = 2;
        let message = reroute_fused_cpu(&p).unwrap_err().to_string();
        assert!(message.contains("adapter_ids[4] = 2"), "{message}");
        let mut p = RerouteProblem::random(10, 8, 2, 2, 2, 1);
        p.topk_ids[0] = -3;
        assert!(reroute_unfused_cpu(&p).is_err());
        let mut p = RerouteProblem::random(10, 8, 2, 2, 2, 1);
        p.expert_map.pop();
        assert!(
            reroute_fused_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("expert_map")
        );
    }
}
