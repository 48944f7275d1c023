//! ExpertWeave's multi-adapter serving as an option of the serving family (`[adapters]`, docs/
//! serving-family.md "Adapters"): ESFT expert adapters over an MLA MoE base model, each request
//! drawing its adapter from ExpertWeave's power-law shares, an adapter-memory manager (the
//! extension point `policies::memory` ExpertWeave brought, built by the `Policies` registry) placing the base
//! model and the adapters beside the KV cache of the replica's GPUs, and the two terms a step
//! touching adapters adds on the replica's own expert layout: the tokens an adapter's fine-tuned
//! experts take (their copies stream as extra weights on the GPU hosting the base expert) and the
//! batched-rerouting operator of every MoE layer.

use super::config::ReplicaSpec;
use super::expert_routing::capped;
use super::mapping::ExpertLayout;
use super::popularity::Popularity;
use super::rerouting::{Rerouting, ReroutingCost, ReroutingTraffic};
use crate::cost::roofline::Roofline;
use crate::cost::shape::MlaMoeShape;
use crate::distributions::Zipf;
use crate::policies::memory::InstancePlan;
use crate::policies::memory::adapters::{EsftAdapter, esft_adapter, esft_adapters};
use crate::policies::memory::device::{DeviceMemory, GIB};
use crate::policies::memory::{MemoryConfig, slot_geometry};
use crate::rng::SimRng;
use crate::serving::{AdapterTokens, RoutedTokens};
use crate::validate::limits::{Demand, Limits, Quantity};
use crate::validate::{FieldError, at_least_one, field_error, positive};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

fn d_one() -> f64 {
    1.0
}
fn d_rerouting() -> Rerouting {
    Rerouting::Fused
}
fn d_unfused_ops() -> u64 {
    5
}

/// `[adapters]`: which ESFT adapters the replicas serve, how requests pick them, the memory
/// manager that places them, and how tokens reach their experts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptersTable {
    /// Table 1 adapters by name (expertweave.txt); with `count`, the first `count` of them.
    #[serde(default)]
    pub names: Vec<String>,
    /// The first `count` adapters of Table 1 (or of `names`).
    #[serde(default)]
    pub count: Option<usize>,
    /// Power-law shape of the adapters' request shares, in (0, 1] (1: uniform).
    #[serde(default = "d_one")]
    pub alpha: f64,
    /// The adapter-memory manager (`base_only`, `padding`, `virtual_weight_tensor`).
    pub memory: MemoryConfig,
    /// Memory per GPU that is neither weights nor KV cache, in GiB (the managers leave it aside).
    #[serde(default)]
    pub runtime_reserve_gib: f64,
    /// Evaluate the memory plan without serving a request (ExpertWeave's Figure 9: each
    /// manager's weights, adapter memory and KV capacity on one device budget).
    #[serde(default)]
    pub plan_only: bool,
    /// `fused` (one rerouting kernel per MoE layer) or `unfused` (a chain of operators).
    #[serde(default = "d_rerouting")]
    pub rerouting: Rerouting,
    /// Operators of the unfused chain per MoE layer.
    #[serde(default = "d_unfused_ops")]
    pub unfused_ops: u64,
    /// Zipf exponent of a domain's expert popularity over its relevance ranking.
    #[serde(default = "d_one")]
    pub expert_zipf_s: f64,
}

/// The validated `[adapters]` table.
#[derive(Clone, Debug)]
pub struct AdapterSpec {
    pub adapters: Vec<EsftAdapter>,
    /// Each request's adapter: Zipf over the adapters with exponent `1 / alpha - 1`
    /// (`adapter_draw`).
    pub draw: Zipf,
    pub shares: Vec<f64>,
    pub memory: MemoryConfig,
    /// The run is the memory plan alone (`plan_only`): nothing is served.
    pub plan_only: bool,
    pub runtime_reserve_bytes: u64,
    pub rerouting: Rerouting,
    pub unfused_ops: u64,
    pub expert_zipf_s: f64,
}

