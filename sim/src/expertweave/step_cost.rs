//! An ExpertWeave instance's steps priced through the serving layer's one step-cost seam
//! (`serving::StepCost`) from the cost model's one roofline: the non-expert part of the MLA-MoE
//! model (`cost::roofline::StepRoofline::mla_moe_non_expert`: weights, the latent KV cache the
//! decoding sequences read, attention and GEMM FLOPs on tile-padded rows, launches), each MoE
//! layer through the one MoE entry point (`cost::moe_layer`): every device's expected expert
//! reads (its contiguous share of the base experts, each adapter copy beside its base expert,
//! `Popularity`) as its grouped expert GEMMs, launched eagerly, the layer waiting for its
//! slowest device (no all-to-all is modelled); and, where the instance reroutes, the
//! batched-rerouting operator priced as the serving family prices it (`serving_family::rerouting`).

use super::config::ExpertWeaveScenario;
use crate::cost::kernel::Timing;
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::cost::roofline::{Roofline, StepRoofline, StepTokens};
use crate::cost::shape::WeightDtype;
use crate::policies::memory::InstancePlan;
use crate::serving::{AdapterTokens, CostSource, StepBreakdown, StepCost, StepTime, StepWork};
use crate::serving_family::popularity::Popularity;
use crate::serving_family::rerouting::{ReroutingCost, ReroutingTraffic};
use crate::time::SimDuration;

/// Kernels per transformer layer outside the routed experts and rerouting (norms, projections,
/// attention, router, combine), each paying one launch per step; the routed experts launch
/// their own 3 (`cost::moe_layer`), 8 per MoE layer in all.
pub const NON_EXPERT_KERNELS_PER_LAYER: u32 = 5;

/// What a step asks of the model's dense part: its token rows, the sequences the head scores,
/// the KV the decoding sequences attend to, and the causal prefill's squared prompt lengths.
pub fn step_tokens(work: &StepWork<'_>) -> StepTokens {
    let (mut context, mut prefill_square) = (0u64, 0.0f64);
    for s in work.batch.iter().filter(|s| s.scheduled() > 0) {
        let prefill = s.step_prefill();
        if prefill > 0 {
            prefill_square += f64::from(prefill) * f64::from(prefill);
        } else {
            context += u64::from(s.step_context());
        }
    }
    StepTokens {
        rows: work.prefill_tokens + work.decode_tokens,
        sequences: work.requests,
        context_tokens: context,
        prefill_square,
    }
}

/// The analytic step cost of one instance.
pub struct RooflineStepCost<'a> {
    instance: &'a InstancePlan,
    popularity: &'a Popularity,
    moe_layers: u64,
    experts: MoeLayerCost,
    non_expert: StepRoofline,
    /// The rerouting's price (the serving family's); `None` when the instance does not reroute.
    rerouting: Option<ReroutingCost>,
    /// (probability read, routed rows) of every expert weight of one layer, reused.
    weights: Vec<(f64, f64)>,
    /// Per device, (probability read, rows when read) of the weights it holds, reused.
    per_device: Vec<Vec<(f64, f64)>>,
    /// The last step's tokens per adapter and its MoE layers' time, which is a function of
    /// those alone: consecutive decode steps of an unchanged batch reuse it (the same bits).
    last_moe: Option<(Vec<AdapterTokens>, f64)>,
}

