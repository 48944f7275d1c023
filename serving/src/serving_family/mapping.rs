//! Where an MoE replica's experts live (`experts.mapping`, docs/serving-family.md): per layer and
//! per copy of the expert-parallel group, the experts each GPU of the group hosts, as any
//! `policies::mapping::ExpertMapper` (linear, round_robin, eplb, gem) maps them. An expert's tokens split
//! evenly over the group's copies, then over the expert's replicas inside a copy (EPLB's
//! redundant slots), the first copies and replicas taking the remainder. Mappers that read
//! observed loads (eplb, gem) are given a window of observed routing steps of the replica and
//! each GPU's MoE-layer latency curve at its own speed (`planning_costs`).

use super::config::{MappingStreams, ServingScenario};
use super::deployment::Deployment;
use super::server::ServingServer;
use super::step_cost::moe_layer_cost;
use crate::cost::moe_layer::{MoeLayerCost, SpeedFactors};
use crate::memo::{ExactKey, Memo};
use crate::policies::batch::BatchSelector;
use crate::policies::mapping::gpu_costs::{GpuCosts, planning_costs};
use crate::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use crate::records::DiscardRecords;
use crate::rng::{SimRng, stream};
use crate::serving::{QueuePolicy, Router};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

/// One expert slot of a GPU: the expert, which of its replicas inside the copy this is and how
/// many the copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    expert: u32,
    rank: u32,
    replicas: u32,
}

/// The expert layout of one replica: `layers x gpus x slots_per_gpu` slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertLayout {
    pub n_experts: usize,
    pub n_layers: usize,
    pub expert_parallel: usize,
    /// Copies of the expert-parallel group (`gpus / expert_parallel`).
    pub copies: usize,
    /// Expert slots on each GPU (experts / EP, plus EPLB's redundant slots / EP).
    pub slots_per_gpu: usize,
    slots: Vec<Slot>,
    /// Every slot of each layer's experts, `layer x experts + expert` ranging over
    /// `hosts[host_start[i]..host_start[i + 1]]`, GPU by GPU then slot by slot (what
    /// `expert_hosts` walks instead of scanning every GPU's slots).
    host_start: Vec<u32>,
    hosts: Vec<(u32, Slot)>,
    /// One copy and no replicated expert: a slot's tokens are its expert's.
    plain: bool,
}

/// `count` split over `parts`: what part `index` takes (the floor or the ceiling of
/// `count / parts`, the first parts taking the remainder).
fn share(count: u32, parts: u32, index: u32) -> u32 {
    if parts == 1 {
        return count;
    }
    (count + parts - 1 - index) / parts
}

