//! The one entry point that prices an MoE layer, for simulation and planning alike: per GPU,
//! the rows of each expert it holds run as the grouped expert GEMMs of the kernel model
//! (`cost::kernel`: gate+up grouped GEMM, SwiGLU, down grouped GEMM, each with its tile choice,
//! streaming rate and kernel floor); an expert-parallel layer waits for its slowest GPU, plus
//! the all-to-all dispatch and combine of the most loaded GPU's rows. CAPS (one GPU, expected
//! loads), GEM (each GPU's mapped slots, and its mapper's planning curves), ExpertWeave (each
//! device's expected expert reads) and the serving family (each GPU of each EP group) all
//! price through `MoeLayerCost::gpu` and `MoeLayerCost::layer`. See docs/cost-model.md,
//! "MoE layer".
//!
//! Two refinements replace the model where measurements exist: a measured profile of the
//! project's own kernels (`with_profile`: where the profile splits the layer, its measured
//! fixed part once per layer plus each active expert's measured GEMM pair; else the measured
//! single-expert layer curves back to back inside one launch set), and the measured grouped
//! GEMMs of the GPU and expert shape (`with_measured_grouped`: `profiles/h200/kernels.json`,
//! the model's shape between measured points scaled to them).

use crate::curve::CostCurve;
use crate::gpu::{GpuSpec, LinkSpec};
use crate::kernel::{
    GroupSums, GroupedShape, KernelRates, KernelTime, LANES, LaneRates, LaneSums, LaneTally, Timing,
};
use crate::kernel_timings::KernelTimings;
use crate::lanes::{F64x4, Lanes};
use crate::profile::ExpertFfnCurve;
use crate::shape::{MoeModelShape, WeightDtype};
use std::sync::{Arc, OnceLock};

/// Kernel launches of one MoE layer's experts in an eager engine (gate+up grouped GEMM,
/// SwiGLU, down grouped GEMM), which a measured single-expert curve includes.
pub const LAUNCHES_PER_LAYER: u32 = 3;

/// Bytes of one routed activation element on the wire (bf16).
const ACTIVATION_BYTES: f64 = 2.0;

/// How fast one GPU runs relative to its nominal part: `compute` scales the FLOP terms (the SM
/// clock: a power cap or a slower bin), `bandwidth` the streaming terms (HBM speed, which a
/// power cap barely touches). `{1, 1}` is the nominal part.
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
    /// 1: the whole GPU is uniformly slower).
    pub fn split(speed: f64, bandwidth_share: f64) -> SpeedFactors {
        SpeedFactors {
            compute: speed,
            bandwidth: 1.0 - (1.0 - speed) * bandwidth_share,
        }
    }
}

/// One GPU's experts and the rows each computes.
#[derive(Clone, Copy, Debug)]
pub enum ExpertRows<'a> {
    /// Counted rows of each hosted expert (0: the expert does not run).
    Counted(&'a [u32]),
    /// Expected rows (CAPS's per-step loads): an expert expecting `l` rows runs with weight
    /// `min(l, 1)` and then computes `ceil(max(l, 1))` rows.
    Expected(&'a [f32]),
    /// `tokens` rows spread as evenly as whole rows allow over `experts` experts (the first
    /// `tokens % experts` one more), as a planner assumes.
    Even { tokens: u64, experts: usize },
    /// Expected reads: (probability the expert runs, rows it computes when it does).
    Weighted(&'a [(f64, f64)]),
}

impl ExpertRows<'_> {
    /// Calls `f(rows, weight)` for every group that runs (rows at least 1).
    #[inline]
    pub fn for_each_group(&self, mut f: impl FnMut(u64, f64)) {
        match *self {
            ExpertRows::Counted(rows) => {
                for &n in rows {
                    if n > 0 {
                        f(u64::from(n), 1.0);
                    }
                }
            }
            ExpertRows::Expected(loads) => {
                for &l in loads {
                    if let Some((rows, p)) = expected_group(l) {
                        f(rows, p);
                    }
                }
            }
            ExpertRows::Even { tokens, experts } => {
                let active = (experts as u64).min(tokens);
                if let Some(base) = tokens.checked_div(active) {
                    let extra = tokens % active;
                    if extra > 0 {
                        f(base + 1, extra as f64);
                    }
                    f(base, (active - extra) as f64);
                }
            }
            ExpertRows::Weighted(weights) => {
                for &(p, rows) in weights {
                    if p > 0.0 && rows > 0.0 {
                        f(rows.max(1.0).ceil() as u64, p);
                    }
                }
            }
        }
    }

    /// The groups reduced to the sums the grouped GEMM reads.
    #[inline]
    pub fn sums(&self) -> GroupSums {
        if let ExpertRows::Expected(loads) = *self {
            return expected_sums(loads);
        }
        let mut sums = GroupSums::default();
        self.for_each_group(|rows, p| sums.add(rows, p));
        sums
    }
}

/// The group of an expert expecting `l` rows: `ceil(max(l, 1))` rows at weight `min(l, 1)`;
/// `None` when it does not run (`l <= 0`).
#[inline(always)]
fn expected_group(l: f32) -> Option<(u64, f64)> {
    (l > 0.0).then(|| {
        // ceil(max(l, 1)) without a libm call: the truncation, one more if a fraction was
        // cut off.
        let whole = l as u64;
        let rows = (whole + u64::from((whole as f32) < l)).max(1);
        (rows, f64::from(l.min(1.0)))
    })
}

/// The sums of an expert's expected loads (`ExpertRows::Expected`): `expected_sums_lanes` of
/// one lane.
#[inline]
fn expected_sums(loads: &[f32]) -> GroupSums {
    expected_sums_lanes(&[loads])[0]
}

/// The sums of up to `LANES` GPUs' or layers' expected loads (`loads[i]`: lane `i`; lanes past
/// them empty): per lane `GroupSums::add` of each `expected_group` in order, so the same bits
/// (`add_expected`). The lanes go side by side, one load of each at a time, in the lanes of a
/// vector (each lane its own chain of additions); where the CPU has AVX (checked at run time)
/// the vector is one AVX register (`lanes::avx`), else `F64x4`: the same IEEE operations
/// either way.
#[inline]
fn expected_sums_lanes(loads: &[&[f32]]) -> [GroupSums; LANES] {
    assert!(loads.len() <= LANES, "at most {LANES} lanes");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        /// `expected_sums_in` on AVX lanes, compiled with AVX enabled.
        #[target_feature(enable = "avx")]
        fn on_avx(loads: &[&[f32]]) -> [GroupSums; LANES] {
            expected_sums_in::<crate::lanes::avx::Avx>(loads)
        }
        // SAFETY: the CPU has AVX.
        return unsafe { on_avx(loads) };
    }
    expected_sums_in::<F64x4>(loads)
}