impl AdaptersTable {
    /// Checks the table for `shape` (the adapter count against `limits` before any adapter is
    /// built); errors name `adapters.<field>`.
    pub fn validate(
        &self,
        shape: &MlaMoeShape,
        limits: &crate::validate::limits::Limits,
    ) -> Result<AdapterSpec, FieldError> {
        let adapters = resolve_adapters(
            &AdaptersConfig {
                names: self.names.clone(),
                count: self.count,
            },
            shape,
            "adapters",
            limits,
        )?;
        if let MemoryConfig::Merged {
            separate_devices: false,
            ..
        } = self.memory
            && adapters.len() > 1
            && !self.plan_only
        {
            return Err(field_error(
                "adapters.memory.separate_devices",
                format!(
                    "{} merged copies sharing one replica's GPUs would be instances \
                     time-sharing them, which a serving-family replica is not: set \
                     separate_devices = true (each merged copy a replica of its own, \
                     replica.count = {}), use base_only, padding or virtual_weight_tensor, or \
                     plan the copies in one budget without serving (plan_only = true)",
                    adapters.len(),
                    adapters.len()
                ),
            ));
        }
        validate_memory(&self.memory, &adapters, "adapters.memory")?;
        let alpha = positive("adapters.alpha", self.alpha)?;
        if alpha > 1.0 {
            return Err(field_error(
                "adapters.alpha",
                format!("must be in (0, 1] (1 is uniform), got {alpha}"),
            ));
        }
        if !(self.runtime_reserve_gib.is_finite()
            && (0.0..=1e4).contains(&self.runtime_reserve_gib))
        {
            return Err(field_error(
                "adapters.runtime_reserve_gib",
                format!(
                    "must be a number of GiB in [0, 10000], got {}",
                    self.runtime_reserve_gib
                ),
            ));
        }
        let zipf_s = positive("adapters.expert_zipf_s", self.expert_zipf_s)?;
        if zipf_s > 10.0 {
            return Err(field_error(
                "adapters.expert_zipf_s",
                format!("must lie in (0, 10], got {zipf_s}"),
            ));
        }
        at_least_one("adapters.unfused_ops", self.unfused_ops as usize)?;
        if self.unfused_ops > 100 {
            return Err(field_error(
                "adapters.unfused_ops",
                format!("must be at most 100, got {}", self.unfused_ops),
            ));
        }
        Ok(AdapterSpec {
            draw: adapter_draw(adapters.len(), alpha),
            shares: adapter_shares(adapters.len(), alpha),
            adapters,
            memory: self.memory.clone(),
            plan_only: self.plan_only,
            runtime_reserve_bytes: (self.runtime_reserve_gib * GIB as f64).round() as u64,
            rerouting: self.rerouting,
            unfused_ops: self.unfused_ops,
            expert_zipf_s: zipf_s,
        })
    }
}

/// `[adapters]`: Table 1 adapters by `names`, the first `count` of Table 1 (cycling with `#2`...
/// replicas past ten), or the first `count` of `names` (so `adapters.count` can be swept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptersConfig {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub count: Option<usize>,
}

/// Per-adapter request shares with power-law shape `alpha` in (0, 1]: share of the adapter of
/// rank i (0-based) proportional to (i + 1)^-(1/alpha - 1), a Zipf law with exponent
/// 1/alpha - 1 (the sampler each request's adapter is drawn from). alpha = 1 is uniform; with two
/// adapters alpha = 0.3 gives 83/17 and alpha = 0.2 gives 94/6, the paper's "approximately 80%"
/// and "up to 95%" (Section 5.2). `n` at least 1, `alpha` in (0, 1].
pub fn adapter_draw(n: usize, alpha: f64) -> Zipf {
    Zipf::new(n, 1.0 / alpha - 1.0).expect("validated: an adapter and alpha in (0, 1]")
}

/// The probabilities of [`adapter_draw`].
pub fn adapter_shares(n: usize, alpha: f64) -> Vec<f64> {
    let draw = adapter_draw(n, alpha);
    (0..n).map(|i| draw.probability(i)).collect()
}