impl ExpertLayout {
    /// The layout whose copy `c`, layer `l` is `mappings[c][l]` (each mapping over the
    /// `expert_parallel` GPUs of a copy, every GPU with as many slots).
    pub fn new(n_experts: usize, mappings: &[Vec<LayerMapping>]) -> ExpertLayout {
        let copies = mappings.len();
        let n_layers = mappings[0].len();
        let expert_parallel = mappings[0][0].n_gpus();
        let slots_per_gpu = mappings[0][0].slots[0].len();
        let gpus = copies * expert_parallel;
        let mut slots = vec![
            Slot {
                expert: 0,
                rank: 0,
                replicas: 1
            };
            n_layers * gpus * slots_per_gpu
        ];
        for (copy, layers) in mappings.iter().enumerate() {
            assert_eq!(layers.len(), n_layers, "every copy maps every layer");
            for (layer, mapping) in layers.iter().enumerate() {
                if let Err(e) = mapping.check(n_experts, expert_parallel) {
                    panic!("the expert mapper broke a mapping invariant on layer {layer}: {e}");
                }
                assert_eq!(
                    mapping.slots[0].len(),
                    slots_per_gpu,
                    "equal slots per layer"
                );
                let replicas = mapping.replica_counts(n_experts);
                let mut seen = vec![0u32; n_experts];
                for (slot_gpu, hosted) in mapping.slots.iter().enumerate() {
                    let gpu = copy * expert_parallel + slot_gpu;
                    for (s, &expert) in hosted.iter().enumerate() {
                        slots[(layer * gpus + gpu) * slots_per_gpu + s] = Slot {
                            expert: expert as u32,
                            rank: seen[expert],
                            replicas: replicas[expert] as u32,
                        };
                        seen[expert] += 1;
                    }
                }
            }
        }
        // Bucket the slots by (layer, expert), keeping their order (GPU, then slot).
        let mut host_start = vec![0u32; n_layers * n_experts + 1];
        for (i, s) in slots.iter().enumerate() {
            let layer = i / (gpus * slots_per_gpu);
            host_start[layer * n_experts + s.expert as usize + 1] += 1;
        }
        for i in 1..host_start.len() {
            host_start[i] += host_start[i - 1];
        }
        let mut next = host_start.clone();
        let mut hosts = vec![(0u32, slots[0]); slots.len()];
        for (i, &s) in slots.iter().enumerate() {
            let (layer, gpu) = (i / (gpus * slots_per_gpu), i / slots_per_gpu % gpus);
            let bucket = &mut next[layer * n_experts + s.expert as usize];
            hosts[*bucket as usize] = (gpu as u32, s);
            *bucket += 1;
        }
        ExpertLayout {
            n_experts,
            n_layers,
            expert_parallel,
            copies,
            slots_per_gpu,
            plain: copies == 1 && slots.iter().all(|s| s.replicas == 1),
            slots,
            host_start,
            hosts,
        }
    }

    /// The linear layout: GPU `g` of each copy hosts experts `g x m .. + m` (`m = experts / EP`)
    /// on every layer.
    pub fn linear(
        n_layers: usize,
        n_experts: usize,
        expert_parallel: usize,
        gpus: usize,
    ) -> ExpertLayout {
        let m = n_experts / expert_parallel;
        let linear = LayerMapping::from_assignment(
            &(0..n_experts).map(|e| e / m).collect::<Vec<_>>(),
            expert_parallel,
        );
        ExpertLayout::new(
            n_experts,
            &vec![vec![linear; n_layers]; gpus / expert_parallel],
        )
    }

    /// Whether the layout has one copy and no expert held by more than one slot (each slot's
    /// tokens are its expert's).
    pub fn plain(&self) -> bool {
        self.plain
    }

    pub fn gpus(&self) -> usize {
        self.expert_parallel * self.copies
    }

    /// GPU `gpu`'s tokens per slot on `layer`, from that layer's tokens per expert, into `out`
    /// (`slots_per_gpu` long).
    pub fn gpu_tokens(&self, layer: usize, per_expert: &[u32], gpu: usize, out: &mut [u32]) {
        for (o, n) in out.iter_mut().zip(self.slot_tokens(layer, per_expert, gpu)) {
            *o = n;
        }
    }

    /// Each GPU's tokens on `layer` (the sum of its `slot_tokens`), from that layer's tokens
    /// per expert, into `out` (one per GPU). A plain layout's slots take their experts' tokens
    /// whole, so a GPU's are its slots' experts' sum (no split to compute).
    #[inline]
    pub fn gpu_sums(&self, layer: usize, per_expert: &[u32], out: &mut [u32]) {
        if self.plain {
            let slots = &self.slots[layer * self.gpus() * self.slots_per_gpu..]
                [..out.len() * self.slots_per_gpu];
            if self.slots_per_gpu == 2 {
                // Two experts per GPU (a study's EP layouts): the pair's sum, in the same order.
                for (on_gpu, pair) in out.iter_mut().zip(slots.chunks_exact(2)) {
                    *on_gpu = [pair[0], pair[1]]
                        .iter()
                        .map(|s| per_expert[s.expert as usize])
                        .sum();
                }
                return;
            }
            for (on_gpu, slots) in out.iter_mut().zip(slots.chunks_exact(self.slots_per_gpu)) {
                *on_gpu = slots.iter().map(|s| per_expert[s.expert as usize]).sum();
            }
            return;
        }
        for (g, on_gpu) in out.iter_mut().enumerate() {
            *on_gpu = self.slot_tokens(layer, per_expert, g).sum();
        }
    }