/// `expected_sums_lanes` on the lanes `L`: six of the eight sums accumulated, each one `L`
/// across the lanes, and the padded rows' two from the tiles' (`add_expected`); a lane past
/// its loads' end reads no load (0, which adds +0).
#[inline(always)]
fn expected_sums_in<L: Lanes>(loads: &[&[f32]]) -> [GroupSums; LANES] {
    let lanes: [&[f32]; LANES] = std::array::from_fn(|k| loads.get(k).copied().unwrap_or(&[]));
    let common = lanes.iter().map(|lane| lane.len()).min().unwrap_or(0);
    let longest = lanes.iter().map(|lane| lane.len()).max().unwrap_or(0);
    let mut sums = [L::splat(0.0); 6];
    let [a, b, c, d] = lanes.map(|lane| &lane[..common]);
    for (((&a, &b), &c), &d) in a.iter().zip(b).zip(c).zip(d) {
        let l = F64x4::new([a, b, c, d].map(f64::from));
        add_expected(&mut sums, L::load(l));
    }
    for j in common..longest {
        let l = F64x4::new(std::array::from_fn(|k| {
            lanes[k].get(j).map_or(0.0, |&l| f64::from(l))
        }));
        add_expected(&mut sums, L::load(l));
    }
    // The padded rows' sums are the tiles' times 64 and 128 (`add_expected`).
    let [groups, rows, t64, t128, c64, c128] = sums;
    let padded = [t64 * L::splat(64.0), t128 * L::splat(128.0)];
    let terms = [groups, rows, t64, t128, padded[0], padded[1], c64, c128]
        .map(|sum| sum.store().to_array());
    std::array::from_fn(|k| GroupSums::from_terms(terms.map(|field| field[k])))
}

/// Adds each lane's group of its expected load `l` to six of its eight sums (groups, rows,
/// tiles (64, 128), clusters (64, 128)) as `GroupSums::add` of `expected_group(l)` does,
/// without a branch: `w` times the terms of `rows` = `max(ceil(l), 1)` rows, with `w` =
/// `min(l, 1)` where `l` > 0, else 0 (no group: its terms, 1 row's, times 0 add +0, which
/// leaves a sum of +0 or more as it is). The terms are `add`'s: tiles `ceil(rows / 64)` and
/// `ceil(rows / 128)` (a division by a power of two is exact, so the integer `div_ceil`),
/// clusters `ceil(tiles / 2)`, each a whole number below 2^64 held exactly; a product by
/// `w` = 1 is exact, so a load of one row or more adds `add(rows, 1)`'s numbers. `add`'s
/// padded rows, `w` x (tiles x 64) summed, are the tiles' sum times 64 (and 128), bit for
/// bit: a product by a power of two is exact and commutes with every rounding here (`w` is
/// 0 or at least the smallest f32, so no product or sum nears f64's subnormals or overflow),
/// so each partial sum is 64 times the tiles' one.
#[inline(always)]
fn add_expected<L: Lanes>(sums: &mut [L; 6], l: L) {
    let (zero, one) = (L::splat(0.0), L::splat(1.0));
    let up = l.ceil();
    let rows = up.simd_ge(one).bitselect(up, one);
    let w = l
        .simd_gt(zero)
        .bitselect(l.simd_lt(one).bitselect(l, one), zero);
    let t64 = (rows * L::splat(1.0 / 64.0)).ceil();
    let t128 = (rows * L::splat(1.0 / 128.0)).ceil();
    let half = L::splat(0.5);
    let terms = [rows, t64, t128, (t64 * half).ceil(), (t128 * half).ceil()];
    // groups += w (`add`'s p x 1).
    sums[0] = sums[0] + w;
    for (sum, term) in sums[1..].iter_mut().zip(terms) {
        *sum = *sum + w * term;
    }
}

/// One GPU's experts priced, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuExpertCost {
    /// GPU-side terms of the gate+up grouped GEMM, the SwiGLU and the down grouped GEMM.
    pub kernels: [KernelTime; 3],
    /// The two grouped GEMMs under the layer's timing (what `moe_grouped.csv` measures).
    pub gemms_ns: f64,
    /// The whole expert part under the layer's timing.
    pub nanos: f64,
    /// Rows computed (expected rows for expected loads).
    pub rows: f64,
    /// Experts that run (expected for expected loads).
    pub experts: f64,
}

/// One expert-parallel layer: the slowest GPU and the all-to-all around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpLayerCost {
    pub slowest_gpu: usize,
    /// The slowest GPU's expert part.
    pub compute_ns: f64,
    /// Dispatch plus combine.
    pub all_to_all_ns: f64,
    pub nanos: f64,
}

/// The measured grouped GEMMs of one expert shape on one GPU: per measured group count, the
/// ratio of the measured time to the model's at each measured (even) rows per group.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredGrouped {
    /// (groups, [(ln rows per group, measured / model)] sorted by rows).
    levels: Vec<(f64, Vec<(f64, f64)>)>,
    /// Where the points come from.
    pub source: String,
}

impl MeasuredGrouped {
    /// The ratio at (`groups`, `rows` per group): linear in ln(rows) on each measured group
    /// count (clamped to its measured range), linear in ln(groups) between two counts.
    fn ratio(&self, groups: f64, rows: f64) -> f64 {
        let at = |points: &[(f64, f64)], x: f64| {
            let i = points.partition_point(|&(lx, _)| lx < x);
            if i == 0 {
                points[0].1
            } else if i == points.len() {
                points[points.len() - 1].1
            } else {
                let (x0, y0) = points[i - 1];
                let (x1, y1) = points[i];
                y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            }
        };
        let (g, x) = (groups.max(1.0).ln(), rows.max(1.0).ln());
        let i = self.levels.partition_point(|(lg, _)| *lg < g);
        if i == 0 {
            at(&self.levels[0].1, x)
        } else if i == self.levels.len() {
            at(&self.levels[self.levels.len() - 1].1, x)
        } else {
            let (g0, p0) = &self.levels[i - 1];
            let (g1, p1) = &self.levels[i];
            let (r0, r1) = (at(p0, x), at(p1, x));
            r0 + (r1 - r0) * (g - g0) / (g1 - g0)
        }
    }
}

/// A measured profile's layer on a device that runs its experts one after another, beside the
/// entry point (`MoeLayerCost::with_profile` prices the same split on a GPU).
impl ExpertFfnCurve {
    /// One MoE layer launch over `assignments` routed rows on a device that runs the layer's
    /// experts one after another (`ExpertExecution::Serial`): `experts` yields, for every
    /// expert weight the layer may read, the probability that it is read and the rows it
    /// computes when it is (whole rows: an expectation below one row is that probability of
    /// one row). With a split: the fixed part once plus each expert's GEMM pair; without one,
    /// each expert costs the whole-layer curve, so the layer's fixed kernels are counted once
    /// per expert (how profiles without the split were read). 0 when no expert is read.
    pub fn serial_layer_ns(
        &self,
        assignments: f64,
        experts: impl IntoIterator<Item = (f64, f64)>,
    ) -> f64 {
        let per_expert = match &self.split {
            Some(split) => &split.expert_gemms,
            None => &self.curve,
        };
        let mut any = false;
        let mut gemms = 0.0;
        for (p, rows) in experts {
            if p > 0.0 && rows > 0.0 {
                any = true;
                gemms += p * per_expert.at(rows.max(1.0));
            }
        }
        match (&self.split, any) {
            (_, false) => 0.0,
            (Some(split), true) => split.fixed.at(assignments.max(1.0)) + gemms,
            (None, true) => gemms,
        }
    }
}

/// Up to `LANES` GPUs' times and rows, ns (`MoeLayerCost::lane_times`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaneTimes {
    pub nanos: [f64; LANES],
    pub rows: [f64; LANES],
}