/// The adapters `table` names (`names`, `count`, or the first `count` of `names`) for `shape`;
/// errors name `<prefix>.names`, `<prefix>.count` or `<prefix>` (the serving family's
/// `[adapters]` reads it).
pub fn resolve_adapters(
    table: &AdaptersConfig,
    shape: &MlaMoeShape,
    prefix: &str,
    limits: &Limits,
) -> Result<Vec<EsftAdapter>, FieldError> {
    let key = |field: &str| format!("{prefix}.{field}");
    // The count sizes the adapters built below: held to its ceiling first.
    if let Some(count) = table.count {
        limits.check(&[Demand::new(Quantity::Adapters, count as f64, &key("count"))])?;
    }
    let adapters = match (&table.names[..], table.count) {
        ([], Some(count)) => {
            esft_adapters(count, shape).map_err(|e| field_error(&key("count"), e.to_string()))?
        }
        ([], None) => {
            return Err(field_error(
                prefix,
                "give `names` (Table 1 adapters), `count` (the first n of Table 1), or both \
                 (the first `count` of `names`)",
            ));
        }
        (names, count) => {
            let take = count.unwrap_or(names.len());
            if take > names.len() {
                return Err(field_error(
                    &key("count"),
                    format!("{take} exceeds the {} names given", names.len()),
                ));
            }
            names[..take]
                .iter()
                .map(|name| esft_adapter(name, shape))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| field_error(&key("names"), e.to_string()))?
        }
    };
    if adapters.is_empty() {
        return Err(field_error(&key("count"), "must be at least 1, got 0"));
    }
    Ok(adapters)
}

/// Checks the manager `memory` (the table at `path`) against `adapters`: its utilization, its
/// page size, and slot geometry that holds every adapter.
pub fn validate_memory(
    memory: &MemoryConfig,
    adapters: &[EsftAdapter],
    path: &str,
) -> Result<(), FieldError> {
    let key = |field: &str| format!("{path}.{field}");
    match memory {
        MemoryConfig::Merged { utilization, .. } => {
            if let Some(u) = utilization {
                let u = positive(&key("utilization"), *u)?;
                if u > 1.0 {
                    return Err(field_error(
                        &key("utilization"),
                        format!("must be at most 1, got {u}"),
                    ));
                }
            }
        }
        MemoryConfig::Padding { e_max, a_max } => {
            slot_geometry("padding", adapters, *a_max, *e_max)
                .map_err(|e| field_error(path, e.to_string()))?;
        }
        MemoryConfig::VirtualWeightTensor {
            page_bytes,
            e_max,
            a_max,
        } => {
            at_least_one(&key("page_bytes"), *page_bytes as usize)?;
            slot_geometry("virtual_weight_tensor", adapters, *a_max, *e_max)
                .map_err(|e| field_error(path, e.to_string()))?;
        }
        MemoryConfig::BaseOnly => {}
    }
    Ok(())
}

/// One replica's memory as an adapter-memory manager budgets it: each of its GPUs (the
/// datasheet's bytes) at `gpu_memory_utilization`, less the runtime reserve; KV allocated in
/// blocks of the replica's block size; MLA's latent cache held whole by every tensor-parallel
/// rank.
pub fn device_memory(replica: &ReplicaSpec, adapters: &AdapterSpec) -> DeviceMemory {
    DeviceMemory {
        capacity_bytes: (replica.gpu.memory_gb * 1e9).round() as u64,
        utilization: replica.gpu_memory_utilization,
        runtime_reserve_bytes: adapters.runtime_reserve_bytes,
        n_devices: replica.gpus as u64,
        kv_block_tokens: u64::from(replica.kv_pool_block),
        kv_replication: replica.tensor_parallel as u64,
    }
}

pub use crate::serving::step::CopyTokens;

/// `AdapterRouter::route` bisects for each assignment where a layer has more than this many
/// slots per assignment, and rounds slot by slot otherwise.
const SPARSE_RATIO: u64 = 4;