    /// GPU `gpu`'s tokens per slot on `layer`, from that layer's tokens per expert: an
    /// expert's tokens split over the copies, then over its replicas in the copy.
    #[inline]
    pub fn slot_tokens<'a>(
        &'a self,
        layer: usize,
        per_expert: &'a [u32],
        gpu: usize,
    ) -> impl Iterator<Item = u32> + 'a {
        let copies = self.copies as u32;
        // One copy: no division on the way.
        let copy = if copies == 1 {
            0
        } else {
            (gpu / self.expert_parallel) as u32
        };
        let first = (layer * self.gpus() + gpu) * self.slots_per_gpu;
        self.slots[first..first + self.slots_per_gpu]
            .iter()
            .map(move |slot| {
                let in_copy = share(per_expert[slot.expert as usize], copies, copy);
                share(in_copy, slot.replicas, slot.rank)
            })
    }

    /// Slot `slot`'s tokens of each GPU in `gpus` (at most `N`) on `layer`, side by side (0
    /// past `gpus`): `slot_tokens`' entry `slot` of each.
    #[inline(always)]
    pub fn slot_tokens_side_by_side<const N: usize>(
        &self,
        layer: usize,
        per_expert: &[u32],
        gpus: Range<usize>,
        slot: usize,
    ) -> [u32; N] {
        let copies = self.copies as u32;
        let (per_layer, start, len) = (self.gpus() * self.slots_per_gpu, gpus.start, gpus.len());
        let first = layer * per_layer + start * self.slots_per_gpu + slot;
        if self.plain && len == N {
            return std::array::from_fn(|i| {
                per_expert[self.slots[first + i * self.slots_per_gpu].expert as usize]
            });
        }
        std::array::from_fn(|i| {
            if i >= len {
                return 0;
            }
            let gpu = start + i;
            let copy = if copies == 1 {
                0
            } else {
                (gpu / self.expert_parallel) as u32
            };
            let slot = &self.slots[first + i * self.slots_per_gpu];
            let in_copy = share(per_expert[slot.expert as usize], copies, copy);
            share(in_copy, slot.replicas, slot.rank)
        })
    }

    /// The tokens each slot holding `expert` on `layer` computes when the expert receives
    /// `count`, as `(gpu, tokens)`, GPU by GPU and on a GPU slot by slot (a GPU that does not
    /// host the expert has none).
    #[inline]
    pub fn expert_hosts(
        &self,
        layer: usize,
        expert: u32,
        count: u32,
    ) -> impl Iterator<Item = (usize, u32)> + '_ {
        let bucket = layer * self.n_experts + expert as usize;
        let range = self.host_start[bucket] as usize..self.host_start[bucket + 1] as usize;
        let copies = self.copies as u32;
        self.hosts[range].iter().map(move |&(gpu, s)| {
            let copy = gpu / self.expert_parallel as u32;
            let in_copy = share(count, copies, copy);
            (gpu as usize, share(in_copy, s.replicas, s.rank))
        })
    }

    /// Each GPU's expected tokens on `layer` when expert `e` expects `per_expert[e]`: an
    /// expert's tokens split evenly over its copies and replicas, into `out` (one per GPU).
    pub fn gpu_expected(&self, layer: usize, per_expert: &[f64], out: &mut [f32]) {
        let copies = self.copies as f64;
        let gpus = self.gpus();
        let layer_slots =
            &self.slots[layer * gpus * self.slots_per_gpu..][..gpus * self.slots_per_gpu];
        for (o, slots) in out
            .iter_mut()
            .zip(layer_slots.chunks_exact(self.slots_per_gpu))
        {
            *o = slots
                .iter()
                .map(|s| per_expert[s.expert as usize] / (copies * f64::from(s.replicas)))
                .sum::<f64>() as f32;
        }
    }

    /// Each slot of `layer`, GPU by GPU over every copy: its expert and how many slots of the
    /// layer hold that expert (copies x its replicas in a copy).
    pub fn layer_slots(&self, layer: usize) -> impl Iterator<Item = (usize, u32)> + '_ {
        let per_layer = self.gpus() * self.slots_per_gpu;
        let copies = self.copies as u32;
        self.slots[layer * per_layer..][..per_layer]
            .iter()
            .map(move |s| (s.expert as usize, copies * s.replicas))
    }

    /// The experts GPU `gpu` hosts on `layer`, slot by slot.
    pub fn hosted(&self, layer: usize, gpu: usize) -> Vec<usize> {
        let first = (layer * self.gpus() + gpu) * self.slots_per_gpu;
        self.slots[first..first + self.slots_per_gpu]
            .iter()
            .map(|s| s.expert as usize)
            .collect()
    }
}

