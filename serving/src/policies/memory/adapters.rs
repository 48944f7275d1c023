//! ESFT adapters as data: per adapter, the routed experts it fine-tuned in each MoE layer. The ten
//! adapters of the paper's Table 1 are synthesized per layer so that each one's maximum and mean
//! expert counts match the table exactly; the sparsity and fragmentation factors of Section 3
//! are computed from that data.

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::cost::shape::MlaMoeShape;

/// One row of the paper's Table 1 (ESFT adapters on the ESFT vanilla 16B base).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Table1Row {
    /// Task domain; adapters of one domain were selected on the same data.
    pub domain: &'static str,
    /// Adapter name (`gate-*` selects experts by average gate score, `token-*` by token
    /// selection ratio).
    pub name: &'static str,
    /// "Max. #Experts": the most experts the adapter fine-tunes in any layer.
    pub max_experts: u32,
    /// "Avg. #Experts": the mean over the MoE layers, as printed (two decimals).
    pub mean_experts: f64,
    /// "Sparsity" as printed; tests recompute it from the synthesized data.
    pub sparsity: f64,
}

/// Table 1 of the ExpertWeave paper, in its order.
pub const ESFT_TABLE1: [Table1Row; 10] = [
    row("math", "gate-math", 12, 7.04, 0.41),
    row("math", "token-math", 9, 6.12, 0.32),
    row("intent", "gate-intent", 12, 9.50, 0.21),
    row("intent", "token-intent", 8, 7.12, 0.11),
    row("summary", "gate-summary", 11, 7.73, 0.30),
    row("summary", "token-summary", 8, 5.15, 0.36),
    row("law", "gate-law", 12, 7.35, 0.39),
    row("law", "token-law", 10, 6.58, 0.34),
    row("translation", "gate-translation", 13, 4.69, 0.64),
    row("translation", "token-translation", 6, 3.85, 0.36),
];

const fn row(
    domain: &'static str,
    name: &'static str,
    max_experts: u32,
    mean_experts: f64,
    sparsity: f64,
) -> Table1Row {
    Table1Row {
        domain,
        name,
        max_experts,
        mean_experts,
        sparsity,
    }
}

/// An adapter that cannot be built or does not fit the base model.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AdapterError {
    #[error("unknown ESFT adapter {name:?}; known: {}", known.join(", "))]
    Unknown {
        name: String,
        known: Vec<&'static str>,
    },
    #[error("adapter {adapter:?}: {problem}")]
    Invalid { adapter: String, problem: String },
}

/// An ESFT adapter: for each MoE layer, the sorted ids of the base experts it replaces with
/// fine-tuned copies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EsftAdapter {
    /// Adapter name (a replica beyond the tenth carries a `#2`, `#3`... suffix).
    pub name: String,
    /// Task domain.
    pub domain: String,
    /// Per MoE layer, the fine-tuned expert ids in increasing order.
    pub experts: Vec<Vec<u32>>,
}

impl EsftAdapter {
    /// Fine-tuned experts per MoE layer.
    pub fn counts(&self) -> Vec<u64> {
        self.experts
            .iter()
            .map(|layer| layer.len() as u64)
            .collect()
    }

    /// The most experts in any layer (e_max of this adapter).
    pub fn max_experts(&self) -> u64 {
        self.counts().into_iter().max().unwrap_or(0)
    }

    /// Fine-tuned experts over all layers.
    pub fn total_experts(&self) -> u64 {
        self.counts().into_iter().sum()
    }

    /// Mean fine-tuned experts per MoE layer.
    pub fn mean_experts(&self) -> f64 {
        if self.experts.is_empty() {
            return 0.0;
        }
        self.total_experts() as f64 / self.experts.len() as f64
    }

    /// The adapter sparsity factor of Section 3.1: 1 - (1/L) sum_l e_l / e_max. Zero for a dense
    /// adapter (every layer at its maximum); larger means more intra-adapter padding.
    pub fn sparsity_factor(&self) -> f64 {
        let max = self.max_experts();
        if max == 0 {
            return 0.0;
        }
        1.0 - self.mean_experts() / max as f64
    }

