//! One MoE layer priced from its physics: the experts active on a GPU run as one grouped GEMM
//! whose time is the roofline of the whole operation, and under expert parallelism a layer
//! waits for its slowest GPU plus the all-to-all dispatch and combine. See the "MoE layer"
//! section of docs/cost-model.md for the derivation.
//!
//! ```text
//! gpu_layer_ns = launches x launch_ns
//!              + max(distinct_active_experts x expert_weight_bytes / (bandwidth x b),
//!                    expert_flops_per_token x sum_e ceil(n_e / tile) x tile / (peak x c))
//! ep_layer_ns  = max_g gpu_layer_ns(g) + 2 x (max_g incoming_bytes(g) / link_bandwidth + link_latency)
//! ```
//!
//! `b` and `c` are the GPU's bandwidth and compute speed factors ([`SpeedFactors`]); a power
//! cap or a slower bin lowers the SM clock (`c`) and leaves HBM alone (`b = 1`) unless the part
//! itself has slower memory.

use crate::cost::curve::CostCurve;
use crate::cost::gpu::{DEFAULT_COMPUTE_EFFICIENCY, DEFAULT_MEMORY_EFFICIENCY, GpuSpec, LinkSpec};
use crate::cost::profile::ExpertFfnCurve;
use crate::cost::roofline::Roofline;
use crate::cost::shape::{MoeModelShape, WeightDtype};

/// Rows per GEMM tile: 64, the M-tile of vLLM's fused-MoE Triton kernel (`BLOCK_SIZE_M` 64 in
/// its default config for bf16) and of CUTLASS grouped GEMMs; GEM section 3.3.2 names 32 or 64.
/// Each expert's token rows are padded up to a multiple of it (vLLM's `moe_align_block_size`).
pub const DEFAULT_TILE_TOKENS: u32 = 64;

/// Kernel launches of one grouped MoE layer: the fused gate+up grouped GEMM, the SwiGLU, the
/// down grouped GEMM. They are launched once per layer, not once per expert.
pub const DEFAULT_LAUNCHES_PER_LAYER: u32 = 3;

/// How fast one GPU runs relative to its datasheet: `compute` scales the FLOP term (the SM
/// clock: a power cap or a slower bin), `bandwidth` the memory term (HBM speed, which a power
/// cap barely touches). `{1, 1}` is the nominal part.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpeedFactors {
    pub compute: f64,
    pub bandwidth: f64,
}

impl SpeedFactors {
    pub const NOMINAL: SpeedFactors = SpeedFactors {
        compute: 1.0,
        bandwidth: 1.0,
    };

    /// The factors of a GPU whose overall speed factor is `speed`, when a fraction
    /// `bandwidth_share` of the slowdown also reaches memory bandwidth (0: a pure clock effect,
    /// 1: the whole GPU is uniformly slower, the old "divide every cost by the speed" view).
    pub fn split(speed: f64, bandwidth_share: f64) -> SpeedFactors {
        SpeedFactors {
            compute: speed,
            bandwidth: 1.0 - (1.0 - speed) * bandwidth_share,
        }
    }
}

/// The knobs of the grouped-GEMM model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeLayerParams {
    pub memory_efficiency: f64,
    pub compute_efficiency: f64,
    pub tile_tokens: u32,
    pub launches_per_layer: u32,
    /// Bytes per routed activation element on the wire (bf16: 2).
    pub activation_bytes: f64,
}

impl Default for MoeLayerParams {
    fn default() -> Self {
        MoeLayerParams {
            memory_efficiency: DEFAULT_MEMORY_EFFICIENCY,
            compute_efficiency: DEFAULT_COMPUTE_EFFICIENCY,
            tile_tokens: DEFAULT_TILE_TOKENS,
            launches_per_layer: DEFAULT_LAUNCHES_PER_LAYER,
            activation_bytes: 2.0,
        }
    }
}

/// What one GPU's grouped GEMM costs, with the quantities behind it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupedGemmCost {
    pub distinct_experts: usize,
    pub weight_bytes: f64,
    /// FLOPs of the tile-padded rows.
    pub padded_flops: f64,
    pub memory_ns: f64,
    pub compute_ns: f64,
    pub launch_ns: f64,
    pub nanos: f64,
}