/// Maps every layer of one expert-parallel group with `mapper`: layer `l` sees
/// `windows[l]` (its observed steps, tokens per expert, step-major) and the group's `costs`,
/// and draws from `rng_of_layer(l)`.
pub fn map_group(
    mapper: &mut dyn ExpertMapper,
    n_experts: usize,
    windows: &[Vec<f32>],
    costs: &GpuCosts,
    mut rng_of_layer: impl FnMut(usize) -> SimRng,
) -> Vec<LayerMapping> {
    windows
        .iter()
        .enumerate()
        .map(|(layer, window)| {
            let problem = LayerProblem {
                layer,
                n_experts,
                window,
                costs,
            };
            mapper.map_layer(&problem, &mut rng_of_layer(layer))
        })
        .collect()
}

/// The expert layout of each replica of `scenario`, replicas numbered group by group (`None`
/// for a replica of a dense group), as `mapper` maps every layer of every copy of the
/// replica's expert-parallel group; `deployments` holds one deployment per replica group. A
/// mapper that reads observed loads (`MapperConfig::window` > 0) is given the replica's window
/// from an observation pass of the whole cluster (`ServingServer::observing`, the same batch
/// selectors, queue policy and router) and its copy's GPUs' `planning_costs`; each copy sees
/// its share of the loads (over `copies`). A replica the observation pass gave no step keeps
/// the linear layout. Layer `l` of copy `c` of replica `r` draws from
/// `(seed, "expert_mapping/replica<r>/copy<c>/layer<l>")` (`experts.streams = "shared"`:
/// `(seed, "gem/mapper/layer<l>")`, the gem family's). With `experts.trace` there is no
/// observation pass: every mapper is given the first `window` (at least 1) observed steps of
/// the group's trace (`Deployment::expert_trace`), as the gem family's mapper is.
pub fn replica_layouts(
    scenario: &ServingScenario,
    deployments: &[Deployment],
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    selectors: &mut [Box<dyn BatchSelector>],
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
) -> Vec<Option<Rc<ExpertLayout>>> {
    let any_moe = scenario
        .groups()
        .any(|(model, _)| model.experts().is_some());
    if !any_moe {
        return vec![None; scenario.replica_count()];
    }
    let window = scenario.expert_mapping.window();
    // A trace's observed steps are the window: no observation pass.
    let observed = if window > 0 && scenario.expert_trace.is_none() {
        let mut sink = DiscardRecords;
        let mut pass = ServingServer::observing(
            scenario,
            deployments,
            seed,
            window,
            selectors,
            queue,
            router,
            &mut sink,
        );
        crate::engine::run(&mut pass);
        pass.observed()
    } else {
        vec![Vec::new(); scenario.replica_count()]
    };
    let mut layouts = Vec::with_capacity(scenario.replica_count());
    for (g, ((model, r), deployment)) in scenario.groups().zip(deployments).enumerate() {
        let Some(shape) = model.experts() else {
            layouts.extend((0..r.count).map(|_| None));
            continue;
        };
        let (layers, experts, ep) = (shape.n_layers, shape.n_experts, r.expert_parallel);
        let layer_cost = moe_layer_cost(&scenario.group(g), &shape);
        let slots = deployment
            .expert_slots_per_gpu
            .expect("an MoE deployment has expert slots");
        let copies = r.gpus / ep;
        // With a trace, every replica of the group maps the same window: its first `window`
        // observed steps (at least one, as the gem family's mapper reads), and plans up to
        // its busiest step.
        let traced = deployment.expert_trace.as_ref().map(|(trace, observed)| {
            let steps = 0..window.clamp(1, *observed);
            let windows: Vec<Vec<f32>> = (0..layers)
                .map(|l| trace.window(l, steps.clone()).to_vec())
                .collect();
            (windows, trace.max_step_total())
        });
        for _ in 0..r.count {
            let replica = layouts.len();
            if traced.is_none() && window > 0 && observed[replica].first().is_none_or(Vec::is_empty)
            {
                layouts.push(Some(Rc::new(ExpertLayout::linear(
                    layers, experts, ep, r.gpus,
                ))));
                continue;
            }
            let of_copy = |w: &Vec<f32>| -> Vec<f32> {
                if copies == 1 {
                    w.clone()
                } else {
                    w.iter().map(|&n| n / copies as f32).collect()
                }
            };
            let (windows, limit) = match &traced {
                Some((windows, busiest)) => (
                    windows.iter().map(of_copy).collect::<Vec<_>>(),
                    ((busiest / copies as f64).ceil() as usize).min(1 << 22),
                ),
                None => {
                    let windows: Vec<Vec<f32>> = if window > 0 {
                        observed[replica].iter().map(of_copy).collect()
                    } else {
                        vec![Vec::new(); layers]
                    };
                    let busiest_step = windows
                        .iter()
                        .flat_map(|w| w.chunks(experts).map(|step| step.iter().sum::<f32>()))
                        .fold(1.0f32, f32::max);
                    (windows, (busiest_step.ceil() as usize).min(1 << 22))
                }
            };
            let mappings: Vec<Vec<LayerMapping>> = (0..copies)
                .map(|copy| {
                    let costs = planned(&layer_cost, slots, &r.speeds[copy * ep..][..ep], limit);
                    map_group(mapper, experts, &windows, &costs, |layer| {
                        let name = match scenario.expert_streams {
                            MappingStreams::PerReplica => {
                                format!("expert_mapping/replica{replica}/copy{copy}/layer{layer}")
                            }
                            MappingStreams::Shared => format!("gem/mapper/layer{layer}"),
                        };
                        stream(seed, &name)
                    })
                })
                .collect();
            layouts.push(Some(Rc::new(ExpertLayout::new(experts, &mappings))));
        }
    }
    layouts
}