    /// Checks the adapter against the base: one entry per MoE layer, ids in range, strictly
    /// increasing (so distinct), at least one expert somewhere.
    pub fn validate(&self, shape: &MlaMoeShape) -> Result<(), AdapterError> {
        let invalid = |problem: String| AdapterError::Invalid {
            adapter: self.name.clone(),
            problem,
        };
        if self.experts.len() as u64 != shape.n_moe_layers() {
            return Err(invalid(format!(
                "has {} layers, the base has {} MoE layers",
                self.experts.len(),
                shape.n_moe_layers()
            )));
        }
        for (layer, ids) in self.experts.iter().enumerate() {
            if ids.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(invalid(format!(
                    "layer {layer}: expert ids must be strictly increasing"
                )));
            }
            if let Some(&bad) = ids
                .iter()
                .find(|&&id| u64::from(id) >= shape.n_routed_experts)
            {
                return Err(invalid(format!(
                    "layer {layer}: expert {bad} is not below the {} routed experts",
                    shape.n_routed_experts
                )));
            }
        }
        if self.total_experts() == 0 {
            return Err(invalid("fine-tunes no expert".into()));
        }
        Ok(())
    }
}

/// The memory fragmentation factor of Section 3.1 for padding: allocated adapter slots
/// (A x e_max x L) over fine-tuned experts (sum over adapters and layers). 1 means no padding.
pub fn padding_fragmentation_factor(adapters: &[EsftAdapter], e_max: u64) -> f64 {
    let needed: u64 = adapters.iter().map(EsftAdapter::total_experts).sum();
    let layers = adapters.first().map_or(0, |a| a.experts.len()) as u64;
    if needed == 0 {
        return 1.0;
    }
    (adapters.len() as u64 * e_max * layers) as f64 / needed as f64
}

/// Names of the Table 1 adapters.
pub fn table1_names() -> Vec<&'static str> {
    ESFT_TABLE1.iter().map(|row| row.name).collect()
}

/// The Table 1 adapter called `name` on `shape`, optionally suffixed `#k` for the k-th replica
/// (the paper replicates the ten adapters for runs beyond ten; a replica has the same experts).
pub fn esft_adapter(name: &str, shape: &MlaMoeShape) -> Result<EsftAdapter, AdapterError> {
    let base_name = name.split('#').next().unwrap_or(name);
    let row = ESFT_TABLE1
        .iter()
        .find(|row| row.name == base_name)
        .ok_or_else(|| AdapterError::Unknown {
            name: name.to_string(),
            known: table1_names(),
        })?;
    let mut adapter = synthesize(row, shape)?;
    adapter.name = name.to_string();
    Ok(adapter)
}

/// The first `n` adapters of Table 1 in its order, cycling with `#2`, `#3`... replicas past ten.
pub fn esft_adapters(n: usize, shape: &MlaMoeShape) -> Result<Vec<EsftAdapter>, AdapterError> {
    (0..n)
        .map(|i| {
            let row = &ESFT_TABLE1[i % ESFT_TABLE1.len()];
            let round = i / ESFT_TABLE1.len();
            let name = if round == 0 {
                row.name.to_string()
            } else {
                format!("{}#{}", row.name, round + 1)
            };
            esft_adapter(&name, shape)
        })
        .collect()
}

/// Builds per-layer expert sets whose maximum is `row.max_experts` and whose total is
/// round(mean x L), so the mean prints as the table's. Counts: one layer (drawn) holds the
/// maximum, the rest start level and are then perturbed by 4L random unit moves that keep every
/// count in [1, max]. Ids: each domain ranks the experts of each layer once (a drawn permutation)
/// and an adapter takes the top `count` of its domain's ranking, so adapters of one domain
/// overlap as ESFT's shared relevance scores make them. Draws come from fixed streams named
/// after the adapter and domain; the data never changes with a scenario seed.
fn synthesize(row: &Table1Row, shape: &MlaMoeShape) -> Result<EsftAdapter, AdapterError> {
    let invalid = |problem: String| AdapterError::Invalid {
        adapter: row.name.to_string(),
        problem,
    };
    let layers = shape.n_moe_layers() as usize;
    let max = u64::from(row.max_experts);
    let total = (row.mean_experts * layers as f64).round() as u64;
    if max > shape.n_routed_experts {
        return Err(invalid(format!(
            "needs {max} experts in a layer, the base has {}",
            shape.n_routed_experts
        )));
    }
    if total < max + (layers as u64 - 1) || total > max * layers as u64 {
        return Err(invalid(format!(
            "{total} experts over {layers} layers cannot have a maximum of {max} and one per layer"
        )));
    }
    let mut rng = crate::rng::stream(0, &format!("esft-adapter/{}/counts", row.name));
    let pinned = rng.random_range(0..layers);
    let others = layers as u64 - 1;
    let rest = total - max;
    let mut counts = vec![0u64; layers];
    let mut extra_order: Vec<usize> = (0..layers).filter(|&l| l != pinned).collect();
    shuffle(&mut extra_order, &mut rng);
    for (rank, &layer) in extra_order.iter().enumerate() {
        counts[layer] = rest / others + u64::from((rank as u64) < rest % others);
    }
    counts[pinned] = max;
    for _ in 0..4 * layers {
        let from = rng.random_range(0..layers);
        let to = rng.random_range(0..layers);
        if from == pinned || to == pinned || from == to {
            continue;
        }
        if counts[from] > 1 && counts[to] < max {
            counts[from] -= 1;
            counts[to] += 1;
        }
    }
    let experts = counts
        .iter()
        .enumerate()
        .map(|(layer, &count)| {
            let ranking = domain_ranking(row.domain, layer, shape.n_routed_experts as u32);
            let mut ids: Vec<u32> = ranking[..count as usize].to_vec();
            ids.sort_unstable();
            ids
        })
        .collect();
    Ok(EsftAdapter {
        name: row.name.to_string(),
        domain: row.domain.to_string(),
        experts,
    })
}