/// One expert-parallel layer: the slowest GPU and the all-to-all around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpLayerCost {
    pub slowest_gpu: usize,
    pub compute_ns: f64,
    /// Dispatch plus combine.
    pub all_to_all_ns: f64,
    pub nanos: f64,
}

/// The MoE-layer cost model of one model's routed experts on one GPU type.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeLayerCost {
    pub expert_weight_bytes: f64,
    pub expert_flops_per_token: f64,
    pub hidden: usize,
    /// The GPU's roofline at the params' efficiencies and tile.
    pub roofline: Roofline,
    pub params: MoeLayerParams,
    /// A measured single-expert curve that refines the roofline (see [`Self::with_profile`]):
    /// the expert's GEMM pair where the profile splits the layer, else the whole layer.
    measured_expert: Option<CostCurve>,
    /// The measured fixed part of a layer launch (routed assignments -> ns), where the profile
    /// splits the layer; it replaces the analytic launch term.
    measured_fixed: Option<CostCurve>,
}

impl MoeLayerCost {
    /// The routed experts of `shape` on `gpu`.
    pub fn new(gpu: &GpuSpec, shape: &MoeModelShape, params: MoeLayerParams) -> MoeLayerCost {
        MoeLayerCost::for_experts(
            gpu,
            shape.hidden,
            shape.expert_ffn,
            shape.weight_dtype,
            params,
        )
    }

    /// Gated (SwiGLU) experts of `hidden x expert_ffn` stored as `dtype` on `gpu`.
    pub fn for_experts(
        gpu: &GpuSpec,
        hidden: usize,
        expert_ffn: usize,
        dtype: WeightDtype,
        params: MoeLayerParams,
    ) -> MoeLayerCost {
        let expert_params = 3.0 * hidden as f64 * expert_ffn as f64;
        MoeLayerCost {
            expert_weight_bytes: expert_params * dtype.bytes_per_param(),
            expert_flops_per_token: 2.0 * expert_params,
            hidden,
            roofline: Roofline {
                tile_tokens: params.tile_tokens,
                ..Roofline::new(gpu, params.memory_efficiency, params.compute_efficiency)
            },
            params,
            measured_expert: None,
            measured_fixed: None,
        }
    }

    /// Refines the op with a profile's measured expert entry. With its split (cost/profile.rs
    /// `MoeLayerSplit`) the grouped op costs `fixed(assignments) + sum_e g(n_e)` at nominal
    /// speed: the layer's measured kernels around the GEMMs once, then each active expert's
    /// measured GEMM pair `g`, back to back (what the CUDA backend runs: one cuBLAS GEMM pair
    /// per expert with rows on one stream). Without a split, from the whole-layer curve `e(n)`
    /// (which includes one expert's `launches x launch_ns`): `launches x launch_ns + sum_e
    /// (e(n_e) - launches x launch_ns)`, the analytic launch term standing in for the fixed
    /// part. Either is what a grouped kernel does once each expert alone saturates the GPU; it
    /// is an upper bound on the roofline of the whole op (a sum of maxima is at least the
    /// maximum of the sums). Speed factors scale the experts' work by `1 / compute` where the
    /// roofline term is compute-bound and `1 / bandwidth` otherwise; the fixed part (a few
    /// latency-bound launches) is not scaled.
    pub fn with_profile(mut self, expert: &ExpertFfnCurve) -> MoeLayerCost {
        match &expert.split {
            Some(split) => {
                self.measured_expert = Some(split.expert_gemms.clone());
                self.measured_fixed = Some(split.fixed.clone());
            }
            None => {
                self.measured_expert = Some(expert.curve.clone());
                self.measured_fixed = None;
            }
        }
        self
    }

    /// The fixed part of one layer launch over `assignments` routed rows: measured, or the
    /// analytic launch term.
    fn fixed_ns(&self, assignments: f64) -> f64 {
        match &self.measured_fixed {
            Some(fixed) => fixed.at(assignments.max(1.0)),
            None => self.launch_total(),
        }
    }