/// Where a step's tokens go when requests carry adapters: each adapter's tokens follow its
/// domain's popularity (`super::popularity::Popularity`, each expert's probability capped at
/// `1 / top_k` as a token picks an expert once); where the replica reroutes, a token routed to
/// an expert its adapter fine-tuned goes to the adapter's copy instead. Per MoE layer the
/// expected assignments of the base experts, then of the copies, are rounded to whole tokens by
/// systematic sampling over all of them (one uniform offset per layer and step), the layer's
/// total exact.
pub struct AdapterRouter {
    n_layers: usize,
    n_experts: usize,
    top_k: u64,
    layout: Rc<ExpertLayout>,
    /// `[adapter][layer][expert]`: capped probability of one draw.
    probability: Vec<f64>,
    /// `probability` with 0 where the draw goes to the adapter's copy instead of the base
    /// expert (the instance reroutes to the experts the adapter fine-tuned).
    to_base: Vec<f64>,
    /// Per `[adapter][layer]`, the experts whose draws go to the adapter's copies (ascending),
    /// `copy_experts[copy_start[i]..copy_start[i + 1]]`.
    copy_start: Vec<u32>,
    copy_experts: Vec<u32>,
    rng: SimRng,
    /// The tokens per adapter `cumulative` and `copy_expert` were computed for (consecutive
    /// decode steps of an unchanged batch route the same).
    routed_for: Option<Vec<AdapterTokens>>,
    /// Per layer, the running sums of the expected assignments of the base experts, then of
    /// the copies.
    cumulative: Vec<Vec<f64>>,
    /// Per layer, the base expert of each copy slot.
    copy_expert: Vec<Vec<u32>>,
    /// Expected assignments of one layer's base experts, then its copies (scratch).
    expected: Vec<f64>,
    per_expert: Vec<u32>,
    per_gpu: Vec<u32>,
    copies: Vec<Vec<CopyTokens>>,
    /// One layer's rounded running sums (scratch).
    uptos: Vec<u32>,
}

impl AdapterRouter {
    /// The router of `shape`'s MoE layers for `adapters` on `layout`, copies used when
    /// `instance` reroutes to the adapters' experts, offsets drawn from `offsets`.
    pub fn new(
        shape: &MlaMoeShape,
        adapters: &AdapterSpec,
        instance: &InstancePlan,
        layout: Rc<ExpertLayout>,
        offsets: SimRng,
    ) -> AdapterRouter {
        let popularity = Popularity::of(shape, &adapters.adapters, adapters.expert_zipf_s);
        let (layers, experts, k) = (
            shape.n_moe_layers() as usize,
            shape.n_routed_experts as usize,
            shape.top_k,
        );
        let to_copies = instance.reroutes && instance.adapter_experts;
        let mut probability = Vec::with_capacity(adapters.adapters.len() * layers * experts);
        let mut to_base = Vec::with_capacity(probability.capacity());
        let (mut copy_start, mut copy_experts) = (vec![0u32], Vec::new());
        for a in 0..adapters.adapters.len() {
            for layer in 0..layers {
                let p = popularity.probabilities(a, layer).to_vec();
                // A hair below 1 / k, so that rounding never gives an expert more assignments
                // than tokens.
                let p = capped(p, (1.0 - 1e-9) / k as f64);
                let tuned = popularity.tuned(a, layer);
                for (e, &x) in p.iter().enumerate() {
                    if to_copies && tuned[e] {
                        to_base.push(0.0);
                        copy_experts.push(e as u32);
                    } else {
                        to_base.push(x);
                    }
                }
                copy_start.push(copy_experts.len() as u32);
                probability.extend(p);
            }
        }
        AdapterRouter {
            n_layers: layers,
            n_experts: experts,
            top_k: k,
            per_gpu: vec![0; layers * layout.gpus()],
            uptos: Vec::new(),
            layout,
            probability,
            to_base,
            copy_start,
            copy_experts,
            rng: offsets,
            routed_for: None,
            cumulative: vec![Vec::new(); layers],
            copy_expert: vec![Vec::new(); layers],
            expected: Vec::new(),
            per_expert: vec![0; layers * experts],
            copies: vec![Vec::new(); layers],
        }
    }