/// The relevance ranking of a domain's experts in one layer: a permutation of 0..n drawn from a
/// fixed stream.
pub fn domain_ranking(domain: &str, layer: usize, n_experts: u32) -> Vec<u32> {
    let mut rng = crate::rng::stream(0, &format!("esft-domain/{domain}/layer{layer}"));
    let mut ids: Vec<u32> = (0..n_experts).collect();
    shuffle(&mut ids, &mut rng);
    ids
}

fn shuffle<T>(items: &mut [T], rng: &mut crate::rng::SimRng) {
    for i in (1..items.len()).rev() {
        let j = rng.random_range(0..=i);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> MlaMoeShape {
        MlaMoeShape::esft_vanilla_16b()
    }

    #[test]
    fn table1_maxima_and_means_match_exactly() {
        for row in &ESFT_TABLE1 {
            let adapter = esft_adapter(row.name, &shape()).unwrap();
            adapter.validate(&shape()).unwrap();
            assert_eq!(adapter.experts.len(), 26);
            assert_eq!(
                adapter.max_experts(),
                u64::from(row.max_experts),
                "{}",
                row.name
            );
            let mean = (adapter.mean_experts() * 100.0).round() / 100.0;
            assert_eq!(mean, row.mean_experts, "{}", row.name);
            assert!(adapter.counts().iter().all(|&c| c >= 1));
        }
    }

    #[test]
    fn table1_sparsity_factors_recomputed_from_the_data() {
        for row in &ESFT_TABLE1 {
            let adapter = esft_adapter(row.name, &shape()).unwrap();
            let sparsity = (adapter.sparsity_factor() * 100.0).round() / 100.0;
            assert_eq!(sparsity, row.sparsity, "{}", row.name);
        }
    }

    #[test]
    fn fragmentation_of_all_ten_at_the_smallest_feasible_e_max() {
        let adapters = esft_adapters(10, &shape()).unwrap();
        let e_max = adapters.iter().map(EsftAdapter::max_experts).max().unwrap();
        assert_eq!(e_max, 13);
        let factor = padding_fragmentation_factor(&adapters, e_max);
        // 10 x 13 x 26 slots over 1693 fine-tuned experts
        assert!((factor - 3380.0 / 1693.0).abs() < 1e-12, "{factor}");
    }

    #[test]
    fn adapters_of_one_domain_overlap_and_replicas_repeat() {
        let adapters = esft_adapters(20, &shape()).unwrap();
        assert_eq!(adapters[10].name, "gate-math#2");
        assert_eq!(adapters[10].experts, adapters[0].experts);
        let (gate, token) = (&adapters[0], &adapters[1]);
        for (a, b) in gate.experts.iter().zip(&token.experts) {
            let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            assert!(small.iter().all(|id| large.contains(id)));
        }
    }

    #[test]
    fn bad_adapters_are_typed_errors() {
        assert!(matches!(
            esft_adapter("nope", &shape()),
            Err(AdapterError::Unknown { .. })
        ));
        let mut small = shape();
        small.n_routed_experts = 8;
        assert!(esft_adapter("gate-math", &small).is_err());
        let mut adapter = esft_adapter("gate-math", &shape()).unwrap();
        adapter.experts[0] = vec![3, 3];
        assert!(adapter.validate(&shape()).is_err());
        adapter.experts[0] = vec![64];
        assert!(adapter.validate(&shape()).is_err());
        adapter.experts.pop();
        assert!(adapter.validate(&shape()).is_err());
    }
}