/// The `planning_costs` built, by `planned`'s key. It keeps the 16 most recently used (a
/// Qwen3-30B-A3B table of 4 GPUs is about 3 MB, so about 50 MB at most).
static PLANNED: Memo<ExactKey, GpuCosts> = Memo::new(16);

/// `planning_costs(layer, slots, speeds, limit)`, built once for the cells that plan alike: the
/// runs of one model, variability and seed (whatever their mapper, request lengths or policies)
/// and their expert details plan with the same curves. Keyed by everything it reads: the layer
/// cost's `Debug` text (derived through every type it holds: each field, each float exactly),
/// the slots per GPU, each speed factor's bits and the table limit.
fn planned(
    layer: &MoeLayerCost,
    slots: usize,
    speeds: &[SpeedFactors],
    limit: usize,
) -> Arc<GpuCosts> {
    let mut key = ExactKey::new();
    key.debug(layer).usize(slots).usize(speeds.len());
    for SpeedFactors { compute, bandwidth } in speeds {
        key.f64(*compute).f64(*bandwidth);
    }
    key.usize(limit);
    PLANNED.get_or_compute(&key, || planning_costs(layer, slots, speeds, limit))
}

/// Unseen trace steps the expert detail carries (as the gem family's `detail_steps`).
const DETAIL_STEPS: usize = 25;