    /// Routes a step whose tokens per adapter are `adapters`: per layer, tokens per base expert
    /// and per GPU (copies included), and the copies' tokens.
    pub fn route(&mut self, adapters: &[AdapterTokens]) -> RoutedTokens<'_> {
        let total: u64 = adapters.iter().map(|a| a.tokens).sum();
        let assignments = total * self.top_k;
        let (experts, gpus, layers) = (self.n_experts, self.layout.gpus(), self.n_layers);
        if self.routed_for.as_deref() != Some(adapters) {
            self.expect(adapters);
        }
        for layer in 0..layers {
            let offset: f64 = if assignments > 0 {
                self.rng.random()
            } else {
                0.0
            };
            let row = &mut self.per_expert[layer * experts..][..experts];
            let copies = &mut self.copies[layer];
            copies.clear();
            let mut copies_slot = usize::MAX;
            let cumulative = &self.cumulative[layer];
            let slots = cumulative.len();
            if assignments * SPARSE_RATIO < slots as u64 {
                // Few assignments among many slots (a decode step of a small batch): the
                // rounded running sum `min(floor(running + offset), assignments)` (the last
                // slot's `assignments`) never falls, so the `j`-th assignment goes to the
                // first slot whose sum reaches `j`, found by bisection; the same counts as
                // the slot-by-slot pass below.
                row.fill(0);
                let below_last = &cumulative[..slots - 1];
                let mut from = 0;
                for j in 1..=assignments {
                    let reach = j as f64;
                    let slot =
                        from + below_last[from..].partition_point(|&running| running + offset < reach);
                    from = slot;
                    if slot < experts {
                        row[slot] += 1;
                    } else {
                        let expert = self.copy_expert[layer][slot - experts];
                        match copies.last_mut() {
                            Some(last) if last.expert == expert && copies_slot == slot => {
                                last.tokens += 1
                            }
                            _ => {
                                copies.push(CopyTokens { expert, tokens: 1 });
                                copies_slot = slot;
                            }
                        }
                    }
                }
            } else if assignments < 1 << 30 {
                // Every slot's rounded running sum first, capped at the assignments (the last
                // slot's the assignments): below 2^30 assignments each value is under 2^31,
                // where converting through `i32` (which vectorizes) truncates as `u64` does.
                // The sums never fall (see above), so a slot's count is its sum less the one
                // before, with no clamp: the base experts' in one pass the compiler
                // vectorizes, then the copies' (only those with tokens kept).
                let cap = assignments as u32;
                self.uptos.resize(slots, 0);
                let uptos = &mut self.uptos[..slots];
                for (upto, &running) in uptos.iter_mut().zip(cumulative) {
                    *upto = (running + offset) as i32 as u32;
                }
                // The cap: the sums past it are a suffix (they never fall).
                for upto in uptos.iter_mut().rev() {
                    if *upto <= cap {
                        break;
                    }
                    *upto = cap;
                }
                uptos[slots - 1] = cap;
                let uptos = &self.uptos[..slots];
                row[0] = uptos[0];
                for ((count, &upto), &before) in row[1..]
                    .iter_mut()
                    .zip(&uptos[1..experts])
                    .zip(&uptos[..experts - 1])
                {
                    *count = upto - before;
                }
                let copy_expert = &self.copy_expert[layer];
                for (c, pair) in uptos[experts - 1..].windows(2).enumerate() {
                    let count = pair[1] - pair[0];
                    if count > 0 {
                        copies.push(CopyTokens {
                            expert: copy_expert[c],
                            tokens: count,
                        });
                    }
                }
            } else {
                // The slot-by-slot rounding in `u64` (a step of 2^30 assignments or more).
                let mut given = 0u64;
                for (slot, &running) in cumulative.iter().enumerate() {
                    let upto = if slot + 1 == slots {
                        assignments
                    } else {
                        ((running + offset) as u64).min(assignments)
                    };
                    let count = (upto.max(given) - given) as u32;
                    given = upto.max(given);
                    if slot < experts {
                        row[slot] = count;
                    } else if count > 0 {
                        copies.push(CopyTokens {
                            expert: self.copy_expert[layer][slot - experts],
                            tokens: count,
                        });
                    }
                }
            }
            let on_gpus = &mut self.per_gpu[layer * gpus..][..gpus];
            self.layout.gpu_sums(layer, row, on_gpus);
            for c in copies.iter() {
                for (g, n) in self.layout.expert_hosts(layer, c.expert, c.tokens) {
                    on_gpus[g] += n;
                }
            }
        }
        RoutedTokens {
            layers,
            per_expert: &self.per_expert,
            per_gpu: &self.per_gpu,
            per_slot: &[],
            copies: &self.copies,
        }
    }

    /// Each layer's expected assignments for `adapters`' tokens (the base experts', then the
    /// copies'), as running sums, and the copies' base experts.
    fn expect(&mut self, adapters: &[AdapterTokens]) {
        let (experts, layers) = (self.n_experts, self.n_layers);
        for layer in 0..layers {
            self.expected.clear();
            self.expected.resize(experts, 0.0);
            let copy_expert = &mut self.copy_expert[layer];
            copy_expert.clear();
            for entry in adapters {
                let weight = (entry.tokens * self.top_k) as f64;
                let list = entry.adapter as usize * layers + layer;
                let row = list * experts;
                // A copy's expert adds `weight x 0`, which leaves its (non-negative) sum as is.
                for (x, &p) in self.expected[..experts]
                    .iter_mut()
                    .zip(&self.to_base[row..][..experts])
                {
                    *x += weight * p;
                }
                let to_copies = self.copy_start[list] as usize..self.copy_start[list + 1] as usize;
                for &e in &self.copy_experts[to_copies] {
                    self.expected
                        .push(weight * self.probability[row + e as usize]);
                    copy_expert.push(e);
                }
            }
            let cumulative = &mut self.cumulative[layer];
            cumulative.clear();
            let mut running = 0.0f64;
            cumulative.extend(self.expected.iter().map(|&x| {
                running += x;
                running
            }));
        }
        self.routed_for = Some(adapters.to_vec());
    }
}