/// The MoE-layer cost of one model's routed experts on one GPU type.
#[derive(Clone, Debug)]
pub struct MoeLayerCost {
    pub hidden: u64,
    pub expert_ffn: u64,
    pub bytes_per_param: f64,
    /// One expert's weight bytes (gate, up and down).
    pub expert_weight_bytes: f64,
    /// One routed row's FLOPs through one expert.
    pub expert_flops_per_token: f64,
    pub rates: KernelRates,
    pub timing: Timing,
    /// The gate+up and down grouped GEMMs' shapes.
    shapes: [GroupedShape; 2],
    /// The host launch cost a measured single-expert curve includes per kernel.
    launch_ns: f64,
    /// A measured expert curve (see [`Self::with_profile`]): the expert's GEMM pair where the
    /// profile splits the layer, else the whole single-expert layer.
    measured_expert: Option<CostCurve>,
    /// The measured fixed part of a layer launch (routed assignments -> ns), where the profile
    /// splits the layer; it replaces the launch term.
    measured_fixed: Option<CostCurve>,
    measured_grouped: Option<Arc<MeasuredGrouped>>,
}

impl MoeLayerCost {
    /// The routed experts of `shape` on `gpu`, launched as `timing` says.
    pub fn new(gpu: &GpuSpec, shape: &MoeModelShape, timing: Timing) -> MoeLayerCost {
        MoeLayerCost::for_experts(
            gpu,
            shape.hidden,
            shape.expert_ffn,
            shape.weight_dtype,
            timing,
        )
    }

    /// Gated (SwiGLU) experts of `hidden x expert_ffn` stored as `dtype` on `gpu`.
    pub fn for_experts(
        gpu: &GpuSpec,
        hidden: usize,
        expert_ffn: usize,
        dtype: WeightDtype,
        timing: Timing,
    ) -> MoeLayerCost {
        let expert_params = 3.0 * hidden as f64 * expert_ffn as f64;
        MoeLayerCost {
            hidden: hidden as u64,
            expert_ffn: expert_ffn as u64,
            bytes_per_param: dtype.bytes_per_param(),
            expert_weight_bytes: expert_params * dtype.bytes_per_param(),
            expert_flops_per_token: 2.0 * expert_params,
            rates: KernelRates::of(gpu),
            timing,
            shapes: [
                GroupedShape::new(
                    hidden as u64,
                    2 * expert_ffn as u64,
                    dtype.bytes_per_param(),
                ),
                GroupedShape::new(expert_ffn as u64, hidden as u64, dtype.bytes_per_param()),
            ],
            launch_ns: gpu.kernel_launch_overhead_ns,
            measured_expert: None,
            measured_fixed: None,
            measured_grouped: None,
        }
    }

    /// Refines the op with a profile's measured expert entry of the project's own kernels.
    /// With its split (cost/profile.rs `MoeLayerSplit`) the experts cost `fixed(assignments) +
    /// sum_e g(n_e)`: the layer's measured kernels around the GEMMs (grouping, gather, SwiGLU,
    /// combine) once, then each active expert's measured GEMM pair `g` back to back (what the
    /// CUDA backend runs: one cuBLAS GEMM pair per expert with rows, on one stream). Without a
    /// split, from the whole-layer curve `e(n)` (each point including `LAUNCHES_PER_LAYER`
    /// launches): `launches + sum_e (e(n_e) - launches)`, the launch term standing in for the
    /// fixed part. Speed factors divide the experts' work by the compute factor where the
    /// model's compute term binds, else by the bandwidth factor; the fixed part (a few
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
    /// launch term.
    fn fixed_ns(&self, assignments: f64) -> f64 {
        match &self.measured_fixed {
            Some(fixed) => fixed.at(assignments.max(1.0)),
            None => self.launch_total(),
        }
    }

    /// One expert's measured work beyond the fixed part at `rows` rows.
    fn measured_work(&self, curve: &CostCurve, rows: f64) -> f64 {
        match self.measured_fixed {
            Some(_) => curve.at(rows),
            None => (curve.at(rows) - self.launch_total()).max(0.0),
        }
    }

    /// Scales the model to the measured grouped GEMMs of `gpu` for this expert shape where
    /// there are any (bf16 experts on the H200 of `profiles/h200/kernels.json`); unchanged
    /// elsewhere. Returns whether measurements apply.
    pub fn with_measured_grouped(mut self, gpu: &GpuSpec) -> (MoeLayerCost, bool) {
        self.measured_grouped =
            measured_grouped(gpu, self.hidden, self.expert_ffn, self.bytes_per_param);
        let found = self.measured_grouped.is_some();
        (self, found)
    }

    /// Where the grouped GEMMs' measurements come from, if any apply.
    pub fn measured_source(&self) -> Option<&str> {
        self.measured_grouped.as_ref().map(|m| m.source.as_str())
    }

    /// What prices the layer, in words (a result's record).
    pub fn pricing(&self, gpu: &GpuSpec) -> String {
        if self.measured_fixed.is_some() {
            "the profile's measured layer split: its fixed part once, each expert's GEMM pair"
                .into()
        } else if self.measured_expert.is_some() {
            "the profile's measured single-expert curve, experts back to back".into()
        } else if let Some(source) = self.measured_source() {
            source.into()
        } else {
            format!(
                "the kernel model on the {}'s rates (profiles/rates.json)",
                gpu.name
            )
        }
    }

    fn launch_total(&self) -> f64 {
        f64::from(LAUNCHES_PER_LAYER) * self.launch_ns
    }

    /// One GPU's experts: `rows` of each expert it holds, at `speed` (`gpus` with one GPU).
    #[inline]
    pub fn gpu(&self, rows: ExpertRows<'_>, speed: SpeedFactors) -> GpuExpertCost {
        self.gpus(&[rows], &[speed])[0]
    }