/// What a traced MoE group's expert layout does, for figures (`gem_expert_load`,
/// `gem_staircase`): the group's first replica's layout of layer 0 (`slots`: the experts each
/// GPU hosts), the tokens each expert receives on the first unseen steps of the trace and what
/// each GPU receives of them under the layout, and, with `[output] staircase`, each GPU's
/// MoE-layer latency curve at its speed (`staircase`: the `planning_costs` the mapper planned
/// with, at every whole token up to the trace's busiest step). Not stored by its steps: the
/// curve also rises a little with every token between the tile steps, so no two tokens share a
/// latency and only the whole table gives the figure its points; nor once for all GPUs, scaled
/// by speed: a throughput cap slows the clock more than the memory, so a slower GPU's curve is
/// not the nominal one scaled (docs/performance.md, "GEM results, i35gemout"). `None` for a
/// dense group or one without `experts.trace`.
pub fn expert_detail(
    scenario: &ServingScenario,
    group: usize,
    deployment: &Deployment,
    layout: Option<&ExpertLayout>,
) -> Option<serde_json::Value> {
    let one = scenario.group(group);
    let shape = one.model.experts()?;
    let (trace, observed) = deployment.expert_trace.as_ref()?;
    let layout = layout?;
    let r = &one.replica;
    let layer = 0;
    let steps = DETAIL_STEPS.min(trace.n_steps() - observed);
    let expert_tokens: Vec<Vec<f32>> = (0..steps)
        .map(|u| trace.step(layer, observed + u).to_vec())
        .collect();
    let gpu_tokens: Vec<Vec<f32>> = expert_tokens
        .iter()
        .map(|row| {
            let per_expert: Vec<f64> = row.iter().map(|&n| f64::from(n)).collect();
            let mut out = vec![0f32; layout.gpus()];
            layout.gpu_expected(layer, &per_expert, &mut out);
            out
        })
        .collect();
    let slots: Vec<Vec<usize>> = (0..layout.gpus())
        .map(|g| layout.hosted(layer, g))
        .collect();
    let limit = (trace.max_step_total().ceil() as usize).min(1 << 22);
    let per_gpu = deployment
        .expert_slots_per_gpu
        .expect("an MoE deployment has expert slots");
    let mut detail = serde_json::json!({
        "model": one.model.name(),
        "gpu": r.gpu.name,
        "cost_source": one.cost_model(),
        "speed_factors": r.speed_factors,
        "mapper": scenario.expert_mapping,
        "detail_layer": {
            "layer": layer,
            "slots": slots,
            "expert_tokens": expert_tokens,
            "gpu_tokens": gpu_tokens,
        },
    });
    if !scenario.staircase {
        return Some(detail);
    }
    let costs = planned(&moe_layer_cost(&one, &shape), per_gpu, &r.speeds, limit);
    let staircase: Vec<serde_json::Value> = (0..r.gpus)
        .map(|g| {
            let samples: Vec<(f64, f64)> = costs
                .curve(g)
                .samples()
                .map(|(n, ns)| (n, ns / 1e3))
                .collect();
            serde_json::json!({
                "gpu": g,
                "speed": r.speed_factors[g],
                "samples_tokens_us": samples,
            })
        })
        .collect();
    detail["staircase"] = serde_json::Value::Array(staircase);
    Some(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planning_costs_are_built_once_for_the_same_inputs() {
        let shape = crate::cost::shape::MoeModelShape::preset("qwen3-30b-a3b").unwrap();
        let layer = MoeLayerCost::new(
            &crate::cost::gpu::GpuSpec::by_name("H200").unwrap(),
            &shape,
            crate::cost::kernel::Timing::Graph,
        );
        let speeds = [
            SpeedFactors::split(0.88, 0.0),
            SpeedFactors::split(1.0, 0.0),
        ];
        let first = planned(&layer, 64, &speeds, 300);
        assert!(Arc::ptr_eq(&first, &planned(&layer, 64, &speeds, 300)));
        assert_eq!(*first, planning_costs(&layer, 64, &speeds, 300));
        let slower = [
            SpeedFactors::split(0.87, 0.0),
            SpeedFactors::split(1.0, 0.0),
        ];
        let other = planned(&layer, 64, &slower, 300);
        assert_eq!(*other, planning_costs(&layer, 64, &slower, 300));
        assert_ne!(*other, *first);
        assert_ne!(*planned(&layer, 64, &speeds, 301), *first);
    }

    #[test]
    fn a_layer_one_bit_apart_plans_anew() {
        // The layer is keyed by its derived `Debug` text, which writes each float in its
        // shortest exact form: a weight one ulp heavier is another key, not a cache hit.
        let shape = crate::cost::shape::MoeModelShape::preset("qwen3-30b-a3b").unwrap();
        let layer = MoeLayerCost::new(
            &crate::cost::gpu::GpuSpec::by_name("H200").unwrap(),
            &shape,
            crate::cost::kernel::Timing::Graph,
        );
        let mut heavier = layer.clone();
        heavier.expert_weight_bytes = f64::from_bits(layer.expert_weight_bytes.to_bits() + 1);
        let speeds = [SpeedFactors::split(0.91, 0.0)];
        let first = planned(&layer, 16, &speeds, 40);
        assert!(Arc::ptr_eq(&first, &planned(&layer.clone(), 16, &speeds, 40)));
        assert!(!Arc::ptr_eq(&first, &planned(&heavier, 16, &speeds, 40)));
    }

    #[test]
    fn linear_layout_splits_each_expert_over_its_copies() {
        // 8 experts, EP 2 over 4 GPUs: GPUs 0 and 2 host experts 0-3, GPUs 1 and 3 experts 4-7;
        // copy 0 (GPUs 0, 1) takes the ceiling of an odd count.
        let p = ExpertLayout::linear(1, 8, 2, 4);
        assert_eq!((p.copies, p.slots_per_gpu, p.gpus()), (2, 4, 4));
        let per_expert = [5, 0, 2, 1, 3, 3, 0, 7];
        let mut out = [0u32; 4];
        let gpus: Vec<Vec<u32>> = (0..4)
            .map(|g| {
                p.gpu_tokens(0, &per_expert, g, &mut out);
                out.to_vec()
            })
            .collect();
        assert_eq!(gpus[0], vec![3, 0, 1, 1]);
        assert_eq!(gpus[2], vec![2, 0, 1, 0]);
        assert_eq!(gpus[1], vec![2, 2, 0, 4]);
        assert_eq!(gpus[3], vec![1, 1, 0, 3]);
        let total: u32 = gpus.iter().flatten().sum();
        assert_eq!(total, per_expert.iter().sum::<u32>());
    }

    #[test]
    fn a_redundant_copy_splits_its_experts_tokens_and_layers_map_apart() {
        // 4 experts on 2 GPUs with 2 redundant slots (3 slots each): expert 0 hosted twice (on
        // GPU 0 and on GPU 1) takes 7 tokens: 4 to its first replica, 3 to its second. Layer
        // 1 swaps the GPUs.
        let layer0 = LayerMapping {
            slots: vec![vec![0, 1, 2], vec![3, 0, 2]],
        };
        let layer1 = LayerMapping {
            slots: vec![vec![3, 0, 2], vec![0, 1, 2]],
        };
        let layout = ExpertLayout::new(4, &[vec![layer0, layer1]]);
        assert_eq!(layout.slots_per_gpu, 3);
        let per_expert = [7, 1, 5, 2];
        let mut out = [0u32; 3];
        layout.gpu_tokens(0, &per_expert, 0, &mut out);
        assert_eq!(out, [4, 1, 3]);
        layout.gpu_tokens(0, &per_expert, 1, &mut out);
        assert_eq!(out, [2, 3, 2]);
        layout.gpu_tokens(1, &per_expert, 0, &mut out);
        assert_eq!(out, [2, 4, 3]);
        assert_eq!(layout.hosted(1, 1), vec![0, 1, 2]);
    }
}