impl<'a> RooflineStepCost<'a> {
    pub fn new(
        scenario: &ExpertWeaveScenario,
        instance: &'a InstancePlan,
        popularity: &'a Popularity,
    ) -> RooflineStepCost<'a> {
        let shape = &scenario.shape;
        let devices = instance.n_devices;
        let experts = MoeLayerCost::for_experts(
            &scenario.gpu,
            shape.hidden as usize,
            shape.expert_ffn as usize,
            WeightDtype::Bf16,
            Timing::Eager,
        );
        let non_expert = StepRoofline::mla_moe_non_expert(
            shape,
            Roofline::of(&scenario.gpu),
            scenario.tensor_parallel.min(devices),
            devices,
            NON_EXPERT_KERNELS_PER_LAYER,
        );
        let rerouting = instance.reroutes.then(|| {
            let cost = &scenario.cost;
            let traffic = ReroutingTraffic::new(
                shape,
                cost.rerouting,
                cost.unfused_ops,
                instance.adapters.len(),
            );
            ReroutingCost::new(
                traffic,
                Roofline::of(&scenario.gpu),
                &[SpeedFactors::NOMINAL],
                devices,
            )
        });
        RooflineStepCost {
            instance,
            popularity,
            moe_layers: shape.n_moe_layers(),
            experts,
            non_expert,
            rerouting,
            weights: Vec::new(),
            per_device: vec![Vec::new(); devices.max(1) as usize],
            last_moe: None,
        }
    }

    /// Every MoE layer's time for a step whose sequences compute `adapters`' tokens.
    fn moe_layers_ns(&mut self, adapters: &[AdapterTokens]) -> f64 {
        let use_adapters = self.instance.adapter_experts && self.instance.reroutes;
        let n_experts = self.popularity.n_experts();
        let n_devices = self.per_device.len();
        let mut moe_ns = 0.0;
        for layer in 0..self.moe_layers as usize {
            self.popularity
                .expected_reads(layer, adapters, use_adapters, &mut self.weights);
            // The device of expert `e`: its contiguous share of the experts (expert parallelism
            // over the instance's devices); an adapter's copy sits beside its base expert.
            let device_of = |e: usize| e * n_devices / n_experts;
            self.per_device.iter_mut().for_each(Vec::clear);
            let copies = adapters.iter().flat_map(|a| {
                let tuned = self.popularity.tuned(a.adapter as usize, layer);
                (0..n_experts).filter(move |&e| use_adapters && tuned[e])
            });
            let owners = (0..n_experts).chain(copies);
            for (&(read, rows), owner) in self.weights.iter().zip(owners) {
                if read > 0.0 {
                    self.per_device[device_of(owner)].push((read, rows / read));
                }
            }
            let mut moe = self.experts.layer(n_devices, None);
            for weights in &self.per_device {
                moe.add(ExpertRows::Weighted(weights), SpeedFactors::NOMINAL);
            }
            moe_ns += moe.finish().nanos;
        }
        moe_ns
    }
}