    /// Up to `LANES` GPUs' experts, `rows[i]` at `speeds[i]`, each priced on its own; their
    /// grouped GEMMs are computed side by side (`KernelRates::grouped_lanes`: the same
    /// operations per GPU, so the same bits as one GPU alone), which lets the divisions and
    /// square roots of a layer's GPUs overlap. Entries past `rows` are empty.
    #[inline]
    pub fn gpus(&self, rows: &[ExpertRows<'_>], speeds: &[SpeedFactors]) -> [GpuExpertCost; LANES] {
        assert_eq!(rows.len(), speeds.len(), "one speed per GPU");
        let mut sums = [GroupSums::default(); LANES];
        for (s, r) in sums.iter_mut().zip(rows) {
            *s = r.sums();
        }
        self.gpus_of(rows, speeds, &sums)
    }

    /// `gpus` of up to `LANES` GPUs' expected loads at the nominal speed (`loads[i]`: GPU or
    /// layer `i`, as `ExpertRows::Expected`): `gpus` of them, lane by lane the same bits. CAPS
    /// prices its layers this way, `LANES` at a time.
    pub fn expected_lanes(&self, loads: &[&[f32]]) -> [GpuExpertCost; LANES] {
        assert!(loads.len() <= LANES, "at most {LANES} lanes");
        let sums = expected_sums_lanes(loads);
        let mut rows = [ExpertRows::Expected(&[]); LANES];
        for (r, &load) in rows.iter_mut().zip(loads) {
            *r = ExpertRows::Expected(load);
        }
        let n = loads.len();
        self.gpus_of(&rows[..n], &[SpeedFactors::NOMINAL; LANES][..n], &sums)
    }

    /// `gpus` from the GPUs' sums (`sums[i]`: `rows[i].sums()`).
    #[inline]
    fn gpus_of(
        &self,
        rows: &[ExpertRows<'_>],
        speeds: &[SpeedFactors],
        sums: &[GroupSums; LANES],
    ) -> [GpuExpertCost; LANES] {
        let mut out = [GpuExpertCost::default(); LANES];
        if sums.iter().all(GroupSums::is_empty) {
            return out;
        }
        let lane_rates = self.rates.lanes(speeds);
        let lane_sums = LaneSums::of(&sums[..rows.len()]);
        let gate_up = self
            .rates
            .grouped_lanes(&lane_rates, &self.shapes[0], &lane_sums);
        let down = self
            .rates
            .grouped_lanes(&lane_rates, &self.shapes[1], &lane_sums);
        for (i, (&rows, &speed)) in rows.iter().zip(speeds).enumerate() {
            let sums = &sums[i];
            if sums.is_empty() {
                continue;
            }
            let rates = if speed == SpeedFactors::NOMINAL {
                self.rates
            } else {
                self.rates.scaled(speed)
            };
            let swiglu =
                rates.streaming(sums.rows * 3.0 * self.expert_ffn as f64 * ACTIVATION_BYTES);
            out[i] = self.priced(
                rows,
                speed,
                &rates,
                sums,
                [gate_up.get(i), swiglu, down.get(i)],
            );
        }
        out
    }

    /// Whether the kernel model alone prices the experts (no measurements), so that
    /// `lane_times` applies.
    #[inline]
    pub fn prices_lanes(&self) -> bool {
        self.measured_grouped.is_none() && self.measured_expert.is_none()
    }

    /// Up to `LANES` GPUs' counted experts (`counts[i]`: GPU `i`'s rows per hosted expert) at
    /// the lane rates `rates` (`KernelRates::lanes` of their speeds): `lane_times` of their
    /// sums, `None` where measurements price the layer (then `gpus` does).
    #[inline]
    pub fn counted_lanes(&self, rates: &LaneRates, counts: &[&[u32]]) -> Option<LaneTimes> {
        self.prices_lanes()
            .then(|| self.lane_times(rates, &LaneSums::of_counts(counts)))
    }

    /// The kernel model's price of up to `LANES` GPUs' experts (`sums`, one lane each, at the
    /// lane rates `rates`): each GPU's time and rows, the `nanos` and `rows` of `gpus`, priced
    /// lane by lane throughout (both grouped GEMMs, the SwiGLU, the wall times): the same
    /// operations as `gpus` per GPU, so the same bits (empty lanes 0). Only where
    /// `prices_lanes`.
    #[inline(always)]
    pub fn lane_times(&self, rates: &LaneRates, sums: &LaneSums) -> LaneTimes {
        self.lane_times_in::<F64x4>(rates, sums)
    }

    /// `lane_times` on the lanes `L` (`lanes::Lanes`: the same bits on each).
    #[inline(always)]
    fn lane_times_in<L: Lanes>(&self, rates: &LaneRates, sums: &LaneSums) -> LaneTimes {
        let gate_up = self
            .rates
            .grouped_lanes_in::<L>(rates, &self.shapes[0], sums);
        let down = self
            .rates
            .grouped_lanes_in::<L>(rates, &self.shapes[1], sums);
        let splat = L::splat;
        let bytes = L::load(sums.rows())
            * splat(3.0)
            * splat(self.expert_ffn as f64)
            * splat(ACTIVATION_BYTES);
        let swiglu = self.rates.streaming_lanes_in::<L>(rates, bytes);
        let host = splat(self.rates.host_launch_ns);
        // `KernelTime::wall` per lane (`f64::max` of two positive times is the larger).
        let wall = |nanos: L| match self.timing {
            Timing::Graph => nanos,
            Timing::Eager => nanos.simd_ge(host).bitselect(nanos, host),
        };
        let nanos = (wall(L::load(gate_up.nanos)) + wall(L::load(down.nanos)) + wall(swiglu))
            .store()
            .to_array();
        let rows = sums.rows().to_array();
        let mut out = LaneTimes::default();
        for i in 0..LANES {
            if !gate_up.empty[i] {
                (out.nanos[i], out.rows[i]) = (nanos[i], rows[i]);
            }
        }
        out
    }

    /// `lane_times` of every lane group of `counts` (`counts[i][j]`: the rows of group `j` of
    /// lane group `i`'s GPUs side by side) into `out` (`lane_times_with`).
    pub fn lane_times_all(
        &self,
        rates: &[LaneRates],
        counts: &[Vec<[u32; LANES]>],
        out: &mut Vec<LaneTimes>,
    ) {
        struct Given<'a>(&'a [Vec<[u32; LANES]>]);
        impl LaneRows for Given<'_> {
            fn tally<L: Lanes>(&mut self, i: usize, tally: &mut LaneTally<L>) {
                self.0[i].iter().for_each(|&rows| tally.add(rows));
            }
        }
        self.lane_times_with(rates, counts.len(), &mut Given(counts), out);
    }

    /// `lane_times` of `groups` lane groups into `out` (cleared first): group `i`'s rows from
    /// `rows.tally(i, ..)` (called in order), summed on the lanes, at the lane rates
    /// `rates[i % rates.len()]` (a step's layers one after another, each with the same lane
    /// groups). Where the CPU has AVX (checked at run time) the lanes are one AVX register
    /// (`lanes::avx`), else `F64x4`: each lane the same IEEE operations in the same order
    /// either way, so the same bits. A group's sums go straight to its pricing, and no group's
    /// pricing waits for another's (one group's divisions and roots overlap the next's).
    pub fn lane_times_with<R: LaneRows>(
        &self,
        rates: &[LaneRates],
        groups: usize,
        rows: &mut R,
        out: &mut Vec<LaneTimes>,
    ) {
        out.clear();
        out.reserve(groups);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX.
            unsafe { lane_times_avx(self, rates, groups, rows, out) };
            return;
        }
        lane_times_each::<F64x4, _>(self, rates, groups, rows, out);
    }

    /// One GPU's cost from the kernel model's three kernels on its `sums` (GPU side): scaled
    /// to the measured grouped GEMMs, or replaced by the measured experts, where those apply.
    #[inline]
    fn priced(
        &self,
        rows: ExpertRows<'_>,
        speed: SpeedFactors,
        rates: &KernelRates,
        sums: &GroupSums,
        mut kernels: [KernelTime; 3],
    ) -> GpuExpertCost {
        if let Some(measured) = &self.measured_grouped {
            let ratio = measured.ratio(sums.groups, sums.rows / sums.groups);
            for k in [0, 2] {
                kernels[k].nanos *= ratio;
            }
        }
        if let Some(curve) = &self.measured_expert {
            // The project's own measured experts back to back: the fixed part once per layer
            // (measured, or the launch set), each expert's work beyond it.
            let mut work = 0.0;
            rows.for_each_group(|n, p| work += p * self.measured_work(curve, n as f64));
            let (memory, compute) = (
                kernels[0].memory_ns + kernels[2].memory_ns,
                kernels[0].compute_ns + kernels[2].compute_ns,
            );
            let factor = if compute > memory {
                speed.compute
            } else {
                speed.bandwidth
            };
            let nanos = self.fixed_ns(sums.rows) + work / factor;
            return GpuExpertCost {
                kernels,
                gemms_ns: nanos,
                nanos,
                rows: sums.rows,
                experts: sums.groups,
            };
        }
        let host = rates.host_launch_ns;
        let wall = |k: &KernelTime| k.wall(self.timing, host);
        let gemms_ns = wall(&kernels[0]) + wall(&kernels[2]);
        GpuExpertCost {
            kernels,
            gemms_ns,
            nanos: gemms_ns + wall(&kernels[1]),
            rows: sums.rows,
            experts: sums.groups,
        }
    }

    /// The dispatch and combine all-to-alls of an expert-parallel group of `gpus` GPUs whose
    /// most loaded GPU computes `max_rows` routed rows: `(G - 1) / G` of them arrive over the
    /// link and leave again, each all-to-all as long as that GPU's incoming bytes plus the
    /// link latency; 0 for one GPU.
    #[inline]
    pub fn all_to_all_ns(&self, max_rows: f64, gpus: usize, link: LinkSpec) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let incoming =
            max_rows * (gpus - 1) as f64 / gpus as f64 * self.hidden as f64 * ACTIVATION_BYTES;
        2.0 * (incoming / link.bandwidth_bytes_per_s * 1e9 + link.latency_ns)
    }

    /// An expert-parallel layer over `gpus` GPUs (`link` carries the all-to-all; `None`: not
    /// modelled): add each GPU's experts in turn, then `finish`.
    #[inline]
    pub fn layer(&self, gpus: usize, link: Option<LinkSpec>) -> EpLayer<'_> {
        EpLayer {
            cost: self,
            gpus,
            link,
            added: 0,
            slowest: 0,
            compute_ns: 0.0,
            max_rows: 0.0,
        }
    }
}

