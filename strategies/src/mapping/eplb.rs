//! DeepSeek's expert-parallel load balancer (EPLB, the `eplb.py` of deepseek-ai/EPLB that vLLM
//! adopts): balanced packing of expert groups onto nodes, replication of the heaviest experts
//! into redundant slots within each node, balanced packing of the physical experts onto the
//! node's GPUs. The hierarchical policy applies when the expert groups divide evenly among
//! the nodes; otherwise the global policy (one group, one node) does. Loads are the window's
//! tokens per expert, summed over its steps.

use expertsim_serving::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use expertsim_serving::rng::SimRng;

/// EPLB with `redundant_slots` extra physical slots.
#[derive(Clone, Copy, Debug)]
pub struct Eplb {
    pub redundant_slots: usize,
    pub n_groups: usize,
    pub n_nodes: usize,
}

/// Items sorted by weight, heaviest first (ties: lower index first).
fn heaviest_first(weight: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weight.len()).collect();
    order.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
    order
}

/// Packs `weight.len()` items into `n_packs` packs of equal item count, each item (heaviest
/// first) into the lightest pack that still has room. Returns (pack, rank within pack).
pub fn balanced_packing(weight: &[f64], n_packs: usize) -> (Vec<usize>, Vec<usize>) {
    let n = weight.len();
    assert!(
        n_packs > 0 && n.is_multiple_of(n_packs),
        "balanced_packing: {n} items do not divide into {n_packs} packs"
    );
    let per_pack = n / n_packs;
    if per_pack == 1 {
        return ((0..n).collect(), vec![0; n]);
    }
    let mut pack_of = vec![0; n];
    let mut rank = vec![0; n];
    let mut pack_weight = vec![0.0f64; n_packs];
    let mut pack_items = vec![0usize; n_packs];
    for item in heaviest_first(weight) {
        let pack = (0..n_packs)
            .filter(|&p| pack_items[p] < per_pack)
            .min_by(|&a, &b| pack_weight[a].total_cmp(&pack_weight[b]).then(a.cmp(&b)))
            .expect("a pack has room while items remain");
        pack_of[item] = pack;
        rank[item] = pack_items[pack];
        pack_weight[pack] += weight[item];
        pack_items[pack] += 1;
    }
    (pack_of, rank)
}

/// Replicates logical experts into `n_physical` slots: each extra slot goes to the expert with
/// the largest load per replica. Returns (logical expert of each slot, replica rank, replica
/// count of each logical expert).
pub fn replicate_experts(
    weight: &[f64],
    n_physical: usize,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let n_logical = weight.len();
    assert!(n_physical >= n_logical, "fewer slots than experts");
    let mut phy2log: Vec<usize> = (0..n_logical).collect();
    let mut rank = vec![0; n_logical];
    let mut count = vec![1usize; n_logical];
    for _ in n_logical..n_physical {
        let heaviest = (0..n_logical)
            .max_by(|&a, &b| {
                (weight[a] / count[a] as f64)
                    .total_cmp(&(weight[b] / count[b] as f64))
                    .then(b.cmp(&a))
            })
            .expect("at least one expert");
        phy2log.push(heaviest);
        rank.push(count[heaviest]);
        count[heaviest] += 1;
    }
    (phy2log, rank, count)
}

/// The hierarchical policy: returns the logical expert of each physical slot, slots ordered
/// GPU by GPU (`n_physical / n_gpus` per GPU).
pub fn rebalance_hierarchical(
    weight: &[f64],
    n_physical: usize,
    n_groups: usize,
    n_nodes: usize,
    n_gpus: usize,
) -> Vec<usize> {
    let n_logical = weight.len();
    assert!(
        n_logical.is_multiple_of(n_groups)
            && n_groups.is_multiple_of(n_nodes)
            && n_gpus.is_multiple_of(n_nodes)
    );
    assert!(n_physical.is_multiple_of(n_gpus));
    let group_size = n_logical / n_groups;
    let groups_per_node = n_groups / n_nodes;
    let per_gpu = n_physical / n_gpus;
    let logical_per_node = n_logical / n_nodes;
    let physical_per_node = n_physical / n_nodes;
    let gpus_per_node = n_gpus / n_nodes;

    // Step 1: groups to nodes, which renumbers the logical experts node by node ("mlog").
    let group_tokens: Vec<f64> = weight.chunks(group_size).map(|g| g.iter().sum()).collect();
    let (group_node, group_rank) = balanced_packing(&group_tokens, n_nodes);
    let mut mlog2log = vec![0; n_logical];
    for group in 0..n_groups {
        let base = (group_node[group] * groups_per_node + group_rank[group]) * group_size;
        for j in 0..group_size {
            mlog2log[base + j] = group * group_size + j;
        }
    }

    let mut slots = vec![0; n_physical];
    for node in 0..n_nodes {
        // Step 2: replicate within the node.
        let node_weight: Vec<f64> = (0..logical_per_node)
            .map(|m| weight[mlog2log[node * logical_per_node + m]])
            .collect();
        let (phy2mlog, _, mlog_count) = replicate_experts(&node_weight, physical_per_node);
        // Step 3: physical experts to the node's GPUs.
        let phy_tokens: Vec<f64> = phy2mlog
            .iter()
            .map(|&m| node_weight[m] / mlog_count[m] as f64)
            .collect();
        let (pack, rank) = balanced_packing(&phy_tokens, gpus_per_node);
        for (phy, &m) in phy2mlog.iter().enumerate() {
            let slot = node * physical_per_node + pack[phy] * per_gpu + rank[phy];
            slots[slot] = mlog2log[node * logical_per_node + m];
        }
    }
    slots
}