impl StepCost for RooflineStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let tokens = step_tokens(work);
        let dense = self.non_expert.price(&tokens);
        let moe_ns = match &self.last_moe {
            Some((adapters, nanos)) if adapters.as_slice() == work.adapters => *nanos,
            _ => {
                let nanos = self.moe_layers_ns(work.adapters);
                self.last_moe = Some((work.adapters.to_vec(), nanos));
                nanos
            }
        };
        // Rerouting: per MoE layer its operators, each an eager launch plus the bytes it moves.
        let (mut reroute_ns, mut reroute_launch_ns) = (0.0, 0.0);
        if let Some(rerouting) = &self.rerouting {
            reroute_ns = rerouting.memory_ns(tokens.rows);
            reroute_launch_ns = rerouting.launch_ns(self.non_expert.roofline.launch_ns);
        }
        let nanos = dense.nanos + moe_ns + reroute_ns + reroute_launch_ns;
        StepTime {
            duration: SimDuration(nanos.round().max(1.0) as u64),
            breakdown: StepBreakdown {
                compute_ns: dense.compute_ns,
                memory_ns: dense.memory_ns + reroute_ns,
                communication_ns: dense.communication_ns,
                overhead_ns: dense.overhead_ns + reroute_launch_ns,
                moe_ns,
                ..StepBreakdown::default()
            },
            source: CostSource::Analytic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expertweave::config::ExpertWeaveConfig;
    use crate::expertweave::run::replica_config;
    use crate::policies::memory::device::KvCapacity;
    use crate::serving::tests::Fifo;
    use crate::serving::{AdmitHook, QueuePolicy, QueuedRequest, Replica};
    use crate::time::SimTime;
    use std::path::Path;

    fn scenario(rerouting: &str) -> ExpertWeaveScenario {
        let text = format!(
            r#"
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
[cost]
rerouting = "{rerouting}"
"#
        );
        toml::from_str::<ExpertWeaveConfig>(&text)
            .unwrap()
            .validate(Path::new("."), &mut Default::default())
            .unwrap()
    }

    /// Request `id` runs with adapter `id % 3` and 4 output tokens.
    struct ByIdHook;
    impl AdmitHook for ByIdHook {
        fn output_tokens(&mut self, _request: &QueuedRequest) -> u32 {
            4
        }
        fn adapter(&mut self, request: &QueuedRequest) -> Option<u32> {
            Some((request.id % 3) as u32)
        }
        fn admitted(&mut self, _now: SimTime, _request: &QueuedRequest, _output: u32) {}
    }

    /// The prefill step of 4 requests of 8 prompt tokens (adapters 0, 1, 2, 0) on one device,
    /// priced by the roofline step cost.
    fn price_prefill(s: &ExpertWeaveScenario, instance: &InstancePlan) -> StepTime {
        let popularity = s.popularity();
        let mut cost = RooflineStepCost::new(s, instance, &popularity);
        let mut replica = Replica::new(replica_config(s, instance));
        let mut fifo = Fifo::default();
        fifo.reset(1);
        for id in 0..4 {
            let request = QueuedRequest {
                id,
                workflow: id,
                stage: 0,
                submitted: SimTime::ZERO,
                workflow_arrival: SimTime::ZERO,
                enqueued_iteration: 0,
                prompt_tokens: 8,
                predicted_stage_tokens: 0.0,
                predicted_total_tokens: 0.0,
                attained_service: 0,
                rank_noise: 0.0,
                topic: 0,
            };
            replica.submit(SimTime::ZERO, request, &mut fifo, 0);
        }
        let work = replica
            .schedule(SimTime::ZERO, &mut fifo, 0, &mut ByIdHook)
            .unwrap();
        assert_eq!((work.prefill_tokens, work.adapters.len()), (32, 3));
        cost.price(&work)
    }

    /// An instance serving adapters 0-2 with their fine-tuned experts, on `n_devices` devices.
    fn three_adapters_on(n_devices: u64) -> InstancePlan {
        InstancePlan {
            adapters: vec![0, 1, 2],
            reroutes: true,
            adapter_experts: true,
            n_devices,
            weight_bytes: 0,
            kv: KvCapacity {
                kv_bytes: 0,
                kv_tokens: 1_000_000,
                out_of_memory: false,
            },
        }
    }

    #[test]
    fn a_step_reuses_the_moe_time_of_the_step_before_only_for_the_same_adapter_tokens() {
        let s = scenario("fused");
        let instance = three_adapters_on(2);
        let popularity = s.popularity();
        let tokens = |adapter, tokens| AdapterTokens { adapter, tokens };
        let a = [tokens(0, 8), tokens(1, 3)];
        let b = [tokens(0, 8), tokens(2, 3)];
        let work = |adapters| StepWork {
            requests: 11,
            decode_tokens: 11,
            adapters,
            ..StepWork::default()
        };
        let fresh = |adapters| {
            let mut cost = RooflineStepCost::new(&s, &instance, &popularity);
            cost.price(&work(adapters)).breakdown.moe_ns
        };
        let mut cost = RooflineStepCost::new(&s, &instance, &popularity);
        let first_a = cost.price(&work(&a)).breakdown.moe_ns;
        let again_a = cost.price(&work(&a)).breakdown.moe_ns;
        let then_b = cost.price(&work(&b)).breakdown.moe_ns;
        assert_eq!(first_a.to_bits(), again_a.to_bits());
        assert_ne!(first_a, then_b, "other adapters' copies are read");
        assert_eq!(then_b.to_bits(), fresh(&b).to_bits());
        assert_eq!(
            cost.price(&work(&a)).breakdown.moe_ns.to_bits(),
            fresh(&a).to_bits()
        );
    }

    #[test]
    fn unfused_rerouting_costs_its_extra_operators_launches_and_bytes() {
        // Per MoE layer the fused kernel is 1 operator and the unfused chain 5, each a 10 us
        // launch on the Ascend-910B plus the bytes it moves at its streaming rate: per token its
        // adapter id and top-6 ids read and the top-6 ids written (4 + 2 x 4 x 6 = 52 B), per
        // step the expert map's rows of the 3 adapters (3 x 64 x 4 = 768 B). 32 prefill rows:
        // 32 x 52 + 768 = 2,432 B. Over 26 MoE layers the unfused chain adds 26 x 4 x (10,000 ns
        // + 2,432 B at the streaming rate); everything else in the step is the same.
        let instance = three_adapters_on(1);
        let fused = price_prefill(&scenario("fused"), &instance);
        let unfused = price_prefill(&scenario("unfused"), &instance);
        let rates = crate::cost::kernel::KernelRates::of(&scenario("fused").gpu);
        let per_op_ns = 10_000.0 + 2_432.0 / rates.stream_bytes_per_s * 1e9;
        let extra = 26.0 * 4.0 * per_op_ns;
        let measured = unfused.duration.0 as f64 - fused.duration.0 as f64;
        assert!((measured - extra).abs() <= 1.0, "{measured} vs {extra}");
        assert_eq!(fused.breakdown.moe_ns, unfused.breakdown.moe_ns);
        // The launches are overhead, the bytes memory time.
        let overhead = unfused.breakdown.overhead_ns - fused.breakdown.overhead_ns;
        assert!(
            (overhead - 26.0 * 4.0 * 10_000.0).abs() < 1e-6,
            "{overhead}"
        );
    }

    #[test]
    fn a_memory_bound_decode_step_reads_its_expected_distinct_experts() {
        // Base only, one sequence decoding one token of adapter 0: per MoE layer it reads its
        // top-6 distinct experts, expert e with its inclusion probability pi_e, one row when
        // read; the one device prices those expected reads through the MoE entry point,
        // launched eagerly, and the step adds every layer's.
        let s = scenario("fused");
        let instance = InstancePlan {
            reroutes: false,
            adapter_experts: false,
            ..three_adapters_on(1)
        };
        let popularity = s.popularity();
        let mut cost = RooflineStepCost::new(&s, &instance, &popularity);
        let mut replica = Replica::new(replica_config(&s, &instance));
        let mut fifo = Fifo::default();
        fifo.reset(1);
        let request = QueuedRequest {
            id: 0,
            workflow: 0,
            stage: 0,
            submitted: SimTime::ZERO,
            workflow_arrival: SimTime::ZERO,
            enqueued_iteration: 0,
            prompt_tokens: 8,
            predicted_stage_tokens: 0.0,
            predicted_total_tokens: 0.0,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        };
        replica.submit(SimTime::ZERO, request, &mut fifo, 0);
        let prefill = replica.schedule(SimTime::ZERO, &mut fifo, 0, &mut ByIdHook);
        assert_eq!(prefill.map(|w| w.prefill_tokens), Some(8));
        replica.begin_step(crate::time::SimDuration(1));
        replica.complete_step(SimTime(1), &mut Vec::new());
        let work = replica
            .schedule(SimTime(1), &mut fifo, 0, &mut ByIdHook)
            .unwrap();
        assert_eq!((work.decode_tokens, work.prefill_tokens), (1, 0));
        let moe_ns = cost.price(&work).breakdown.moe_ns;
        let layer = MoeLayerCost::for_experts(&s.gpu, 2048, 1408, WeightDtype::Bf16, Timing::Eager);
        // One decoding token reads its 6 distinct experts in every layer: expert e with its
        // inclusion probability, one row when read.
        let expected: f64 = (0..26)
            .map(|l| {
                let reads: Vec<(f64, f64)> = popularity
                    .inclusion(0, l)
                    .iter()
                    .map(|&pi| (pi, 1.0))
                    .collect();
                let distinct: f64 = reads.iter().map(|r| r.0).sum();
                assert!((distinct - 6.0).abs() < 1e-9, "{distinct}");
                let c = layer.gpu(ExpertRows::Weighted(&reads), SpeedFactors::NOMINAL);
                // Memory-bound: the grouped GEMMs stream more than they compute.
                assert!(c.kernels[0].memory_ns > c.kernels[0].compute_ns);
                c.nanos
            })
            .sum();
        assert!(
            (moe_ns - expected).abs() < 1e-6 * expected,
            "{moe_ns} vs {expected}"
        );
    }
}