/// An expert-parallel layer being priced GPU by GPU (`MoeLayerCost::layer`).
pub struct EpLayer<'a> {
    cost: &'a MoeLayerCost,
    gpus: usize,
    link: Option<LinkSpec>,
    added: usize,
    slowest: usize,
    compute_ns: f64,
    max_rows: f64,
}

impl EpLayer<'_> {
    /// Adds the next GPU's experts; returns that GPU's time (its busy time in the layer).
    #[inline]
    pub fn add(&mut self, rows: ExpertRows<'_>, speed: SpeedFactors) -> f64 {
        let c = self.cost.gpu(rows, speed);
        self.add_priced(c.nanos, c.rows)
    }

    /// Adds the next GPUs' experts (at most `LANES`), priced together (`MoeLayerCost::gpus`);
    /// returns each GPU's time (its busy time in the layer), entries past `rows` 0.
    #[inline]
    pub fn add_gpus(&mut self, rows: &[ExpertRows<'_>], speeds: &[SpeedFactors]) -> [f64; LANES] {
        let costs = self.cost.gpus(rows, speeds);
        let mut times = [0.0; LANES];
        for (t, c) in times.iter_mut().zip(&costs[..rows.len()]) {
            *t = self.add_priced(c.nanos, c.rows);
        }
        times
    }

    /// Adds the next GPUs' counted experts (at most `LANES`; `counts[i]` the rows per hosted
    /// expert of the GPU at `speeds[i]`, `rates` the lane rates of those speeds), priced lane
    /// by lane (`MoeLayerCost::counted_lanes`, else `add_gpus`); returns each GPU's time, as
    /// `add_gpus` does.
    #[inline]
    pub fn add_counted(
        &mut self,
        rates: &LaneRates,
        counts: &[&[u32]],
        speeds: &[SpeedFactors],
    ) -> [f64; LANES] {
        let Some(priced) = self.cost.counted_lanes(rates, counts) else {
            let rows: Vec<ExpertRows<'_>> = counts.iter().map(|c| ExpertRows::Counted(c)).collect();
            return self.add_gpus(&rows, speeds);
        };
        self.add_lane_times(&priced, counts.len())
    }

    /// Adds the next `gpus` GPUs (at most `LANES`) priced already (`MoeLayerCost::lane_times`);
    /// returns each GPU's time, as `add_gpus` does.
    #[inline]
    pub fn add_lane_times(&mut self, priced: &LaneTimes, gpus: usize) -> [f64; LANES] {
        let mut times = [0.0; LANES];
        for (i, t) in times.iter_mut().enumerate().take(gpus) {
            *t = self.add_priced(priced.nanos[i], priced.rows[i]);
        }
        times
    }

    /// Adds the next GPU priced already (`nanos`, `rows`: `MoeLayerCost::gpu`).
    #[inline]
    fn add_priced(&mut self, nanos: f64, rows: f64) -> f64 {
        if nanos > self.compute_ns {
            self.compute_ns = nanos;
            self.slowest = self.added;
        }
        self.max_rows = self.max_rows.max(rows);
        self.added += 1;
        nanos
    }

    /// The layer: its slowest GPU plus the all-to-all of its most loaded GPU's rows.
    #[inline]
    pub fn finish(self) -> EpLayerCost {
        let all_to_all_ns = self.link.map_or(0.0, |link| {
            self.cost.all_to_all_ns(self.max_rows, self.gpus, link)
        });
        EpLayerCost {
            slowest_gpu: self.slowest,
            compute_ns: self.compute_ns,
            all_to_all_ns,
            nanos: self.compute_ns + all_to_all_ns,
        }
    }
}

/// The measured grouped GEMMs of (`gpu`, `hidden` x `expert_ffn` experts of `bytes_per_param`)
/// as ratios to the model, built once per shape from the committed kernel timings.
fn measured_grouped(
    gpu: &GpuSpec,
    hidden: u64,
    expert_ffn: u64,
    bytes_per_param: f64,
) -> Option<Arc<MeasuredGrouped>> {
    type Cache = Vec<((u64, u64), Option<Arc<MeasuredGrouped>>)>;
    static H200: OnceLock<std::sync::Mutex<Cache>> = OnceLock::new();
    if gpu.name != "H200" || bytes_per_param != 2.0 {
        return None;
    }
    let cache = H200.get_or_init(Default::default);
    let mut cache = cache.lock().expect("the cache is not poisoned");
    if let Some((_, found)) = cache.iter().find(|(k, _)| *k == (hidden, expert_ffn)) {
        return found.clone();
    }
    let set = KernelTimings::h200();
    let model = MoeLayerCost::for_experts(
        gpu,
        hidden as usize,
        expert_ffn as usize,
        WeightDtype::Bf16,
        Timing::Graph,
    );
    let mut levels: Vec<(f64, Vec<(f64, f64)>)> = Vec::new();
    for p in set
        .grouped
        .iter()
        .filter(|p| p.hidden == hidden && p.expert_ffn == expert_ffn && p.kind == "even")
    {
        let rows = ExpertRows::Counted(&p.rows_per_expert);
        let ratio = p.median_us * 1e3 / model.gpu(rows, SpeedFactors::NOMINAL).gemms_ns;
        let g = (p.rows_per_expert.len() as f64).ln();
        let mean = p.rows_per_expert.iter().map(|&r| f64::from(r)).sum::<f64>()
            / p.rows_per_expert.len() as f64;
        match levels.iter_mut().find(|(lg, _)| *lg == g) {
            Some((_, points)) => points.push((mean.ln(), ratio)),
            None => levels.push((g, vec![(mean.ln(), ratio)])),
        }
    }
    let found = (!levels.is_empty()).then(|| {
        levels.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, points) in &mut levels {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points.dedup_by(|a, b| a.0 == b.0);
        }
        Arc::new(MeasuredGrouped {
            levels,
            source: format!(
                "measured grouped GEMMs of {hidden} x {expert_ffn} experts on the H200 (profiles/h200/kernels.json), the model's shape between measured points"
            ),
        })
    });
    cache.push(((hidden, expert_ffn), found.clone()));
    found
}