/// EPLB's entry point: hierarchical when the groups divide among the nodes, global otherwise.
pub fn rebalance_experts(
    weight: &[f64],
    n_physical: usize,
    n_groups: usize,
    n_nodes: usize,
    n_gpus: usize,
) -> Vec<usize> {
    if n_groups.is_multiple_of(n_nodes) {
        rebalance_hierarchical(weight, n_physical, n_groups, n_nodes, n_gpus)
    } else {
        rebalance_hierarchical(weight, n_physical, 1, 1, n_gpus)
    }
}

impl ExpertMapper for Eplb {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        let n_gpus = problem.n_gpus();
        let steps = problem.n_steps() as f64;
        let weight: Vec<f64> = problem
            .mean_utilization()
            .iter()
            .map(|u| u * steps)
            .collect();
        let n_physical = problem.n_experts + self.redundant_slots;
        let slots = rebalance_experts(&weight, n_physical, self.n_groups, self.n_nodes, n_gpus);
        let per_gpu = n_physical / n_gpus;
        LayerMapping {
            slots: slots.chunks(per_gpu).map(<[usize]>::to_vec).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_fills_every_pack_equally_and_balances() {
        let weight = [10.0, 9.0, 1.0, 2.0, 8.0, 3.0, 7.0, 4.0];
        let (pack, rank) = balanced_packing(&weight, 4);
        let mut per_pack = [0usize; 4];
        let mut load = [0.0; 4];
        for (i, &p) in pack.iter().enumerate() {
            per_pack[p] += 1;
            load[p] += weight[i];
        }
        assert_eq!(per_pack, [2, 2, 2, 2]);
        // Heaviest first into the lightest pack: {10,1}, {9,2}, {8,3}, {7,4}.
        assert_eq!(load, [11.0, 11.0, 11.0, 11.0]);
        let mut ranks: Vec<(usize, usize)> = pack.iter().copied().zip(rank).collect();
        ranks.sort();
        ranks.dedup();
        assert_eq!(ranks.len(), 8, "ranks within a pack are distinct");
    }

    #[test]
    fn replication_goes_to_the_heaviest_per_replica() {
        let (phy2log, rank, count) = replicate_experts(&[100.0, 10.0, 40.0], 6);
        assert_eq!(phy2log, vec![0, 1, 2, 0, 0, 2]);
        assert_eq!(rank, vec![0, 0, 0, 1, 2, 1]);
        assert_eq!(count, vec![3, 1, 2]);
        assert_eq!(count.iter().sum::<usize>(), 6);
    }

    #[test]
    fn every_expert_placed_slots_equal_replicas_sum_to_slots() {
        let weight: Vec<f64> = (0..64).map(|e| ((e * 37) % 23 + 1) as f64 * 10.0).collect();
        for (redundant, groups, nodes, gpus) in [
            (0, 1, 1, 4),
            (8, 1, 1, 8),
            (16, 8, 2, 8),
            (8, 4, 3, 8),
            (32, 16, 4, 16),
        ] {
            let slots = rebalance_experts(&weight, 64 + redundant, groups, nodes, gpus);
            assert_eq!(slots.len(), 64 + redundant);
            let mapping = LayerMapping {
                slots: slots
                    .chunks((64 + redundant) / gpus)
                    .map(<[usize]>::to_vec)
                    .collect(),
            };
            mapping.check(64, gpus).unwrap();
            let counts = mapping.replica_counts(64);
            assert_eq!(counts.iter().sum::<usize>(), 64 + redundant);
            assert!(counts.iter().all(|&c| c >= 1));
            // Replicas go to heavy experts: the lightest expert is never replicated.
            let lightest = (0..64)
                .min_by(|&a, &b| weight[a].total_cmp(&weight[b]))
                .unwrap();
            if redundant > 0 {
                assert_eq!(counts[lightest], 1);
            }
        }
    }

    #[test]
    fn zero_redundancy_balances_better_than_linear() {
        let weight = [50.0, 40.0, 30.0, 20.0, 1.0, 1.0, 1.0, 1.0];
        let slots = rebalance_experts(&weight, 8, 1, 1, 4);
        let mut load = [0.0; 4];
        for (s, &e) in slots.iter().enumerate() {
            load[s / 2] += weight[e];
        }
        let max = load.iter().copied().fold(0.0, f64::max);
        assert_eq!(max, 51.0); // linear would put 90 on GPU 0
    }
}