    /// One expert's measured work beyond the fixed part at `rows` rows (a measured profile).
    fn measured_work(&self, curve: &CostCurve, rows: f64) -> f64 {
        match self.measured_fixed {
            Some(_) => curve.at(rows),
            None => (curve.at(rows) - self.launch_total()).max(0.0),
        }
    }

    fn padded(&self, tokens: u64) -> u64 {
        self.roofline.padded(tokens)
    }

    /// One GPU's routed experts as one grouped GEMM: `tokens_per_expert[e]` rows for each
    /// expert hosted there (zeros allowed: an expert without tokens is not read).
    pub fn grouped_gemm(&self, tokens_per_expert: &[u32], speed: SpeedFactors) -> GroupedGemmCost {
        let mut distinct = 0usize;
        let mut padded_rows = 0u64;
        for &n in tokens_per_expert {
            if n > 0 {
                distinct += 1;
                padded_rows += self.padded(u64::from(n));
            }
        }
        self.priced(distinct, padded_rows, tokens_per_expert, speed)
    }

    /// The grouped GEMM when `tokens` rows spread as evenly as possible over `active`
    /// experts (the first `tokens % active` get one row more). Allocation-free: the hot path
    /// of CAPS and of GEM's step pricing.
    pub fn grouped_gemm_even(&self, tokens: u64, active: usize, speed: SpeedFactors) -> f64 {
        let active = (active as u64).min(tokens);
        if active == 0 {
            return 0.0;
        }
        let base = tokens / active;
        let extra = tokens % active;
        let padded = extra * self.padded(base + 1) + (active - extra) * self.padded(base);
        if let Some(curve) = &self.measured_expert {
            let work = extra as f64 * self.measured_work(curve, (base + 1) as f64)
                + (active - extra) as f64 * self.measured_work(curve, base as f64);
            return self.fixed_ns(tokens as f64)
                + work / self.bound_factor(active as usize, padded, speed);
        }
        let c = self.roofline(active as usize, padded, speed);
        c.2 + c.0.max(c.1)
    }

    /// The grouped GEMM over expected loads (CAPS's decode loads are per-step expectations):
    /// an expert expecting `l` routed rows is active with weight `p = min(l, 1)` and then
    /// computes `max(l, 1)` rows rounded up to whole rows and tiles. Integer loads give exactly
    /// [`Self::grouped_gemm`]. Allocation-free.
    pub fn grouped_gemm_expected(&self, loads: &[f32], speed: SpeedFactors) -> f64 {
        let mut active = 0.0f64;
        let mut padded = 0.0f64;
        let mut measured = 0.0f64;
        let assignments: f64 = loads.iter().map(|&l| f64::from(l.max(0.0))).sum();
        // Tiles of `rows` rows: a shift for a power-of-two tile (the hot path: no division).
        let tile = u64::from(self.params.tile_tokens.max(1));
        let shift = tile.is_power_of_two().then(|| tile.trailing_zeros());
        let padded_rows = |rows: u64| match shift {
            Some(shift) => ((rows + tile - 1) >> shift) << shift,
            None => self.padded(rows),
        };
        for &l in loads {
            if l > 0.0 {
                let p = f64::from(l.min(1.0));
                // ceil(max(l, 1)) without a libm call (`ceil` is one on baseline x86-64): the
                // truncation, one more if a fraction was cut off.
                let whole = l as u64;
                let rows = (whole + u64::from((whole as f32) < l)).max(1);
                active += p;
                padded += p * padded_rows(rows) as f64;
                if let Some(curve) = &self.measured_expert {
                    measured += p * self.measured_work(curve, rows as f64);
                }
            }
        }
        if active == 0.0 {
            return 0.0;
        }
        let memory = active * self.expert_weight_bytes / self.roofline.bandwidth * 1e9;
        let compute = self.expert_flops_per_token * padded / self.roofline.compute * 1e9;
        if self.measured_expert.is_some() {
            let factor = if compute > memory {
                speed.compute
            } else {
                speed.bandwidth
            };
            return self.fixed_ns(assignments) + measured / factor;
        }
        self.launch_total() + (memory / speed.bandwidth).max(compute / speed.compute)
    }