/// The lane groups of a step, each as its GPUs' rows per group side by side, for
/// `MoeLayerCost::lane_times_with`.
pub trait LaneRows {
    /// Adds lane group `i`'s groups to `tally`, one group of each GPU at a time (0 rows where
    /// a GPU has fewer groups).
    fn tally<L: Lanes>(&mut self, i: usize, tally: &mut LaneTally<L>);
}

/// `MoeLayerCost::lane_times_with`'s loop on the lanes `L`.
#[inline(always)]
fn lane_times_each<L: Lanes, R: LaneRows>(
    cost: &MoeLayerCost,
    rates: &[LaneRates],
    groups: usize,
    rows: &mut R,
    out: &mut Vec<LaneTimes>,
) {
    for (i, rates) in (0..groups).zip(rates.iter().cycle()) {
        let mut tally = LaneTally::<L>::new();
        rows.tally(i, &mut tally);
        out.push(cost.lane_times_in::<L>(rates, &tally.finish()));
    }
}

/// `lane_times_each` on AVX lanes, compiled with AVX enabled (call only where the CPU has it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn lane_times_avx<R: LaneRows>(
    cost: &MoeLayerCost,
    rates: &[LaneRates],
    groups: usize,
    rows: &mut R,
    out: &mut Vec<LaneTimes>,
) {
    lane_times_each::<crate::lanes::avx::Avx, R>(cost, rates, groups, rows, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200_mixtral(timing: Timing) -> MoeLayerCost {
        MoeLayerCost::new(
            &GpuSpec::by_name("H200").unwrap(),
            &MoeModelShape::mixtral_8x7b(),
            timing,
        )
    }

    #[test]
    fn a_gpu_runs_three_kernels_on_its_experts_rows() {
        // 2 experts of 4 rows: the kernel model's gate+up (4096 -> 28672), SwiGLU
        // (8 rows x 3 x 14336 x 2 B) and down (14336 -> 4096) kernels.
        let m = h200_mixtral(Timing::Graph);
        let c = m.gpu(ExpertRows::Counted(&[4, 0, 4]), SpeedFactors::NOMINAL);
        let sums = GroupSums::of_counts(&[4, 4]);
        let r = m.rates;
        let up = r.grouped_gemm(&sums, 4096, 28672, 2.0);
        let act = r.streaming(8.0 * 3.0 * 14336.0 * 2.0);
        let down = r.grouped_gemm(&sums, 14336, 4096, 2.0);
        assert_eq!(c.kernels, [up, act, down]);
        assert!((c.gemms_ns - (up.nanos + down.nanos)).abs() < 1e-9);
        assert!((c.nanos - (up.nanos + act.nanos + down.nanos)).abs() < 1e-9);
        assert_eq!((c.rows, c.experts), (8.0, 2.0));
        // Eager: each kernel at least the host launch.
        let e =
            h200_mixtral(Timing::Eager).gpu(ExpertRows::Counted(&[4, 4]), SpeedFactors::NOMINAL);
        let host = r.host_launch_ns;
        assert!(
            (e.nanos - (up.nanos.max(host) + act.nanos.max(host) + down.nanos.max(host))).abs()
                < 1e-9
        );
    }

    #[test]
    fn counted_lanes_price_each_gpu_as_gpu_does() {
        // Every GPU of a lane group gets the bits of `gpu` on its own counted rows, graph and
        // eager, slowed or not, small and large tiles, and an EP layer adds them as `add` does.
        let speeds = [
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.85, 0.4),
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.7, 1.0),
        ];
        for timing in [Timing::Graph, Timing::Eager] {
            for (gpu, shape) in [
                ("H100-SXM", MoeModelShape::mixtral_8x7b()),
                ("H200", MoeModelShape::mixtral_8x7b()),
                ("A100-80GB", MoeModelShape::qwen1_5_moe_a2_7b_nf4()),
            ] {
                let m = MoeLayerCost::new(&GpuSpec::by_name(gpu).unwrap(), &shape, timing);
                for seed in 0..300 {
                    let n = 1 + seed as usize % LANES;
                    let sets = crate::kernel::tests::count_sets(seed, n, 1 + seed as usize % 5);
                    let counts: Vec<&[u32]> = sets.iter().map(Vec::as_slice).collect();
                    let rates = m.rates.lanes(&speeds[..n]);
                    let LaneTimes { nanos, rows } = m.counted_lanes(&rates, &counts).unwrap();
                    // All lane groups at once: AVX lanes where this CPU has AVX.
                    let mut all = Vec::new();
                    let side_by_side: Vec<[u32; LANES]> =
                        (0..counts.iter().map(|c| c.len()).max().unwrap())
                            .map(|j| {
                                std::array::from_fn(|i| {
                                    counts.get(i).and_then(|c| c.get(j)).copied().unwrap_or(0)
                                })
                            })
                            .collect();
                    m.lane_times_all(&[rates], &[side_by_side.clone(), side_by_side], &mut all);
                    let bits =
                        |t: &LaneTimes| (t.nanos.map(f64::to_bits), t.rows.map(f64::to_bits));
                    for t in &all {
                        assert_eq!(bits(t), bits(&LaneTimes { nanos, rows }), "{gpu} {seed}");
                    }
                    let (mut lanes, mut alone) = (m.layer(n, None), m.layer(n, None));
                    let added = lanes.add_counted(&rates, &counts, &speeds[..n]);
                    for i in 0..n {
                        let c = m.gpu(ExpertRows::Counted(counts[i]), speeds[i]);
                        assert_eq!(nanos[i].to_bits(), c.nanos.to_bits(), "{gpu} {seed} {i}");
                        assert_eq!(rows[i].to_bits(), c.rows.to_bits());
                        let one = alone.add(ExpertRows::Counted(counts[i]), speeds[i]);
                        assert_eq!(added[i].to_bits(), one.to_bits());
                    }
                    assert_eq!(lanes.finish(), alone.finish());
                }
            }
        }
        // Measured grouped GEMMs: no lane path; `add_counted` prices as `add_gpus`.
        let (m, found) =
            h200_mixtral(Timing::Graph).with_measured_grouped(&GpuSpec::by_name("H200").unwrap());
        assert!(found);
        let rates = m.rates.lanes(&speeds);
        let counts: [&[u32]; 2] = [&[16, 3], &[0, 700]];
        assert!(m.counted_lanes(&rates, &counts).is_none());
        let mut layer = m.layer(2, None);
        let added = layer.add_counted(&rates, &counts, &speeds[..2]);
        for i in 0..2 {
            let c = m.gpu(ExpertRows::Counted(counts[i]), speeds[i]);
            assert_eq!(added[i].to_bits(), c.nanos.to_bits());
        }
    }

    #[test]
    fn expected_sums_are_add_of_each_group_bit_for_bit() {
        // Lanes of different lengths (side by side over the common length, then the longer
        // ones with the ended ones reading no load), one to `LANES` of them, with every kind
        // of load: none, negative, NaN, fractions, whole and fractional rows around the tile
        // heights, and beyond 2^32 rows.
        let special = [
            0.0,
            -0.0,
            -3.5,
            f32::NAN,
            1e-30,
            0.25,
            1.0,
            1.5,
            64.0,
            64.5,
            127.5,
            128.0,
            128.5,
            129.0,
            256.5,
            4095.5,
            4096.0,
            4096.5,
            1e6 + 0.5,
            4_294_967_296.0,
            1e19,
        ];
        let reference = |load: &[f32]| {
            let mut sums = GroupSums::default();
            for &l in load {
                if let Some((rows, p)) = expected_group(l) {
                    sums.add(rows, p);
                }
            }
            sums.to_terms().map(f64::to_bits)
        };
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..300 {
            let n = 1 + round % LANES;
            let layers: Vec<Vec<f32>> = (0..n)
                .map(|_| {
                    let len = (next() % 70) as usize;
                    (0..len)
                        .map(|_| match next() % 4 {
                            0 => special[(next() % special.len() as u64) as usize],
                            1 => (next() % 1000) as f32 / 1000.0,
                            2 => (next() % 5_000_000) as f32 / 1000.0,
                            _ => (next() % 300) as f32,
                        })
                        .collect()
                })
                .collect();
            let loads: Vec<&[f32]> = layers.iter().map(Vec::as_slice).collect();
            let lanes = expected_sums_lanes(&loads);
            for (i, load) in loads.iter().enumerate() {
                let want = reference(load);
                assert_eq!(lanes[i].to_terms().map(f64::to_bits), want, "round {round}");
                assert_eq!(expected_sums(load).to_terms().map(f64::to_bits), want);
                let portable = expected_sums_in::<F64x4>(&loads);
                assert_eq!(portable[i].to_terms().map(f64::to_bits), want);
            }
            assert!(
                lanes[n..]
                    .iter()
                    .all(|s| s.to_terms().map(f64::to_bits) == [0; 8])
            );
        }
    }

    #[test]
    fn expected_lanes_price_each_layer_as_gpu_does() {
        // Layers' expected loads priced `LANES` at a time get the bits of one `gpu` call each:
        // fractions below one row, zeros, whole rows, small and large tiles, graph and eager,
        // the kernel model alone and scaled to measured grouped GEMMs.
        let (measured, found) =
            h200_mixtral(Timing::Graph).with_measured_grouped(&GpuSpec::by_name("H200").unwrap());
        assert!(found);
        let models = [
            MoeLayerCost::new(
                &GpuSpec::by_name("L4").unwrap(),
                &MoeModelShape::qwen1_5_moe_a2_7b_nf4(),
                Timing::Eager,
            ),
            h200_mixtral(Timing::Graph),
            measured,
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for m in &models {
            for round in 0..200 {
                let n = 1 + round % LANES;
                let layers: Vec<Vec<f32>> = (0..n)
                    .map(|_| {
                        (0..60)
                            .map(|_| match next() % 5 {
                                0 => 0.0,
                                1 => (next() % 1000) as f32 / 1000.0,
                                2 => (next() % 300) as f32,
                                3 => (next() % 10_000_000) as f32 / 1000.0,
                                _ => (next() % 300_000) as f32 / 1000.0,
                            })
                            .collect()
                    })
                    .collect();
                let loads: Vec<&[f32]> = layers.iter().map(Vec::as_slice).collect();
                for load in &loads {
                    // The shortcut sums are `GroupSums::add` of each group in order.
                    let mut general = GroupSums::default();
                    ExpertRows::Expected(load).for_each_group(|rows, p| general.add(rows, p));
                    assert_eq!(ExpertRows::Expected(load).sums(), general);
                }
                let lanes = m.expected_lanes(&loads);
                for (i, load) in loads.iter().enumerate() {
                    let alone = m.gpu(ExpertRows::Expected(load), SpeedFactors::NOMINAL);
                    let bits = |c: &GpuExpertCost| {
                        [c.nanos, c.gemms_ns, c.rows, c.experts].map(f64::to_bits)
                    };
                    assert_eq!(bits(&lanes[i]), bits(&alone), "round {round} lane {i}");
                    assert_eq!(lanes[i], alone);
                }
                assert!(lanes[n..].iter().all(|c| *c == GpuExpertCost::default()));
            }
        }
    }

    #[test]
    fn every_way_of_giving_rows_agrees() {
        let m = h200_mixtral(Timing::Graph);
        let counted = m.gpu(ExpertRows::Counted(&[3, 3, 2]), SpeedFactors::NOMINAL);
        let even = m.gpu(
            ExpertRows::Even {
                tokens: 8,
                experts: 3,
            },
            SpeedFactors::NOMINAL,
        );
        let expected = m.gpu(
            ExpertRows::Expected(&[3.0, 3.0, 2.0]),
            SpeedFactors::NOMINAL,
        );
        let weighted = m.gpu(
            ExpertRows::Weighted(&[(1.0, 3.0), (1.0, 3.0), (1.0, 2.0)]),
            SpeedFactors::NOMINAL,
        );
        for c in [even, expected, weighted] {
            assert!((c.nanos - counted.nanos).abs() < 1e-6);
        }
        // More experts than tokens: only as many run as there are tokens.
        let few = m.gpu(
            ExpertRows::Even {
                tokens: 2,
                experts: 8,
            },
            SpeedFactors::NOMINAL,
        );
        assert!(
            (few.nanos
                - m.gpu(ExpertRows::Counted(&[1, 1]), SpeedFactors::NOMINAL)
                    .nanos)
                .abs()
                < 1e-6
        );
        // An expert expecting half a row runs with weight 1/2.
        let half = m.gpu(ExpertRows::Expected(&[0.5, 0.5]), SpeedFactors::NOMINAL);
        assert!((half.experts - 1.0).abs() < 1e-12 && (half.rows - 1.0).abs() < 1e-12);
        assert_eq!(
            m.gpu(ExpertRows::Counted(&[0, 0]), SpeedFactors::NOMINAL)
                .nanos,
            0.0
        );
    }

    #[test]
    fn decode_cost_grows_with_the_experts_touched() {
        // 16 rows over 1, 2, 4, 8 experts: each more expert streams its weights.
        let m = h200_mixtral(Timing::Graph);
        let mut last = 0.0;
        for experts in [1usize, 2, 4, 8] {
            let c = m.gpu(
                ExpertRows::Even {
                    tokens: 16,
                    experts,
                },
                SpeedFactors::NOMINAL,
            );
            assert!(
                c.nanos > last * 1.3,
                "{experts} experts: {} after {last}",
                c.nanos
            );
            last = c.nanos;
        }
    }

    #[test]
    fn an_expert_parallel_layer_waits_for_its_slowest_gpu_and_the_all_to_all() {
        let m = h200_mixtral(Timing::Graph);
        let light: &[u32] = &[512, 512];
        let heavy: &[u32] = &[2048, 1024];
        let link = LinkSpec::NVLINK4;
        let price = |a: &[u32], b: &[u32], speeds: [SpeedFactors; 2]| {
            let mut layer = m.layer(2, Some(link));
            layer.add(ExpertRows::Counted(a), speeds[0]);
            layer.add(ExpertRows::Counted(b), speeds[1]);
            layer.finish()
        };
        let nominal = [SpeedFactors::NOMINAL; 2];
        let ep = price(light, heavy, nominal);
        assert_eq!(ep.slowest_gpu, 1);
        assert_eq!(
            ep.compute_ns,
            m.gpu(ExpertRows::Counted(heavy), SpeedFactors::NOMINAL)
                .nanos
        );
        // All-to-all: 3072 rows x 1/2 x 4096 x 2 B each way over 360 GB/s, plus 5 us.
        let one_way = 3072.0 * 0.5 * 4096.0 * 2.0 / 360e9 * 1e9 + 5_000.0;
        assert!((ep.all_to_all_ns - 2.0 * one_way).abs() < 1e-6);
        // Lightening the light GPU changes nothing; a slow clock on it can make it the straggler.
        assert_eq!(price(&[64, 64], heavy, nominal).nanos, ep.nanos);
        let slow = [SpeedFactors::split(0.2, 0.0), SpeedFactors::NOMINAL];
        assert_eq!(price(light, heavy, slow).slowest_gpu, 0);
        // No link: no all-to-all.
        let mut alone = m.layer(2, None);
        alone.add(ExpertRows::Counted(light), SpeedFactors::NOMINAL);
        assert_eq!(alone.finish().all_to_all_ns, 0.0);
    }

    #[test]
    fn a_clock_slowdown_spares_memory_bound_decode() {
        let m = h200_mixtral(Timing::Graph);
        let slow = SpeedFactors::split(0.8, 0.0);
        let decode = m
            .gpu(ExpertRows::Counted(&[1, 1, 1, 1]), SpeedFactors::NOMINAL)
            .nanos;
        let slowed = m.gpu(ExpertRows::Counted(&[1, 1, 1, 1]), slow).nanos;
        assert!(slowed / decode < 1.01, "{slowed} vs {decode}");
        let prefill = m
            .gpu(ExpertRows::Counted(&[4096; 4]), SpeedFactors::NOMINAL)
            .nanos;
        let slowed = m.gpu(ExpertRows::Counted(&[4096; 4]), slow).nanos;
        assert!(slowed / prefill > 1.2, "{slowed} vs {prefill}");
    }

    #[test]
    fn a_measured_expert_curve_sums_the_experts() {
        // A measured expert: 3 launches of 5 us plus 10 us of work per 64-row tile.
        let launch = 5_000.0;
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
        let l4 = |split| {
            MoeLayerCost::new(
                &GpuSpec::by_name("L4").unwrap(),
                &MoeModelShape::qwen1_5_moe_a2_7b(),
                Timing::Eager,
            )
            .with_profile(&entry(split))
        };
        let even = ExpertRows::Even {
            tokens: 129,
            experts: 2,
        };
        let m = l4(None);
        let c = m.gpu(ExpertRows::Counted(&[64, 65, 0]), SpeedFactors::NOMINAL);
        assert!((c.nanos - (3.0 * launch + 10_000.0 + 20_000.0)).abs() < 1e-6);
        assert_eq!(m.gpu(even, SpeedFactors::NOMINAL).nanos, c.nanos);
        // Split by mechanism: a fixed part of 4 us + 1 ns per assignment, once per layer; each
        // expert's GEMM pair 9 us per 64-row tile.
        let split = crate::profile::MoeLayerSplit {
            fixed: CostCurve::new(vec![(1.0, 4_001.0), (1000.0, 5_000.0)]).unwrap(),
            expert_gemms: CostCurve::new(vec![
                (1.0, 9_000.0),
                (64.0, 9_000.0),
                (65.0, 18_000.0),
                (128.0, 18_000.0),
            ])
            .unwrap(),
        };
        let m = l4(Some(split));
        let c = m.gpu(ExpertRows::Counted(&[64, 65, 0]), SpeedFactors::NOMINAL);
        assert!(
            (c.nanos - (4_129.0 + 9_000.0 + 18_000.0)).abs() < 1e-6,
            "{c:?}"
        );
        assert_eq!(m.gpu(even, SpeedFactors::NOMINAL).nanos, c.nanos);
        let expected = m.gpu(
            ExpertRows::Expected(&[64.0, 65.0, 0.0]),
            SpeedFactors::NOMINAL,
        );
        assert!((expected.nanos - c.nanos).abs() < 1e-6);
        // Eight experts with one row each: the fixed part once, eight GEMM pairs.
        let eight = m
            .gpu(ExpertRows::Counted(&[1; 8]), SpeedFactors::NOMINAL)
            .nanos;
        assert!((eight - (4_008.0 + 8.0 * 9_000.0)).abs() < 1e-6);
        // A slower GPU slows only the GEMM pairs, not the fixed part.
        let slow = m
            .gpu(ExpertRows::Counted(&[1; 8]), SpeedFactors::split(0.5, 1.0))
            .nanos;
        assert!(
            (slow - (4_008.0 + 2.0 * 8.0 * 9_000.0)).abs() < 1e-6,
            "{slow}"
        );
    }

    /// A serial layer launch: without a split every expert pays the whole-layer curve; with
    /// one, the fixed part once (at the layer's assignments) plus each expert's GEMM pair, an
    /// expected expert weighted by its probability of being read.
    #[test]
    fn a_serial_layer_pays_its_fixed_part_once() {
        use crate::profile::MoeLayerSplit;
        let curve = |points: &[(f64, f64)]| CostCurve::new(points.to_vec()).unwrap();
        let mut entry = ExpertFfnCurve {
            hidden: 64,
            expert_ffn: 64,
            dtype: WeightDtype::Bf16,
            curve: curve(&[(1.0, 10.0), (64.0, 10.0)]),
            split: None,
        };
        let experts = [(1.0, 3.0), (1.0, 1.0), (0.5, 1.0), (0.0, 2.0)];
        assert_eq!(entry.serial_layer_ns(5.5, experts), 25.0);
        entry.split = Some(MoeLayerSplit {
            fixed: curve(&[(1.0, 4.0), (9.0, 6.0)]),
            expert_gemms: curve(&[(1.0, 6.0), (64.0, 6.0)]),
        });
        // fixed(5) = 5, then 1 + 1 + 0.5 GEMM pairs of 6.
        assert_eq!(entry.serial_layer_ns(5.0, experts), 5.0 + 15.0);
        assert_eq!(entry.serial_layer_ns(0.0, [(0.0, 1.0)]), 0.0);
    }

    #[test]
    fn measured_grouped_gemms_are_reproduced_where_measured() {
        // The H200's Mixtral points: the scaled model gives each measured time back, and the
        // model's shape in between.
        let gpu = GpuSpec::by_name("H200").unwrap();
        let (m, found) = h200_mixtral(Timing::Graph).with_measured_grouped(&gpu);
        assert!(found && m.measured_source().unwrap().contains("H200"));
        for p in KernelTimings::h200()
            .grouped
            .iter()
            .filter(|p| p.model == "mixtral-8x7b" && p.kind == "even")
        {
            let c = m.gpu(
                ExpertRows::Counted(&p.rows_per_expert),
                SpeedFactors::NOMINAL,
            );
            assert!(
                (c.gemms_ns / 1e3 / p.median_us - 1.0).abs() < 1e-9,
                "{:?}",
                p.rows_per_expert
            );
        }
        // Another GPU or shape: no measurements.
        let (_, found) = MoeLayerCost::new(
            &GpuSpec::by_name("H100-SXM").unwrap(),
            &MoeModelShape::mixtral_8x7b(),
            Timing::Graph,
        )
        .with_measured_grouped(&GpuSpec::by_name("H100-SXM").unwrap());
        assert!(!found);
        let (_, found) = MoeLayerCost::new(&gpu, &MoeModelShape::mixtral_8x22b(), Timing::Graph)
            .with_measured_grouped(&gpu);
        assert!(!found);
    }
}