/// The rerouting of `instance` over `shape`'s MoE layers on `replica`'s GPUs (none unless the
/// instance reroutes): the shared price (`super::rerouting::ReroutingCost`), its launches in the
/// step's CUDA graph with the MoE kernels (the replica's host overhead covers the replay).
pub fn rerouting_cost(
    shape: &MlaMoeShape,
    adapters: &AdapterSpec,
    instance: &InstancePlan,
    replica: &ReplicaSpec,
) -> Option<ReroutingCost> {
    instance.reroutes.then(|| {
        ReroutingCost::new(
            ReroutingTraffic::new(
                shape,
                adapters.rerouting,
                adapters.unfused_ops,
                instance.adapters.len(),
            ),
            Roofline::of(&replica.gpu),
            &replica.speeds,
            replica.gpus as u64,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::memory::device::KvCapacity;
    use crate::rng::stream;

    fn spec(names: &[&str]) -> AdapterSpec {
        let text = format!(
            "names = {names:?}\nmemory = {{ kind = \"virtual_weight_tensor\" }}\nrerouting = \
             \"unfused\""
        );
        toml::from_str::<AdaptersTable>(&text)
            .unwrap()
            .validate(
                &MlaMoeShape::esft_vanilla_16b(),
                &crate::validate::limits::Limits::default(),
            )
            .unwrap()
    }

    fn instance(reroutes: bool, adapters: usize) -> InstancePlan {
        InstancePlan {
            adapters: (0..adapters).collect(),
            reroutes,
            adapter_experts: reroutes,
            n_devices: 8,
            weight_bytes: 0,
            kv: KvCapacity {
                kv_bytes: 0,
                kv_tokens: 1,
                out_of_memory: false,
            },
        }
    }

    #[test]
    fn whole_tokens_follow_each_adapters_domain_and_tuned_experts_go_to_copies() {
        let shape = MlaMoeShape::esft_vanilla_16b();
        let spec = spec(&["gate-math", "token-intent"]);
        let popularity = Popularity::of(&shape, &spec.adapters, 1.0);
        // EP 4 over 8 GPUs: two copies of each expert group.
        let layout = Rc::new(ExpertLayout::linear(26, 64, 4, 8));
        let mut router = AdapterRouter::new(
            &shape,
            &spec,
            &instance(true, 2),
            layout.clone(),
            stream(1, "r"),
        );
        let step = [
            AdapterTokens {
                adapter: 0,
                tokens: 700,
            },
            AdapterTokens {
                adapter: 1,
                tokens: 300,
            },
        ];
        let routed = router.route(&step);
        let (routed_expert, routed_gpu) = (routed.per_expert.to_vec(), routed.per_gpu.to_vec());
        let copies = routed.copies.to_vec();
        for layer in 0..26 {
            // Expected draws x per weight: by hand from each domain's capped Zipf popularity.
            let cap = |p: &[f64]| capped(p.to_vec(), (1.0 - 1e-9) / 6.0);
            let (p0, p1) = (
                cap(popularity.probabilities(0, layer)),
                cap(popularity.probabilities(1, layer)),
            );
            let (t0, t1) = (popularity.tuned(0, layer), popularity.tuned(1, layer));
            let row = &routed_expert[layer * 64..][..64];
            for e in 0..64 {
                let base = 4200.0 * p0[e] * f64::from(u8::from(!t0[e]))
                    + 1800.0 * p1[e] * f64::from(u8::from(!t1[e]));
                assert!(
                    (f64::from(row[e]) - base).abs() < 1.0,
                    "layer {layer} expert {e}"
                );
            }
            // Each copy is a tuned expert of one adapter, its tokens within 1 of its expectation
            // (two adapters tuning one expert have two copies: checked by their sum).
            for c in &copies[layer] {
                let e = c.expert as usize;
                assert!(t0[e] || t1[e]);
                let both: u32 = copies[layer]
                    .iter()
                    .filter(|d| d.expert == c.expert)
                    .map(|d| d.tokens)
                    .sum();
                let x = 4200.0 * p0[e] * f64::from(u8::from(t0[e]))
                    + 1800.0 * p1[e] * f64::from(u8::from(t1[e]));
                assert!(
                    (f64::from(both) - x).abs() < 2.0,
                    "layer {layer} copy of {e}"
                );
            }
            // Every assignment lands once: on a base expert or a copy, and on the GPUs.
            let copied: u32 = copies[layer].iter().map(|c| c.tokens).sum();
            assert_eq!(row.iter().sum::<u32>() + copied, 6000);
            assert_eq!(routed_gpu[layer * 8..][..8].iter().sum::<u32>(), 6000);
        }
        assert!(copies.iter().any(|layer| !layer.is_empty()));
        // Without rerouting (base only) no token reaches a copy.
        let mut base =
            AdapterRouter::new(&shape, &spec, &instance(false, 2), layout, stream(1, "r"));
        assert!(base.route(&step).copies.iter().all(Vec::is_empty));
    }

    #[test]
    fn every_step_routes_to_the_counts_of_the_slot_by_slot_rounding() {
        let shape = MlaMoeShape::esft_vanilla_16b();
        let spec = spec(&["gate-math", "token-intent"]);
        let layout = Rc::new(ExpertLayout::linear(26, 64, 4, 8));
        let mut router =
            AdapterRouter::new(&shape, &spec, &instance(true, 2), layout, stream(1, "r"));
        let mut offsets = stream(1, "r");
        let (mut bisected, mut dense) = (0, 0);
        for (first, second) in [
            (1, 0),
            (0, 1),
            (1, 1),
            (2, 1),
            (0, 3),
            (1, 0),
            (40, 30),
            (5, 7),
            (13, 0),
            (300, 1),
            (2000, 900),
            (40, 30),
        ] {
            let step = [
                AdapterTokens {
                    adapter: 0,
                    tokens: first,
                },
                AdapterTokens {
                    adapter: 1,
                    tokens: second,
                },
            ];
            let assignments = (first + second) * 6;
            let routed = router.route(&step);
            let (per_expert, copies) = (routed.per_expert.to_vec(), routed.copies.to_vec());
            for layer in 0..26 {
                let offset: f64 = offsets.random();
                let cumulative = &router.cumulative[layer];
                let slots = cumulative.len();
                bisected += usize::from(assignments * SPARSE_RATIO < slots as u64);
                dense += usize::from(assignments * SPARSE_RATIO >= slots as u64);
                // The rule slot by slot: each slot's rounded running sum less the one before.
                let mut given = 0u64;
                let mut want_copies = Vec::new();
                for (slot, &running) in cumulative.iter().enumerate() {
                    let upto = if slot + 1 == slots {
                        assignments
                    } else {
                        ((running + offset).floor() as u64).min(assignments)
                    };
                    let count = (upto.max(given) - given) as u32;
                    given = upto.max(given);
                    if slot < 64 {
                        assert_eq!(per_expert[layer * 64 + slot], count, "layer {layer} slot {slot}");
                    } else if count > 0 {
                        want_copies.push((router.copy_expert[layer][slot - 64], count));
                    }
                }
                let got: Vec<_> = copies[layer].iter().map(|c| (c.expert, c.tokens)).collect();
                assert_eq!(got, want_copies, "layer {layer}");
            }
        }
        assert!(bisected > 26 * 4, "the small steps took the bisection");
        assert!(dense > 26 * 5, "the larger steps took the slot-by-slot pass");
    }

    #[test]
    fn rerouting_moves_its_bytes_per_operator() {
        // 32 rows over 8 Ascend-910B NPUs, 2 adapters: per MoE layer and operator 32 x (4 + 2 x
        // 4 x 6) + 2 x 64 x 4 = 2,176 B, 272 B a NPU at its streaming rate; the unfused chain
        // is 5 operators over 26 MoE layers.
        let shape = MlaMoeShape::esft_vanilla_16b();
        let spec = spec(&["gate-math", "token-intent"]);
        let table: super::super::ServingConfig = toml::from_str(
            r#"
[model]
name = "esft-vanilla-16b"
[replica]
gpu = "Ascend-910B"
gpus = 8
tensor_parallel = 8
expert_parallel = 8
[workload]
n_requests = 1
prompt_tokens = { kind = "fixed", value = 1 }
output_tokens = { kind = "fixed", value = 1 }
[arrival]
pattern = "poisson"
rate_per_s = 1.0
"#,
        )
        .unwrap();
        let scenario = table
            .validate(std::path::Path::new("."), &mut Default::default())
            .unwrap();
        let cost = rerouting_cost(&shape, &spec, &instance(true, 2), &scenario.replica).unwrap();
        let ascend = crate::cost::gpu::GpuSpec::by_name("Ascend-910B").unwrap();
        let per_op = 272.0 / crate::cost::kernel::KernelRates::of(&ascend).stream_bytes_per_s * 1e9;
        assert!((cost.memory_ns(32) - 5.0 * 26.0 * per_op).abs() < 1e-9);
        assert_eq!(cost.operators(), 5.0 * 26.0);
        // Launched eagerly each operator waits for its 10 us launch (its 272 B take far less);
        // with no launch cost the eager price is the bytes' alone.
        assert_eq!(cost.eager_ns(32, 10_000.0), 5.0 * 26.0 * 10_000.0);
        assert_eq!(cost.eager_ns(32, 0.0), cost.memory_ns(32));
        assert!(rerouting_cost(&shape, &spec, &instance(false, 2), &scenario.replica).is_none());
    }
}