    /// The grouped GEMM of an expert-parallel group of `devices` GPUs over expected work, ns:
    /// `weights` yields, for every expert weight the step may read, the probability that it is
    /// read and the routed rows it computes when it is. The expected distinct weights and
    /// tile-padded rows are spread evenly over the devices, each running its share as one
    /// grouped GEMM (one launch set), and the group takes one device's time: in expectation
    /// over random routing no device is more loaded than another (a realised step would wait
    /// for its most loaded device, [`Self::expert_parallel`]). Roofline only.
    pub fn grouped_gemm_spread(
        &self,
        weights: impl IntoIterator<Item = (f64, f64)>,
        devices: f64,
        speed: SpeedFactors,
    ) -> f64 {
        let (mut active, mut padded) = (0.0f64, 0.0f64);
        for (p, rows) in weights {
            if p > 0.0 && rows > 0.0 {
                active += p;
                padded += p * self.padded(rows.max(1.0).ceil() as u64) as f64;
            }
        }
        if active == 0.0 {
            return 0.0;
        }
        let devices = devices.max(1.0);
        let memory = active * self.expert_weight_bytes / devices / self.roofline.bandwidth * 1e9;
        let compute = self.expert_flops_per_token * padded / devices / self.roofline.compute * 1e9;
        self.launch_total() + (memory / speed.bandwidth).max(compute / speed.compute)
    }

    fn launch_total(&self) -> f64 {
        f64::from(self.params.launches_per_layer) * self.roofline.launch_ns
    }

    /// (memory_ns, compute_ns, launch_ns) of the roofline.
    fn roofline(&self, distinct: usize, padded_rows: u64, speed: SpeedFactors) -> (f64, f64, f64) {
        let bytes = distinct as f64 * self.expert_weight_bytes;
        let flops = self.expert_flops_per_token * padded_rows as f64;
        (
            bytes / (self.roofline.bandwidth * speed.bandwidth) * 1e9,
            flops / (self.roofline.compute * speed.compute) * 1e9,
            self.launch_total(),
        )
    }

    /// The speed factor of whichever roofline term binds.
    fn bound_factor(&self, distinct: usize, padded_rows: u64, speed: SpeedFactors) -> f64 {
        let (m, c, _) = self.roofline(distinct, padded_rows, SpeedFactors::NOMINAL);
        if c > m {
            speed.compute
        } else {
            speed.bandwidth
        }
    }

    fn priced(
        &self,
        distinct: usize,
        padded_rows: u64,
        tokens_per_expert: &[u32],
        speed: SpeedFactors,
    ) -> GroupedGemmCost {
        let (memory_ns, compute_ns, launch_ns) = self.roofline(distinct, padded_rows, speed);
        let nanos = if distinct == 0 {
            0.0
        } else if let Some(curve) = &self.measured_expert {
            let work: f64 = tokens_per_expert
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| self.measured_work(curve, f64::from(n)))
                .sum();
            let assignments: f64 = tokens_per_expert.iter().map(|&n| f64::from(n)).sum();
            self.fixed_ns(assignments) + work / self.bound_factor(distinct, padded_rows, speed)
        } else {
            launch_ns + memory_ns.max(compute_ns)
        };
        GroupedGemmCost {
            distinct_experts: distinct,
            weight_bytes: distinct as f64 * self.expert_weight_bytes,
            padded_flops: self.expert_flops_per_token * padded_rows as f64,
            memory_ns,
            compute_ns,
            launch_ns: if distinct == 0 { 0.0 } else { launch_ns },
            nanos,
        }
    }

    /// The dispatch and combine all-to-alls of an expert-parallel group of `gpus` GPUs whose
    /// most loaded GPU computes `max_rows` routed rows: `(G - 1) / G` of them arrive over the
    /// link and leave again, each all-to-all as long as that GPU's incoming bytes plus the
    /// link latency; 0 for one GPU.
    pub fn all_to_all_ns(&self, max_rows: u64, gpus: usize, link: LinkSpec) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let incoming = max_rows as f64 * (gpus - 1) as f64 / gpus as f64
            * self.hidden as f64
            * self.params.activation_bytes;
        2.0 * (incoming / link.bandwidth_bytes_per_s * 1e9 + link.latency_ns)
    }

    /// One expert-parallel layer: `per_gpu[g]` is GPU `g`'s tokens per hosted expert,
    /// `speeds[g]` its speed factors. Tokens originate evenly over the group (each GPU holds
    /// `1 / G` of the batch), so `(G - 1) / G` of the rows a GPU computes arrive over the link
    /// in the dispatch and leave again in the combine; each all-to-all lasts as long as the
    /// GPU with the most incoming bytes, plus the link latency. One GPU needs no all-to-all.
    pub fn expert_parallel(
        &self,
        per_gpu: &[&[u32]],
        speeds: &[SpeedFactors],
        link: LinkSpec,
    ) -> EpLayerCost {
        assert_eq!(per_gpu.len(), speeds.len(), "one speed per GPU");
        let g = per_gpu.len();
        let mut slowest = 0;
        let mut compute_ns = 0.0f64;
        let mut max_rows = 0u64;
        for (i, (tokens, &speed)) in per_gpu.iter().zip(speeds).enumerate() {
            let c = self.grouped_gemm(tokens, speed).nanos;
            if c > compute_ns {
                compute_ns = c;
                slowest = i;
            }
            max_rows = max_rows.max(tokens.iter().map(|&n| u64::from(n)).sum());
        }
        let all_to_all_ns = self.all_to_all_ns(max_rows, g, link);
        EpLayerCost {
            slowest_gpu: slowest,
            compute_ns,
            all_to_all_ns,
            nanos: compute_ns + all_to_all_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen1.5-MoE-A2.7B on an L4: expert weights 3 x 2048 x 1408 x 2 B = 17.3 MB,
    /// 2 x 3 x 2048 x 1408 = 17.3 MFLOP per token; 240 GB/s x 0.8, 121 TFLOP/s x 0.6.
    fn l4() -> MoeLayerCost {
        MoeLayerCost::new(
            &GpuSpec::by_name("L4").unwrap(),
            &MoeModelShape::qwen1_5_moe_a2_7b(),
            MoeLayerParams::default(),
        )
    }

    #[test]
    fn hand_derived_decode_op_is_weight_streaming() {
        let m = l4();
        let c = m.grouped_gemm(&[1, 1, 0, 0], SpeedFactors::NOMINAL);
        let bytes = 2.0 * 3.0 * 2048.0 * 1408.0 * 2.0;
        assert_eq!(c.distinct_experts, 2);
        assert_eq!(c.weight_bytes, bytes);
        let memory = bytes / m.roofline.bandwidth * 1e9;
        assert!((c.nanos - (3.0 * m.roofline.launch_ns + memory)).abs() < 1e-6);
        assert!(c.memory_ns > c.compute_ns);
    }

    #[test]
    fn memory_bound_decode_grows_with_distinct_experts() {
        // 16 tokens, one row per expert each from 1 to 16 distinct experts: each extra expert
        // adds exactly one expert's weights over bandwidth.
        let m = l4();
        let per_expert = m.expert_weight_bytes / m.roofline.bandwidth * 1e9;
        let mut last = 0.0;
        for distinct in 1..=16u32 {
            let mut tokens = vec![0u32; 60];
            for i in 0..16 {
                tokens[(i % distinct) as usize] += 1;
            }
            let c = m.grouped_gemm(&tokens, SpeedFactors::NOMINAL);
            assert!(
                c.memory_ns > c.compute_ns,
                "decode at 16 tokens is memory-bound"
            );
            if distinct > 1 {
                assert!((c.nanos - last - per_expert).abs() < 1e-6);
            }
            last = c.nanos;
            assert_eq!(
                m.grouped_gemm_even(16, distinct as usize, SpeedFactors::NOMINAL),
                c.nanos
            );
        }
    }

    #[test]
    fn compute_bound_cost_is_invariant_to_spread_up_to_padding() {
        // 4 experts x 1024 rows: whole tiles, compute-bound. Any spread over the same experts
        // in multiples of the tile costs the same; moving one row across a tile boundary
        // costs one extra tile of FLOPs.
        let m = l4();
        let even = m.grouped_gemm(&[1024, 1024, 1024, 1024], SpeedFactors::NOMINAL);
        assert!(even.compute_ns > even.memory_ns);
        let skewed = m.grouped_gemm(&[2048, 1024, 512, 512], SpeedFactors::NOMINAL);
        assert_eq!(even.nanos, skewed.nanos);
        let crossed = m.grouped_gemm(&[1025, 1023, 1024, 1024], SpeedFactors::NOMINAL);
        let tile_ns = m.expert_flops_per_token * 64.0 / m.roofline.compute * 1e9;
        assert!((crossed.nanos - even.nanos - tile_ns).abs() < 1e-6);
    }

    #[test]
    fn padding_is_a_staircase_at_the_tile_size() {
        // One expert, compute-bound above ~380 rows on an L4: flat within a tile, one tile's FLOPs per
        // step at each multiple of 64 rows.
        let m = l4();
        let tile_ns = m.expert_flops_per_token * 64.0 / m.roofline.compute * 1e9;
        let at = |n: u32| m.grouped_gemm(&[n], SpeedFactors::NOMINAL).nanos;
        for k in 7..14u32 {
            let lo = at(64 * k + 1);
            assert_eq!(lo, at(64 * (k + 1)), "flat within a tile");
            assert!(
                (lo - at(64 * k) - tile_ns).abs() < 1e-6,
                "one tile per step"
            );
        }
    }

    #[test]
    fn expert_parallel_step_follows_the_most_loaded_gpu() {
        let m = l4();
        let light: &[u32] = &[512, 512];
        let heavy: &[u32] = &[2048, 1024];
        let nominal = [SpeedFactors::NOMINAL; 2];
        let ep = m.expert_parallel(&[light, heavy], &nominal, LinkSpec::PCIE4_X16);
        assert_eq!(ep.slowest_gpu, 1);
        assert_eq!(
            ep.compute_ns,
            m.grouped_gemm(heavy, SpeedFactors::NOMINAL).nanos
        );
        // All-to-all: 3072 rows x 1/2 x 2048 x 2 B each way over 25 GB/s, plus latency.
        let one_way = 3072.0 * 0.5 * 2048.0 * 2.0 / 25e9 * 1e9 + 10_000.0;
        assert!((ep.all_to_all_ns - 2.0 * one_way).abs() < 1e-6);
        // Lightening the light GPU changes nothing; lightening the heavy one does.
        let lighter: &[u32] = &[64, 64];
        let same = m.expert_parallel(&[lighter, heavy], &nominal, LinkSpec::PCIE4_X16);
        assert_eq!(same.nanos, ep.nanos);
        let balanced = m.expert_parallel(&[light, light], &nominal, LinkSpec::PCIE4_X16);
        assert!(balanced.nanos < ep.nanos);
        // A slow clock on the light GPU can make it the straggler.
        let slow = [SpeedFactors::split(0.2, 0.0), SpeedFactors::NOMINAL];
        let ep = m.expert_parallel(&[light, heavy], &slow, LinkSpec::PCIE4_X16);
        assert_eq!(ep.slowest_gpu, 0);
    }

    #[test]
    fn clock_slowdown_spares_memory_bound_ops() {
        let m = l4();
        let slow = SpeedFactors::split(0.8, 0.0);
        let decode = m.grouped_gemm(&[1, 1, 1, 1], SpeedFactors::NOMINAL).nanos;
        assert_eq!(m.grouped_gemm(&[1, 1, 1, 1], slow).nanos, decode);
        let prefill = m.grouped_gemm(&[1024; 4], SpeedFactors::NOMINAL);
        let slowed = m.grouped_gemm(&[1024; 4], slow);
        let expected = prefill.launch_ns + prefill.compute_ns / 0.8;
        assert!((slowed.nanos - expected).abs() < 1e-6);
        // bandwidth_share 1 reproduces the uniform slowdown on memory-bound ops.
        let uniform = SpeedFactors::split(0.8, 1.0);
        let d = m.grouped_gemm(&[1, 1, 1, 1], uniform);
        assert!(
            (d.memory_ns
                - m.grouped_gemm(&[1, 1, 1, 1], SpeedFactors::NOMINAL)
                    .memory_ns
                    / 0.8)
                .abs()
                < 1e-6
        );
    }

    #[test]
    fn measured_profile_sums_expert_costs() {
        // A measured expert: 3 launches of 5 us plus 10 us of work per 64-row tile.
        let launch = GpuSpec::by_name("L4").unwrap().kernel_launch_overhead_ns;
        let curve = CostCurve::new(vec![
            (1.0, 3.0 * launch + 10_000.0),
            (64.0, 3.0 * launch + 10_000.0),
            (65.0, 3.0 * launch + 20_000.0),
            (128.0, 3.0 * launch + 20_000.0),
        ])
        .unwrap();
        let entry = |split| ExpertFfnCurve {
            hidden: 2048,
            expert_ffn: 1408,
            dtype: WeightDtype::Bf16,
            curve: curve.clone(),
            split,
        };
        let m = l4().with_profile(&entry(None));
        let c = m.grouped_gemm(&[64, 65, 0], SpeedFactors::NOMINAL);
        let expected = 3.0 * launch + 10_000.0 + 20_000.0;
        assert!((c.nanos - expected).abs() < 1e-6);
        assert_eq!(m.grouped_gemm_even(129, 2, SpeedFactors::NOMINAL), c.nanos);
        // Split by mechanism: a fixed part of 4 us + 1 ns per assignment, once per layer; each
        // expert's GEMM pair 9 us per 64-row tile.
        let split = crate::cost::profile::MoeLayerSplit {
            fixed: CostCurve::new(vec![(1.0, 4_001.0), (1000.0, 5_000.0)]).unwrap(),
            expert_gemms: CostCurve::new(vec![
                (1.0, 9_000.0),
                (64.0, 9_000.0),
                (65.0, 18_000.0),
                (128.0, 18_000.0),
            ])
            .unwrap(),
        };
        let m = l4().with_profile(&entry(Some(split)));
        let c = m.grouped_gemm(&[64, 65, 0], SpeedFactors::NOMINAL);
        assert!(
            (c.nanos - (4_129.0 + 9_000.0 + 18_000.0)).abs() < 1e-6,
            "{c:?}"
        );
        assert_eq!(m.grouped_gemm_even(129, 2, SpeedFactors::NOMINAL), c.nanos);
        let expected = m.grouped_gemm_expected(&[64.0, 65.0, 0.0], SpeedFactors::NOMINAL);
        assert!((expected - c.nanos).abs() < 1e-6);
        // Eight experts with one row each: the fixed part once, eight GEMM pairs.
        let eight = m.grouped_gemm(&[1; 8], SpeedFactors::NOMINAL).nanos;
        assert!((eight - (4_008.0 + 8.0 * 9_000.0)).abs() < 1e-6);
    }

    #[test]
    fn expected_work_spread_over_devices() {
        // Certain weights with whole rows are the grouped GEMM itself.
        let m = l4();
        let certain = m.grouped_gemm_spread([(1.0, 1.0), (1.0, 1.0)], 1.0, SpeedFactors::NOMINAL);
        assert_eq!(
            certain,
            m.grouped_gemm(&[1, 1], SpeedFactors::NOMINAL).nanos
        );
        // Four weights each read with probability 1/2 stream two experts' weights in
        // expectation; spread over 2 devices each streams one, launched once per device.
        let launch = 3.0 * m.roofline.launch_ns;
        let half = m.grouped_gemm_spread([(0.5, 1.0); 4], 2.0, SpeedFactors::NOMINAL);
        let one_expert = m.expert_weight_bytes / m.roofline.bandwidth * 1e9;
        assert!((half - launch - one_expert).abs() < 1e-6);
        // Rows when read are padded to whole tiles.
        let compute_bound = m.grouped_gemm_spread([(1.0, 1000.5)], 1.0, SpeedFactors::NOMINAL);
        let tile_rows = 1024.0; // ceil(1000.5) = 1001 rows, 16 tiles of 64
        let expected = launch + m.expert_flops_per_token * tile_rows / m.roofline.compute * 1e9;
        assert!((compute_bound - expected).abs() < 1e-6);
        assert_eq!(m.grouped_gemm_spread([], 4.0, SpeedFactors::NOMINAL), 0.0);
    }
}
