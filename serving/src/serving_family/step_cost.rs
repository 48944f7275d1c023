//! The serving family's step cost, behind the serving layer's `StepCost` seam: the dense part
//! (a dense model's whole step, an MoE model's attention, shared experts, router and head) on
//! the cost model's roofline kernel class by kernel class (`StepRoofline::parts` of
//! `StepRoofline::dense` / `moe_non_expert_tensor_parallel`: weight GEMMs on tile-padded rows,
//! the element-wise kernels by their bytes, attention, head, the tensor-parallel all-reduces),
//! each GPU at its own speed factors and the slowest setting the pace, or with
//! `replica.measured` from measured operations (`MeasuredDenseStep::parts`), or (a continuous MoE
//! replica with `replica.scheduler.profile` or `replica.measured`) from a profile's per-layer
//! and head curves (`curve_pricing::CurvePricing`); the host's time per
//! pass (`cost::host`, the scheduler kind's term) on top, and each step's `StepParts` in its
//! breakdown; then each MoE layer as `cost::moe_layer` prices it on the replica's expert layout
//! (`mapping::ExpertLayout`, the layer's own mapping): per expert-parallel group, each GPU's
//! hosted expert slots as one grouped GEMM at its own speed, the slowest GPU's plus the
//! all-to-all dispatch and combine, the layer waiting for its slowest group. The step's rows,
//! sequences and context split evenly over the data-parallel copies of the dense part. An MLA
//! model's dense part is `StepRoofline::mla_moe_non_expert` (latent cache held whole by every
//! rank). With adapters (`super::adapters`), the adapters' expert copies a step routes tokens to
//! are more weights in the grouped GEMM of the GPU hosting their base expert, and the rerouting
//! operator of every MoE layer adds the bytes it moves (`ReroutingCost`), or, on an MLA replica
//! priced from a measured profile, the profile's measured rerouting series
//! (`curve_pricing::MlaGemms::reroute`).

use super::adapters::rerouting_cost;
use super::config::{ServedModel, ServingScenario};
use super::curve_pricing::CurvePricing;
use super::dense_profile::DenseProfile;
use super::deployment::Deployment;
use super::expert_routing::ExpertRouter;
use super::mapping::ExpertLayout;
use super::rerouting::ReroutingCost;
use super::swap::SwapTransfer;
use crate::cost::curve::CostCurve;
use crate::cost::gpu::LinkSpec;
use crate::cost::host::HostOverhead;
use crate::cost::kernel::{LANES, LaneRates, LaneTally, Timing, WholeTally};
use crate::cost::lanes::Lanes;
use crate::cost::measured_steps::{MeasuredDenseStep, OpSources};
use crate::cost::moe_layer::{LaneRows, LaneTimes, MoeLayerCost, SpeedFactors};
use crate::cost::roofline::{
    DenseParts, ElementwiseKernels, OpTime, Roofline, RooflineParams, RowParts, StepRoofline,
    StepTokens, TensorParallel,
};
use crate::cost::shape::MoeModelShape;
use crate::policies::memory::InstancePlan;
use crate::serving::{
    CopyTokens, CostSource, RoutedTokens, StepBreakdown, StepCost, StepParts, StepTime, StepWork,
};
use crate::time::SimDuration;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

/// The routed experts of an MoE replica.
#[derive(Clone)]
struct MoePart {
    layer: MoeLayerCost,
    layout: Rc<ExpertLayout>,
    speeds: Vec<SpeedFactors>,
    link: LinkSpec,
    n_layers: usize,
    top_k: usize,
    /// Per copy of the expert-parallel group, its GPUs in lane groups (`LANES` GPUs priced
    /// together) and the rates of their speeds.
    lane_groups: Vec<Vec<(Range<usize>, LaneRates)>>,
    /// The GPUs and rates of every lane group of `lane_groups`, in order.
    lane_ranges: Vec<Range<usize>>,
    lane_rates: Vec<LaneRates>,
    /// Per GPU of a lane group: its tokens per expert slot, then per hosted adapter copy
    /// (scratch).
    gpu_tokens: [Vec<u32>; LANES],
    /// Per MoE layer and lane group, its GPUs' prices (scratch).
    lane_times: Vec<LaneTimes>,
    /// The lane groups' prices already computed, by their rows per slot (`LaneMemo`).
    lane_memo: LaneMemo,
    /// With adapters, the GPUs' prices already computed, by their groups and rows
    /// (`CountMemo`).
    count_memo: CountMemo,
    /// Per MoE layer, the adapter copies' tokens of the step being priced (`set_adapter_copies`).
    copies: Vec<Vec<CopyTokens>>,
    /// The rerouting operators, when the replica reroutes tokens to adapters.
    rerouting: Option<ReroutingCost>,
    /// With `rerouting`, one MoE layer's rerouting kernel as the replica's measured profile
    /// times it (rows -> ns), in place of `rerouting`'s bytes.
    measured_rerouting: Option<CostCurve>,
}

/// The tokens of each GPU in `lanes` on `layer` (its expert slots' from `per_expert`, then its
/// hosted adapter copies' from `copies`), into `tokens`; one slice per GPU.
fn gpu_counts<'a>(
    layout: &ExpertLayout,
    copies: &[CopyTokens],
    tokens: &'a mut [Vec<u32>; LANES],
    layer: usize,
    per_expert: &[u32],
    lanes: Range<usize>,
) -> [&'a [u32]; LANES] {
    for (tokens, g) in tokens.iter_mut().zip(lanes.clone()) {
        tokens.resize(layout.slots_per_gpu, 0);
        layout.gpu_tokens(layer, per_expert, g, tokens);
    }
    // Each copy's slots in turn, so that a GPU's copies keep their order.
    for c in copies {
        for (g, n) in layout.expert_hosts(layer, c.expert, c.tokens) {
            if lanes.contains(&g) {
                tokens[g - lanes.start].push(n);
            }
        }
    }
    std::array::from_fn(|i| tokens[i].as_slice())
}

/// A step's lane groups for `MoeLayerCost::lane_times_with`: every MoE layer's lane groups in
/// turn, each GPU's rows per expert slot (then per hosted adapter copy) side by side.
struct StepLaneRows<'a> {
    layout: &'a ExpertLayout,
    /// Per MoE layer, the adapter copies' tokens.
    copies: &'a [Vec<CopyTokens>],
    gpu_tokens: &'a mut [Vec<u32>; LANES],
    lane_ranges: &'a [Range<usize>],
    /// The step's tokens per expert, `layers x experts`.
    per_expert: &'a [u32],
    /// The step's tokens per slot of the layout, `layers x gpus x slots per GPU`, where the
    /// router gave them (`RoutedTokens::per_slot`), else empty.
    per_slot: &'a [u32],
    /// The layer and lane group of the next `tally` (called in order).
    layer: usize,
    group: usize,
}

impl LaneRows for StepLaneRows<'_> {
    #[inline(always)]
    fn tally<L: Lanes>(&mut self, _: usize, tally: &mut LaneTally<L>) {
        if self.group == self.lane_ranges.len() {
            (self.layer, self.group) = (self.layer + 1, 0);
        }
        let (layer, group) = (self.layer, self.group);
        self.group += 1;
        self.tally_at(layer, group, tally);
    }
}

impl<'a> StepLaneRows<'a> {
    /// A step's rows, read from its first MoE layer's first lane group.
    fn new(
        layout: &'a ExpertLayout,
        copies: &'a [Vec<CopyTokens>],
        gpu_tokens: &'a mut [Vec<u32>; LANES],
        lane_ranges: &'a [Range<usize>],
        per_expert: &'a [u32],
        per_slot: &'a [u32],
    ) -> Self {
        StepLaneRows {
            layout,
            copies,
            gpu_tokens,
            lane_ranges,
            per_expert,
            per_slot,
            layer: 0,
            group: 0,
        }
    }

    /// Adds lane group `group` of MoE layer `layer` to `tally`.
    #[inline(always)]
    fn tally_at<L: Lanes>(&mut self, layer: usize, group: usize, tally: &mut LaneTally<L>) {
        let lanes = self.lane_ranges[group].clone();
        let experts = self.layout.n_experts;
        let per_expert = &self.per_expert[layer * experts..][..experts];
        let copies = &self.copies[layer];
        if copies.is_empty() && !self.per_slot.is_empty() {
            // Each GPU's slots side by side in `per_slot`, summed in whole numbers (a layer's
            // slots sum to its assignments, below 2^30 where the router hands them on).
            let slots = self.layout.slots_per_gpu;
            let first = (layer * self.layout.gpus() + lanes.start) * slots;
            let gpus = lanes.len();
            let per_slot = &self.per_slot[first..][..gpus * slots];
            if slots <= MEMO_SLOTS {
                // Few slots (a study's EP layouts): each slot's lanes straight into the float
                // tally, the rows `slot_tokens_side_by_side` would gather, with no whole-number
                // tally to convert (it pays from a few slots per GPU on).
                for j in 0..slots {
                    tally.add(std::array::from_fn(|i| {
                        if i < gpus { per_slot[i * slots + j] } else { 0 }
                    }));
                }
                return;
            }
            let mut whole = WholeTally::default();
            if gpus == LANES {
                for j in 0..slots {
                    whole.add(std::array::from_fn(|i| per_slot[i * slots + j]));
                }
            } else {
                for j in 0..slots {
                    whole.add(std::array::from_fn(|i| {
                        per_slot.get(i * slots + j).copied().unwrap_or(0)
                    }));
                }
            }
            tally.add_whole(&whole);
            return;
        }
        if copies.is_empty() {
            // Each GPU's slots straight into the lanes.
            for slot in 0..self.layout.slots_per_gpu {
                tally.add(self.layout.slot_tokens_side_by_side(
                    layer,
                    per_expert,
                    lanes.clone(),
                    slot,
                ));
            }
            return;
        }
        let gpus = lanes.len();
        let counts = gpu_counts(
            self.layout,
            copies,
            self.gpu_tokens,
            layer,
            per_expert,
            lanes,
        );
        let longest = counts[..gpus].iter().map(|c| c.len()).max().unwrap_or(0);
        for j in 0..longest {
            tally.add(std::array::from_fn(|i| {
                counts[..gpus]
                    .get(i)
                    .and_then(|c| c.get(j))
                    .copied()
                    .unwrap_or(0)
            }));
        }
    }
}

/// A replica's lane prices by GPU: a table from (lane group, lane, the GPU's rows in each of its
/// expert slots) to that GPU's time and rows. The lanes of a group are priced independently:
/// each lane runs the same IEEE operations on its own rows at its own rates (`lane_times_with`
/// gives every GPU the bits `MoeLayerCost::gpu` gives it alone), so a group whose every lane is
/// in the table gets the bits `lane_times_with` would compute; a group with a lane missing is
/// priced whole and its lanes stored. One GPU's rows repeat far more often than a whole group's
/// (a decode step routes a few tokens per layer), so this hits where a table of whole groups
/// missed. Rows under `CAP` per slot only; where the hits stay rare (large prefills) the table
/// turns itself off after a trial, so it costs little there.
#[derive(Clone, Default)]
struct LaneMemo {
    slots: usize,
    /// Per (lane group, lane, rows of slot 0, rows of slot 1): the GPU's time and rows, `EMPTY`
    /// as the time where not priced yet.
    entries: Vec<[f64; 2]>,
    /// Lookups and hits so far; the trial ends after `TRIAL` lookups.
    lookups: u64,
    hits: u64,
    off: bool,
    /// Per lane group of the step the table misses: its rows, its place in the step's groups,
    /// its rates and its prices (scratch).
    keys: Vec<[u32; MEMO_ROWS]>,
    misses: Vec<usize>,
    miss_rates: Vec<LaneRates>,
    miss_times: Vec<LaneTimes>,
}

/// Expert slots per GPU the memo covers (`MEMO_ROWS` rows per lane group).
const MEMO_SLOTS: usize = 2;
const MEMO_ROWS: usize = MEMO_SLOTS * LANES;
/// Rows per slot the table holds (below); lane groups it holds.
const CAP: usize = 64;
const MEMO_GROUPS: usize = 4;
/// A NaN no pricing returns (theirs would carry the default payload): an entry not priced yet.
const EMPTY: u64 = 0x7FF8_0000_DEAD_BEEF;
/// Lookups before the memo decides whether it pays: it stays on with at least two thirds of
/// the lane groups found whole.
const TRIAL: u64 = 20_000;

impl LaneMemo {
    fn new(slots: usize) -> LaneMemo {
        LaneMemo {
            slots,
            off: slots > MEMO_SLOTS,
            ..LaneMemo::default()
        }
    }

    fn applies(&self, groups: usize) -> bool {
        !self.off && groups <= MEMO_GROUPS
    }

    /// `lane_times_with` of every MoE layer's lane groups in turn (the step's `per_expert`
    /// rows over `layout`, or its tokens per slot where the router kept them: `per_slot`, the
    /// same rows) into `out`, from the table where it holds the group's lanes: each group
    /// looked up as its rows are gathered, only a missed group's rows kept.
    #[allow(clippy::too_many_arguments)]
    fn price(
        &mut self,
        cost: &MoeLayerCost,
        layout: &ExpertLayout,
        lane_ranges: &[Range<usize>],
        lane_rates: &[LaneRates],
        n_layers: usize,
        per_expert: &[u32],
        per_slot: &[u32],
        out: &mut Vec<LaneTimes>,
    ) {
        debug_assert_eq!(lane_ranges.len(), lane_rates.len());
        self.begin(lane_rates.len(), out);
        let (experts, slots, gpus) = (layout.n_experts, self.slots, layout.gpus());
        if slots > 0 && per_slot.len() == n_layers * gpus * slots {
            // Each GPU's slots side by side in `per_slot`: lane `i`'s slot `j` is key entry
            // `j x LANES + i`, as `slot_tokens_side_by_side` gathers them.
            for layer in 0..n_layers {
                for (g, lanes) in lane_ranges.iter().enumerate() {
                    let first = (layer * gpus + lanes.start) * slots;
                    let rows = &per_slot[first..][..lanes.len() * slots];
                    let key = if slots == MEMO_SLOTS {
                        slot_key::<MEMO_SLOTS>(rows)
                    } else {
                        slot_key::<1>(rows)
                    };
                    self.look_up(g, key, lane_rates, out);
                }
            }
            self.price_misses(cost, lane_rates.len(), out);
            return;
        }
        for layer in 0..n_layers {
            let row = &per_expert[layer * experts..][..experts];
            for (g, lanes) in lane_ranges.iter().enumerate() {
                let mut key = [0u32; MEMO_ROWS];
                for slot in 0..self.slots {
                    let side: [u32; LANES] =
                        layout.slot_tokens_side_by_side(layer, row, lanes.clone(), slot);
                    key[slot * LANES..][..LANES].copy_from_slice(&side);
                }
                self.look_up(g, key, lane_rates, out);
            }
        }
        self.price_misses(cost, lane_rates.len(), out);
    }

    /// The table index of lane `lane` of group `g` with rows `key`, if the table holds them.
    #[inline]
    fn index(g: usize, lane: usize, key: &[u32; MEMO_ROWS]) -> Option<usize> {
        let (first, second) = (key[lane] as usize, key[LANES + lane] as usize);
        (first < CAP && second < CAP).then(|| ((g * LANES + lane) * CAP + first) * CAP + second)
    }

    /// Prices the lane groups with rows `keys` (group `i % lane_rates.len()` of each) into
    /// `out`, from the table where it holds every lane of the group.
    #[cfg(test)]
    fn price_keys(
        &mut self,
        cost: &MoeLayerCost,
        lane_rates: &[LaneRates],
        keys: &[[u32; MEMO_ROWS]],
        out: &mut Vec<LaneTimes>,
    ) {
        let groups = lane_rates.len();
        self.begin(groups, out);
        for (i, key) in keys.iter().enumerate() {
            self.look_up(i % groups, *key, lane_rates, out);
        }
        self.price_misses(cost, groups, out);
    }

    /// Starts a step's lookups of `groups` lane groups per layer into `out`.
    fn begin(&mut self, groups: usize, out: &mut Vec<LaneTimes>) {
        if self.entries.is_empty() {
            self.entries = vec![[f64::from_bits(EMPTY), 0.0]; groups * LANES * CAP * CAP];
        }
        out.clear();
        self.keys.clear();
        self.misses.clear();
        self.miss_rates.clear();
    }

    /// The next lane group, group `g` of its layer with rows `key`: its times from the table
    /// if it holds every lane, else a place in `out` and the rows kept for `price_misses`.
    #[inline(always)]
    fn look_up(
        &mut self,
        g: usize,
        key: [u32; MEMO_ROWS],
        lane_rates: &[LaneRates],
        out: &mut Vec<LaneTimes>,
    ) {
        if let Some(times) = lanes_held(&self.entries, |lane| Self::index(g, lane, &key)) {
            out.push(times);
            self.hits += 1;
        } else {
            self.misses.push(out.len());
            out.push(LaneTimes::default());
            self.miss_rates.push(lane_rates[g]);
            self.keys.push(key);
        }
    }

    /// Prices the step's missed lane groups (`out`'s entry `i` is group `i % groups` of its
    /// layer), stores their lanes, and ends the trial when it is due.
    fn price_misses(&mut self, cost: &MoeLayerCost, groups: usize, out: &mut [LaneTimes]) {
        self.lookups += out.len() as u64;
        if !self.misses.is_empty() {
            let mut rows = MissRows {
                slots: self.slots,
                keys: &self.keys,
            };
            cost.lane_times_with(
                &self.miss_rates,
                self.misses.len(),
                &mut rows,
                &mut self.miss_times,
            );
            for ((&i, times), key) in self.misses.iter().zip(&self.miss_times).zip(&self.keys) {
                out[i] = *times;
                let g = i % groups;
                hold_lanes(&mut self.entries, times, |lane| Self::index(g, lane, key));
            }
        }
        if self.lookups >= TRIAL && self.lookups - (out.len() as u64) < TRIAL {
            // The trial just ended: keep the table only where it hits often enough.
            if self.hits * 3 < self.lookups * 2 {
                self.off = true;
                self.entries = Vec::new();
            }
        }
    }
}

/// A lane group's times from a lane table (`LaneMemo`, `CountMemo`): each lane's entry at
/// `at(lane)`, or `None` where a lane's place is not in the table or not priced yet.
#[inline(always)]
fn lanes_held(entries: &[[f64; 2]], at: impl Fn(usize) -> Option<usize>) -> Option<LaneTimes> {
    let mut times = LaneTimes::default();
    for lane in 0..LANES {
        let [nanos, rows] = at(lane)
            .map(|at| entries[at])
            .filter(|entry| entry[0].to_bits() != EMPTY)?;
        (times.nanos[lane], times.rows[lane]) = (nanos, rows);
    }
    Some(times)
}

/// Stores a priced lane group's lanes in a lane table at `at(lane)`, where the table has a place.
#[inline(always)]
fn hold_lanes(entries: &mut [[f64; 2]], times: &LaneTimes, at: impl Fn(usize) -> Option<usize>) {
    for lane in 0..LANES {
        if let Some(at) = at(lane)
            && times.nanos[lane].to_bits() != EMPTY
        {
            entries[at] = [times.nanos[lane], times.rows[lane]];
        }
    }
}

/// A lane group's memo key from its GPUs' tokens per slot (`S` slots per GPU, GPU by GPU, at
/// most `LANES` GPUs): lane `i`'s slot `j` at `j x LANES + i`, 0 past the GPUs.
#[inline(always)]
fn slot_key<const S: usize>(rows: &[u32]) -> [u32; MEMO_ROWS] {
    let mut key = [0u32; MEMO_ROWS];
    for (lane, gpu_slots) in rows.chunks_exact(S).take(LANES).enumerate() {
        for (slot, &n) in gpu_slots.iter().enumerate() {
            key[slot * LANES + lane] = n;
        }
    }
    key
}

/// The missed lane groups' rows for `lane_times_with`, slot by slot as `StepLaneRows` adds them.
struct MissRows<'a> {
    slots: usize,
    /// The missed groups' rows, in the order of the misses.
    keys: &'a [[u32; MEMO_ROWS]],
}

impl LaneRows for MissRows<'_> {
    #[inline(always)]
    fn tally<L: Lanes>(&mut self, i: usize, tally: &mut LaneTally<L>) {
        let key = &self.keys[i];
        for slot in 0..self.slots {
            tally.add(std::array::from_fn(|lane| key[slot * LANES + lane]));
        }
    }
}

/// A replica serving adapters: its lane prices by GPU, a table from (lane group, lane, the
/// GPU's groups with rows, its rows) to that GPU's time and rows, where none of its groups has
/// more than 64 rows. Such a GPU's tally is a function of those two counts (each group is one
/// tile of either height and one cluster of each: `LaneTally::add`), and each lane is priced on
/// its own (`LaneMemo`), so a group whose every lane is in the table gets the bits
/// `lane_times_with` would compute; a group with a lane missing is priced whole from its rows
/// (`StepLaneRows`) and its lanes stored. The adapters' copies make a GPU's groups many
/// (`LaneMemo` covers two), but a decode step's rows per GPU stay few, so the pairs repeat.
/// Where the hits stay rare the table turns itself off after a trial, as `LaneMemo` does.
#[derive(Clone, Default)]
struct CountMemo {
    off: bool,
    /// Per (lane group, lane, rows, groups): the GPU's time and rows, `EMPTY` as the time where
    /// not priced yet.
    entries: Vec<[f64; 2]>,
    lookups: u64,
    hits: u64,
    /// Per GPU, its lane group and lane.
    lane_of: Vec<(usize, usize)>,
    /// On a plain layout (`ExpertLayout::plain`), per (layer, expert) the lane group and lane
    /// of the one slot holding it; empty otherwise.
    expert_lane: Vec<(u32, u32)>,
    expert_lane_tried: bool,
    /// Per lane group of the layer being looked up, its GPUs' counts (scratch).
    counts: Vec<LaneCounts>,
    /// Per lane group of the step the table misses: its layer and group, its lanes' table
    /// entries (where they fit), its place in the step's groups, its rates and its prices
    /// (scratch).
    missed: Vec<(usize, usize)>,
    keys: Vec<[Option<usize>; LANES]>,
    misses: Vec<usize>,
    miss_rates: Vec<LaneRates>,
    miss_times: Vec<LaneTimes>,
}

/// The GPUs of a lane group, side by side: each one's groups with rows, its rows, and whether
/// one of its groups has more than `SMALL_GROUP` rows.
#[derive(Clone, Copy, Default)]
struct LaneCounts {
    groups: [u32; LANES],
    rows: [u32; LANES],
    large: [bool; LANES],
}

impl LaneCounts {
    /// Adds one group of each GPU, `rows[i]` rows in lane `i` (0: none).
    #[inline(always)]
    fn add(&mut self, rows: [u32; LANES]) {
        for (i, &n) in rows.iter().enumerate() {
            self.add_one(i, n);
        }
    }

    /// Adds one group of `n` rows (0: none) to lane `lane`'s GPU.
    #[inline(always)]
    fn add_one(&mut self, lane: usize, n: u32) {
        self.groups[lane] += u32::from(n > 0);
        self.rows[lane] += n;
        self.large[lane] |= n > SMALL_GROUP;
    }
}

/// A group's rows past which its tiles are no longer one (`CountMemo`).
const SMALL_GROUP: u32 = 64;
/// Rows per GPU and groups per GPU the count table holds.
const COUNT_ROWS: usize = 512;
const COUNT_GROUPS: usize = 64;

impl CountMemo {
    /// The memo of a replica serving adapters (`on`), else one that never applies.
    fn new(on: bool) -> CountMemo {
        CountMemo {
            off: !on,
            ..CountMemo::default()
        }
    }

    /// The table index of lane `lane` of lane group `g` for a GPU with `groups` groups and
    /// `rows` rows, none large, if the table holds them.
    #[inline]
    fn index(g: usize, lane: usize, groups: u32, rows: u32, large: bool) -> Option<usize> {
        let (groups, rows) = (groups as usize, rows as usize);
        (!large && groups < COUNT_GROUPS && rows < COUNT_ROWS)
            .then(|| ((g * LANES + lane) * COUNT_ROWS + rows) * COUNT_GROUPS + groups)
    }

    /// `lane_times_with` of every MoE layer's lane groups in turn (`rows`: the step's rows,
    /// each layer's GPUs' base slots and adapter copies) into `out`, from the table where it
    /// holds every lane of the group.
    fn price(
        &mut self,
        cost: &MoeLayerCost,
        rows: &mut StepLaneRows<'_>,
        lane_rates: &[LaneRates],
        n_layers: usize,
        out: &mut Vec<LaneTimes>,
    ) {
        let layout = rows.layout;
        let groups = rows.lane_ranges.len();
        if self.entries.is_empty() {
            self.entries =
                vec![[f64::from_bits(EMPTY), 0.0]; groups * LANES * COUNT_ROWS * COUNT_GROUPS];
        }
        out.clear();
        self.missed.clear();
        self.keys.clear();
        self.misses.clear();
        self.miss_rates.clear();
        if self.lane_of.is_empty() {
            self.lane_of = vec![(0, 0); layout.gpus()];
            for (g, lanes) in rows.lane_ranges.iter().enumerate() {
                for (lane, gpu) in lanes.clone().enumerate() {
                    self.lane_of[gpu] = (g, lane);
                }
            }
        }
        self.counts.resize(groups, LaneCounts::default());
        let experts = layout.n_experts;
        if layout.plain() && !self.expert_lane_tried {
            // One slot per expert, its tokens the expert's: each expert's lane group and lane
            // (kept only where every expert has its slot).
            self.expert_lane_tried = true;
            let mut table = vec![(u32::MAX, 0); n_layers * experts];
            for layer in 0..n_layers {
                for (gpu, &(g, lane)) in self.lane_of.iter().enumerate() {
                    for e in layout.hosted(layer, gpu) {
                        table[layer * experts + e] = (g as u32, lane as u32);
                    }
                }
            }
            if table.iter().all(|&(g, _)| g != u32::MAX) {
                self.expert_lane = table;
            }
        }
        for layer in 0..n_layers {
            // Each GPU's groups and rows, lane group by lane group: its expert slots', then
            // its adapter copies'.
            let row = &rows.per_expert[layer * experts..][..experts];
            if self.expert_lane.is_empty() {
                for (counts, lanes) in self.counts.iter_mut().zip(rows.lane_ranges) {
                    *counts = LaneCounts::default();
                    if lanes.len() == LANES {
                        for slot in 0..layout.slots_per_gpu {
                            let side: [u32; LANES] =
                                layout.slot_tokens_side_by_side(layer, row, lanes.clone(), slot);
                            counts.add(side);
                        }
                    } else {
                        // A group short of GPUs: each one's slots in turn.
                        for (lane, gpu) in lanes.clone().enumerate() {
                            for n in layout.slot_tokens(layer, row, gpu) {
                                counts.add_one(lane, n);
                            }
                        }
                    }
                }
            } else {
                self.counts.fill(LaneCounts::default());
                let lanes = &self.expert_lane[layer * experts..][..experts];
                for (&n, &(g, lane)) in row.iter().zip(lanes) {
                    self.counts[g as usize].add_one(lane as usize, n);
                }
            }
            for c in &rows.copies[layer] {
                for (gpu, n) in layout.expert_hosts(layer, c.expert, c.tokens) {
                    let (g, lane) = self.lane_of[gpu];
                    self.counts[g].add_one(lane, n);
                }
            }
            for (g, counts) in self.counts.iter().enumerate() {
                // Lanes past the group's GPUs count nothing.
                let key: [Option<usize>; LANES] = std::array::from_fn(|lane| {
                    Self::index(
                        g,
                        lane,
                        counts.groups[lane],
                        counts.rows[lane],
                        counts.large[lane],
                    )
                });
                if let Some(times) = lanes_held(&self.entries, |lane| key[lane]) {
                    out.push(times);
                    self.hits += 1;
                } else {
                    self.misses.push(out.len());
                    out.push(LaneTimes::default());
                    self.missed.push((layer, g));
                    self.miss_rates.push(lane_rates[g]);
                    self.keys.push(key);
                }
            }
        }
        self.lookups += out.len() as u64;
        if !self.misses.is_empty() {
            let mut missed = MissedGroups {
                rows,
                missed: &self.missed,
            };
            cost.lane_times_with(
                &self.miss_rates,
                self.misses.len(),
                &mut missed,
                &mut self.miss_times,
            );
            for ((&i, times), key) in self.misses.iter().zip(&self.miss_times).zip(&self.keys) {
                out[i] = *times;
                hold_lanes(&mut self.entries, times, |lane| key[lane]);
            }
        }
        if self.lookups >= TRIAL && self.lookups - (out.len() as u64) < TRIAL {
            // The trial just ended: keep the table only where it hits often enough.
            if self.hits * 3 < self.lookups * 2 {
                self.off = true;
                self.entries = Vec::new();
            }
        }
    }
}

/// The lane groups a `CountMemo` missed, each tallied from the step's rows as `StepLaneRows`
/// tallies it in the step's order.
struct MissedGroups<'a, 'b> {
    rows: &'a mut StepLaneRows<'b>,
    /// The missed groups' (layer, lane group), in the order of the misses.
    missed: &'a [(usize, usize)],
}

impl LaneRows for MissedGroups<'_, '_> {
    #[inline(always)]
    fn tally<L: Lanes>(&mut self, i: usize, tally: &mut LaneTally<L>) {
        let (layer, group) = self.missed[i];
        self.rows.tally_at(layer, group, tally);
    }
}

/// One `StepRoofline`'s row and head parts (`row_parts`, `head_of`) already computed, by the
/// step's rows and by its sequences scored: a function of those counts alone, so a kept part
/// is the bits a new computation would give. A continuous batch's steps repeat their counts
/// (a decode step's rows are its sequences), while the context, which moves every step, is
/// priced afresh (`parts_with`).
#[derive(Clone, Default)]
struct PartsMemo {
    rows: Vec<Option<RowParts>>,
    heads: Vec<Option<OpTime>>,
}

/// Counts past which `PartsMemo` computes instead of keeping (a table of 40 bytes a count).
const MEMO_COUNTS: u64 = 1 << 16;

impl PartsMemo {
    fn parts(
        &mut self,
        dense: &StepRoofline,
        work: &StepTokens,
        elementwise: &ElementwiseKernels,
    ) -> DenseParts {
        let rows = kept(&mut self.rows, work.rows, |n| dense.row_parts(n, elementwise));
        let head = kept(&mut self.heads, work.sequences, |n| dense.head_of(n));
        dense.parts_with(work, &rows, head)
    }
}

/// `table[n]`, computed by `compute` the first time (`n` past `MEMO_COUNTS`: every time).
fn kept<T: Copy>(table: &mut Vec<Option<T>>, n: u64, compute: impl FnOnce(u64) -> T) -> T {
    if n >= MEMO_COUNTS {
        return compute(n);
    }
    let i = n as usize;
    if i >= table.len() {
        table.resize(i + 1, None);
    }
    *table[i].get_or_insert_with(|| compute(n))
}

/// A replica's step cost.
#[derive(Clone)]
pub struct ReplicaStepCost {
    /// The dense part at each distinct speed of the replica's GPUs (its roofline scaled by the
    /// speed factors), priced once per step each.
    dense: Vec<StepRoofline>,
    /// Per entry of `dense`, its parts kept by rows and sequences.
    parts_memo: Vec<PartsMemo>,
    /// The element-wise kernels of one layer of the dense part on one GPU.
    elementwise: ElementwiseKernels,
    /// With `replica.measured`, the dense step from measured operations instead of `dense`.
    measured: Option<Arc<MeasuredDenseStep>>,
    /// A continuous MoE replica priced from a profile's curves instead of `dense`
    /// (`curve_pricing`), at each distinct speed of `dense_speeds`.
    curves: Option<Arc<CurvePricing>>,
    /// A dense replica priced from a measured dense-decode profile instead of `dense`.
    dense_profile: Option<Arc<DenseProfile>>,
    /// The distinct speeds of the replica's GPUs, in the order of `dense`.
    dense_speeds: Vec<SpeedFactors>,
    /// The MoE layers the curves price (the model's layers).
    curve_layers: usize,
    tensor_parallel: usize,
    /// The host's time per step.
    host: HostOverhead,
    /// With `replica.timing = "eager"`, the host's launch of one kernel, ns.
    eager_launch_ns: Option<f64>,
    /// The dense part's price at each distinct speed of the pass being priced (scratch).
    prices: Vec<PassTime>,
    /// Which of `dense` each GPU runs at.
    dense_of_gpu: Vec<usize>,
    data_parallel: u64,
    moe: Option<MoePart>,
    /// FLOPs of one token in one routed expert.
    expert_flops_per_token: f64,
    /// Swap preemption's copies before a step.
    swap: SwapTransfer,
    /// A step's busy times given back (`reuse`), for the next step (scratch).
    spare_busy: Vec<f64>,
}

/// The routed experts' layer cost of `scenario`'s GPU: by default CUDA graphs capture the
/// grouped MoE kernels with the rest of the step, so each costs its GPU-side time (kernel floor
/// included) and no host launch (the host overhead covers the graph replay); with
/// `replica.timing = "eager"` each costs the longer of the host's launch and that time. A
/// replica priced from a measured profile takes its expert entry instead
/// (`CurvePricing::expert_layer`).
pub fn moe_layer_cost(scenario: &ServingScenario, shape: &MoeModelShape) -> MoeLayerCost {
    let layer = MoeLayerCost::new(&scenario.replica.gpu, shape, scenario.replica.timing);
    match &scenario.replica.curves {
        Some(curves) => curves.expert_layer(layer, shape),
        None => layer,
    }
}

/// Kernels per layer of an MLA model outside its routed experts launched eagerly, each one
/// launch (docs/cost-model.md, the MLA-MoE model's "5 launches per layer and 3 for the head").
const MLA_KERNELS_PER_LAYER: u32 = 5;

/// `value / parts`, rounded up; `value` itself for one part (no division: most replicas run
/// one data-parallel copy, and a step divides three to six counts by it).
fn share(value: u64, parts: u64) -> u64 {
    if parts == 1 {
        value
    } else {
        value.div_ceil(parts)
    }
}

impl ReplicaStepCost {
    /// The step cost of `scenario`'s replica on `deployment`, its experts (MoE only) laid out
    /// as `layout` says (with adapters, `plan` is the memory manager's plan of the replica:
    /// whether it reroutes).
    pub fn new(
        scenario: &ServingScenario,
        deployment: &Deployment,
        layout: Option<Rc<ExpertLayout>>,
        plan: Option<&InstancePlan>,
    ) -> ReplicaStepCost {
        let r = &scenario.replica;
        let parallel = TensorParallel {
            degree: r.tensor_parallel as u32,
            link: r.link,
        };
        let nominal = Roofline::of(&r.gpu);
        let eager = r.timing == Timing::Eager;
        let eager_counts = RooflineParams::default();
        let mut distinct: Vec<SpeedFactors> = Vec::new();
        let dense_of_gpu = r
            .speeds
            .iter()
            .map(|speed| {
                distinct.iter().position(|s| s == speed).unwrap_or_else(|| {
                    distinct.push(*speed);
                    distinct.len() - 1
                })
            })
            .collect();
        let dense: Vec<StepRoofline> = distinct
            .iter()
            .map(|&speed| {
                let roofline = nominal.scaled(speed);
                match &scenario.model {
                    ServedModel::Dense(shape) => {
                        StepRoofline::dense(shape, roofline, parallel, 0.0)
                    }
                    ServedModel::Moe(shape) if eager => StepRoofline {
                        kernels_per_layer: eager_counts.kernels_per_non_expert_layer,
                        kernels_head: eager_counts.kernels_per_head,
                        ..StepRoofline::moe_non_expert_tensor_parallel(
                            shape, roofline, parallel, 2.0, 0.0,
                        )
                    },
                    ServedModel::Moe(shape) => StepRoofline::moe_non_expert_tensor_parallel(
                        shape, roofline, parallel, 2.0, 0.0,
                    ),
                    // One tensor-parallel group (the rows split over the data-parallel copies
                    // as for the other models), its kernels in the step's CUDA graph.
                    ServedModel::Mla(shape) => StepRoofline {
                        kernels_head: if eager { 3 } else { 0 },
                        host_overhead_ns: 0.0,
                        all_reduce: (parallel.degree > 1)
                            .then_some((shape.hidden as f64 * 2.0, parallel)),
                        ..StepRoofline::mla_moe_non_expert(
                            shape,
                            roofline,
                            parallel.degree.into(),
                            parallel.degree.into(),
                            if eager { MLA_KERNELS_PER_LAYER } else { 0 },
                        )
                    },
                }
            })
            .collect();
        let (moe, expert_flops_per_token) = match (scenario.model.experts(), layout) {
            (Some(shape), Some(layout)) => {
                let layer = moe_layer_cost(scenario, &shape);
                let (rerouting, measured_rerouting) =
                    match (&scenario.model, &scenario.adapters, plan) {
                        (ServedModel::Mla(mla), Some(adapters), Some(plan)) => {
                            let cost = rerouting_cost(mla, adapters, plan, r);
                            let measured = r
                                .curves
                                .as_ref()
                                .and_then(|c| c.mla.as_ref())
                                .filter(|_| cost.is_some())
                                .and_then(|m| m.reroute(adapters.rerouting, plan.adapters.len()))
                                .cloned();
                            (cost, measured)
                        }
                        _ => (None, None),
                    };
                let flops = layer.expert_flops_per_token;
                let ep = layout.expert_parallel;
                let lane_groups: Vec<Vec<_>> = (0..layout.copies)
                    .map(|copy| {
                        let gpus = copy * ep..(copy + 1) * ep;
                        gpus.clone()
                            .step_by(LANES)
                            .map(|first| {
                                let lanes = first..(first + LANES).min(gpus.end);
                                let rates = layer.rates.lanes(&r.speeds[lanes.clone()]);
                                (lanes, rates)
                            })
                            .collect()
                    })
                    .collect();
                let lane_ranges = lane_groups
                    .iter()
                    .flatten()
                    .map(|(g, _)| g.clone())
                    .collect();
                let lane_rates = lane_groups.iter().flatten().map(|(_, r)| *r).collect();
                (
                    Some(MoePart {
                        layer,
                        lane_groups,
                        lane_ranges,
                        lane_rates,
                        lane_times: Vec::new(),
                        lane_memo: LaneMemo::new(layout.slots_per_gpu),
                        count_memo: CountMemo::new(scenario.adapters.is_some()),
                        gpu_tokens: std::array::from_fn(|_| vec![0; layout.slots_per_gpu]),
                        layout,
                        speeds: r.speeds.clone(),
                        link: r.link,
                        n_layers: shape.n_layers,
                        top_k: shape.top_k,
                        copies: vec![Vec::new(); shape.n_layers],
                        rerouting,
                        measured_rerouting,
                    }),
                    flops,
                )
            }
            _ => (None, 0.0),
        };
        let degree = parallel.degree;
        let elementwise = match &scenario.model {
            ServedModel::Dense(shape) => ElementwiseKernels::dense(shape, degree),
            ServedModel::Moe(shape) => ElementwiseKernels::moe(shape, degree),
            ServedModel::Mla(shape) => ElementwiseKernels::moe(&shape.moe_geometry(), degree),
        };
        ReplicaStepCost {
            parts_memo: vec![PartsMemo::default(); dense.len()],
            dense,
            elementwise,
            measured: r.measured.clone(),
            curves: r.curves.clone(),
            dense_profile: r.dense_profile.clone(),
            dense_speeds: distinct,
            curve_layers: scenario.model.experts().map_or(0, |s| s.n_layers),
            tensor_parallel: r.tensor_parallel,
            host: r.host,
            eager_launch_ns: eager.then_some(nominal.launch_ns),
            prices: Vec::new(),
            dense_of_gpu,
            data_parallel: deployment.data_parallel as u64,
            moe,
            expert_flops_per_token,
            swap: SwapTransfer::new(&r.gpu, deployment),
            spare_busy: Vec::new(),
        }
    }

    /// Takes back a priced step's `per_gpu_busy_ns` once read, for the next `price` to fill.
    pub fn reuse(&mut self, busy: Vec<f64>) {
        self.spare_busy = busy;
    }

    /// Takes the adapter copies' tokens of the step about to be priced (per MoE layer, from
    /// `AdapterRouter::route`, carried by the step's `RoutedTokens::copies`).
    fn set_adapter_copies(&mut self, copies: &[Vec<CopyTokens>]) {
        if let Some(moe) = &mut self.moe {
            for (mine, given) in moe.copies.iter_mut().zip(copies) {
                mine.clear();
                mine.extend_from_slice(given);
            }
        }
    }

    /// What one data-parallel copy of the dense part computes in `work`: its share of the rows,
    /// of the sequences the head scores (those emitting a token), of the context and of the
    /// prompts' causal attention.
    fn dense_tokens(&self, work: &StepWork<'_>) -> StepTokens {
        // Counted as the replica scheduled the batch (the sum of integer squares is exact in
        // any order). Work given by its counts alone (no batch: a curve's or a planner's step)
        // is taken at those counts.
        let (emitting, prefill_square) = (work.emitting, work.prefill_square);
        debug_assert!(
            work.batch.is_empty()
                || emitting == work.batch.iter().filter(|s| s.step_emits()).count() as u64
        );
        debug_assert!(
            work.batch.is_empty()
                || prefill_square
                    == work
                        .batch
                        .iter()
                        .map(|s| f64::from(s.step_prefill()).powi(2))
                        .sum::<f64>()
        );
        let dp = self.data_parallel;
        StepTokens {
            rows: share(work.prefill_tokens + work.decode_tokens, dp),
            sequences: share(emitting, dp),
            context_tokens: share(work.context_tokens, dp),
            prefill_square: prefill_square / dp as f64,
        }
    }

    /// Each GPU's model FLOPs in `work` (the dense part's useful FLOPs, no tile padding, and
    /// its routed tokens' expert FLOPs), into `out` (one per GPU).
    pub fn model_flops(&self, work: &StepWork<'_>, out: &mut [f64]) {
        out.fill(0.0);
        self.add_pass_flops(&self.dense_tokens(work), work.routed, out);
    }

    /// Adds one pass's model FLOPs per GPU into `out`.
    fn add_pass_flops(
        &self,
        tokens: &StepTokens,
        routed: Option<RoutedTokens<'_>>,
        out: &mut [f64],
    ) {
        let dense = self.dense[0].model_flops(tokens);
        out.iter_mut().for_each(|o| *o += dense);
        if let Some(routed) = routed {
            let gpus = out.len();
            for row in routed.per_gpu.chunks_exact(gpus) {
                for (o, &n) in out.iter_mut().zip(row) {
                    *o += f64::from(n) * self.expert_flops_per_token;
                }
            }
        }
    }

    /// A decode step of `sequences` sequences holding `context` tokens each, their routed
    /// tokens spread over the experts as evenly as whole tokens allow (every layer alike, each
    /// layer's tokens per GPU as the replica's layout places them): the profile whose duration
    /// is Chimera's `decode_ms_per_token` (the router's activity monitor).
    pub fn decode_profile(&mut self, sequences: u64, context: u64) -> StepTime {
        let tokens = self.decode_tokens(sequences, context);
        self.evenly_routed(&tokens, 0, sequences, sequences)
    }

    /// A decode step of `sequences` sequences holding `context` tokens each, its routed tokens
    /// as `routed` gives them (an `ExpertRouter`'s step): what `price` makes of such a step, for
    /// the step-pricing bench.
    pub fn decode_routed(
        &mut self,
        sequences: u64,
        context: u64,
        routed: RoutedTokens<'_>,
    ) -> StepTime {
        let tokens = self.decode_tokens(sequences, context);
        let mut busy = vec![0.0; self.dense_of_gpu.len()];
        let pass = self.pass(&tokens, 0, sequences, Some(routed), &mut busy);
        pass.with_host(self.host.nanos(sequences)).step_time(busy)
    }

    /// What one data-parallel copy of the dense part computes in a decode step of `sequences`
    /// sequences holding `context` tokens each.
    fn decode_tokens(&self, sequences: u64, context: u64) -> StepTokens {
        let dp = self.data_parallel;
        StepTokens {
            rows: share(sequences, dp),
            sequences: share(sequences, dp),
            context_tokens: share(sequences * context, dp),
            prefill_square: 0.0,
        }
    }

    /// The prefill step of one prompt of `tokens` tokens (its first token scored), routed as
    /// [`Self::decode_profile`] routes.
    pub fn prefill_profile(&mut self, tokens: u64) -> StepTime {
        let dp = self.data_parallel;
        let work = StepTokens {
            rows: share(tokens, dp),
            sequences: 1,
            context_tokens: share(tokens, dp),
            prefill_square: (tokens as f64).powi(2) / dp as f64,
        };
        self.evenly_routed(&work, tokens, tokens, 1)
    }

    /// One step of `tokens` (`rows` rows in the whole replica, `prefill_rows` of them prompt
    /// rows, `sequences` sequences), its routed tokens spread evenly over the experts.
    fn evenly_routed(
        &mut self,
        tokens: &StepTokens,
        prefill_rows: u64,
        rows: u64,
        sequences: u64,
    ) -> StepTime {
        let spread = self.moe.as_ref().map(|moe| {
            let (experts, gpus, layers) = (moe.layout.n_experts, moe.layout.gpus(), moe.n_layers);
            let assignments = rows * moe.top_k as u64;
            let layer: Vec<u32> = (0..experts as u64)
                .map(|e| {
                    (assignments / experts as u64 + u64::from(e < assignments % experts as u64))
                        as u32
                })
                .collect();
            let mut slots = vec![0u32; moe.layout.slots_per_gpu];
            let mut per_gpu = Vec::with_capacity(layers * gpus);
            for l in 0..layers {
                for g in 0..gpus {
                    moe.layout.gpu_tokens(l, &layer, g, &mut slots);
                    per_gpu.push(slots.iter().sum::<u32>());
                }
            }
            (layers, layer.repeat(layers), per_gpu)
        });
        let routed = spread
            .as_ref()
            .map(|(layers, per_expert, per_gpu)| RoutedTokens {
                layers: *layers,
                per_expert,
                per_gpu,
                per_slot: &[],
                copies: &[],
            });
        let mut busy = vec![0.0; self.dense_of_gpu.len()];
        let pass = self.pass(tokens, prefill_rows, rows, routed, &mut busy);
        pass.with_host(self.host.nanos(sequences)).step_time(busy)
    }

    /// One forward pass of `rows` token rows (the whole replica's, `prefill_rows` of them
    /// prompt rows): the dense part on `tokens` (the slowest GPU's pace), then each MoE layer on
    /// `routed` (and, with adapters, the rerouting of the rows); adds each GPU's busy time into
    /// `busy`.
    fn pass(
        &mut self,
        tokens: &StepTokens,
        prefill_rows: u64,
        rows: u64,
        routed: Option<RoutedTokens<'_>>,
        busy: &mut [f64],
    ) -> PassTime {
        let prices = &mut self.prices;
        prices.clear();
        match (&self.dense_profile, &self.measured, &self.curves) {
            (Some(profile), _, _) => {
                prices.push(PassTime {
                    nanos: profile.pass_ns(tokens),
                    source: Some(CostSource::Measured),
                    ..PassTime::default()
                });
            }
            (None, _, Some(curves)) => {
                // One data-parallel copy's prompt and decoding rows, each GPU its share.
                let dp = self.data_parallel;
                let prefill = share(prefill_rows, dp);
                let decode = share(rows - prefill_rows, dp);
                for &speed in &self.dense_speeds {
                    let own = curves.gpu_nanos(
                        prefill,
                        decode,
                        tokens.sequences,
                        self.curve_layers,
                        self.tensor_parallel,
                        speed,
                    );
                    prices.push(PassTime {
                        nanos: own.nanos(),
                        parts: StepParts {
                            linear_ns: own.layers_ns,
                            head_ns: own.head_ns,
                            ..StepParts::default()
                        },
                        op_sources: curves.op_sources(),
                        source: Some(curves.source()),
                        ..PassTime::default()
                    });
                }
            }
            (None, Some(measured), None) => {
                let (parts, sources) = measured.parts(tokens);
                prices.push(PassTime {
                    nanos: parts.nanos(),
                    compute_ns: parts.attention.compute_ns + parts.head.compute_ns,
                    memory_ns: parts.attention.memory_ns + parts.head.memory_ns,
                    communication_ns: parts.communication_ns,
                    parts: StepParts {
                        linear_ns: parts.linear_ns,
                        elementwise_ns: parts.elementwise_ns,
                        attention_ns: parts.attention.nanos,
                        head_ns: parts.head.nanos,
                        host_ns: 0.0,
                    },
                    op_sources: Some(sources),
                    ..PassTime::default()
                });
            }
            (None, None, None) => {
                for (d, memo) in self.dense.iter().zip(&mut self.parts_memo) {
                    let parts = memo.parts(d, tokens, &self.elementwise);
                    // Eager launches: what the host's launches keep the GPU waiting.
                    let wait = self.eager_launch_ns.map_or(0.0, |launch| {
                        d.eager_wait_ns(tokens, &self.elementwise, launch)
                    });
                    prices.push(PassTime {
                        nanos: parts.nanos() + wait,
                        compute_ns: parts.linear.compute_ns
                            + parts.attention.compute_ns
                            + parts.head.compute_ns,
                        memory_ns: parts.linear.memory_ns
                            + parts.attention.memory_ns
                            + parts.head.memory_ns,
                        communication_ns: parts.communication_ns,
                        parts: StepParts {
                            linear_ns: parts.linear.nanos,
                            elementwise_ns: parts.elementwise_ns,
                            attention_ns: parts.attention.nanos,
                            head_ns: parts.head.nanos,
                            host_ns: wait,
                        },
                        ..PassTime::default()
                    });
                }
            }
        }
        // The GPU is busy for the pass but its communication and its wait for launches.
        for (b, &d) in busy.iter_mut().zip(&self.dense_of_gpu) {
            let d = d.min(prices.len() - 1);
            *b += prices[d].nanos - prices[d].communication_ns - prices[d].parts.host_ns;
        }
        let pace = prices
            .iter()
            .copied()
            .reduce(|a, b| if b.nanos > a.nanos { b } else { a })
            .expect("a replica has at least one GPU");
        let mut moe_ns = 0.0;
        let mut communication_ns = pace.communication_ns;
        if let Some(moe) = &mut self.moe {
            let routed = routed.expect("an MoE step carries its routed tokens per expert and GPU");
            let experts = moe.layout.n_experts;
            let ep = moe.layout.expert_parallel;
            // The kernel model alone: every layer's GPUs summed first, then priced lane group by
            // lane group (independent, so one group's divisions and roots overlap the next's),
            // then each layer waits for its slowest GPU.
            let in_lanes = moe.layer.prices_lanes();
            if in_lanes {
                let n_layers = moe.n_layers;
                let MoePart {
                    layer: cost,
                    layout,
                    copies,
                    gpu_tokens,
                    lane_ranges,
                    lane_rates,
                    lane_times,
                    lane_memo,
                    count_memo,
                    ..
                } = &mut *moe;
                if lane_memo.applies(lane_ranges.len()) && copies.iter().all(Vec::is_empty) {
                    lane_memo.price(
                        cost,
                        layout,
                        lane_ranges,
                        lane_rates,
                        n_layers,
                        routed.per_expert,
                        routed.per_slot,
                        lane_times,
                    );
                } else {
                    let mut rows = StepLaneRows::new(
                        layout,
                        copies,
                        gpu_tokens,
                        lane_ranges,
                        routed.per_expert,
                        routed.per_slot,
                    );
                    if !count_memo.off && routed.per_slot.is_empty() {
                        count_memo.price(cost, &mut rows, lane_rates, n_layers, lane_times);
                    } else {
                        cost.lane_times_with(
                            lane_rates,
                            n_layers * lane_ranges.len(),
                            &mut rows,
                            lane_times,
                        );
                    }
                }
            }
            let mut priced = moe.lane_times.iter();
            for layer in 0..moe.n_layers {
                let per_expert = &routed.per_expert[layer * experts..][..experts];
                let mut layer_ns = 0.0f64;
                let mut layer_a2a = 0.0f64;
                for lane_groups in &moe.lane_groups {
                    let mut group = moe.layer.layer(ep, Some(moe.link));
                    for (lanes, rates) in lane_groups {
                        let times = if in_lanes {
                            let times = priced.next().expect("every lane group priced");
                            group.add_lane_times(times, lanes.len())
                        } else {
                            let counts = gpu_counts(
                                &moe.layout,
                                &moe.copies[layer],
                                &mut moe.gpu_tokens,
                                layer,
                                per_expert,
                                lanes.clone(),
                            );
                            group.add_counted(
                                rates,
                                &counts[..lanes.len()],
                                &moe.speeds[lanes.clone()],
                            )
                        };
                        for (b, t) in busy[lanes.clone()].iter_mut().zip(times) {
                            *b += t;
                        }
                    }
                    let cost = group.finish();
                    if cost.nanos > layer_ns {
                        layer_ns = cost.nanos;
                        layer_a2a = cost.all_to_all_ns;
                    }
                }
                moe_ns += layer_ns;
                communication_ns += layer_a2a;
            }
            if let Some(rerouting) = &moe.rerouting {
                moe_ns += match (&moe.measured_rerouting, self.eager_launch_ns) {
                    (Some(measured), _) if rows > 0 => {
                        moe.n_layers as f64 * measured.at(rows as f64)
                    }
                    (Some(_), _) => 0.0,
                    (None, Some(launch)) => rerouting.eager_ns(rows, launch),
                    (None, None) => rerouting.memory_ns(rows),
                };
            }
        }
        PassTime {
            nanos: pace.nanos + moe_ns,
            communication_ns,
            moe_ns,
            ..pace
        }
    }

    /// A static batch run as one step (`StepWork::decode_iterations` > 0 or not): its prefill
    /// pass over the whole prompts, then one decode pass per iteration, every sequence padded
    /// along (a token each; at iteration `i` a sequence's context is its prompt + `i`). An MoE
    /// replica's passes are each routed by `router` (a topical router: the prefill's tokens per
    /// topic, then each decode pass's sequences per topic). Each GPU's model FLOPs go into
    /// `flops`.
    pub fn price_static(
        &mut self,
        work: &StepWork<'_>,
        mut router: Option<&mut ExpertRouter>,
        flops: &mut [f64],
    ) -> StepTime {
        let (mut prefill_topics, mut decode_topics) = (Vec::new(), Vec::new());
        if let Some(router) = router.as_ref().filter(|r| r.topical()) {
            prefill_topics = vec![0u64; router.topic_tokens.len()];
            decode_topics = prefill_topics.clone();
            for seq in work.batch.iter().filter(|s| s.scheduled() > 0) {
                let topic = seq.request.topic as usize;
                prefill_topics[topic] += u64::from(seq.step_prefill());
                decode_topics[topic] += 1;
            }
        }
        let dp = self.data_parallel;
        let (mut prompts, mut prefill_square) = (0u64, 0.0f64);
        for s in work.batch.iter().filter(|s| s.scheduled() > 0) {
            prompts += u64::from(s.step_prefill());
            prefill_square += f64::from(s.step_prefill()).powi(2);
        }
        let requests = work.requests;
        let mut busy = vec![0.0; self.dense_of_gpu.len()];
        flops.fill(0.0);
        let mut total = PassTime::default();
        for iteration in 0..=u64::from(work.decode_iterations) {
            let (tokens, topics, routed_tokens, prefill_rows) = if iteration == 0 {
                let tokens = StepTokens {
                    rows: share(prompts, dp),
                    sequences: share(requests, dp),
                    context_tokens: share(prompts, dp),
                    prefill_square: prefill_square / dp as f64,
                };
                (tokens, &prefill_topics, prompts, prompts)
            } else {
                let tokens = StepTokens {
                    rows: share(requests, dp),
                    sequences: share(requests, dp),
                    context_tokens: share(prompts + requests * iteration, dp),
                    prefill_square: 0.0,
                };
                (tokens, &decode_topics, requests, 0)
            };
            let routed = router.as_mut().map(|r| {
                if r.topical() {
                    r.topic_tokens.copy_from_slice(topics);
                }
                r.route(routed_tokens)
            });
            self.add_pass_flops(&tokens, routed, flops);
            let pass = self.pass(&tokens, prefill_rows, routed_tokens, routed, &mut busy);
            total.add(&pass.with_host(self.host.nanos(requests)));
        }
        total.step_time(busy)
    }
}

/// What one pass (or a sum of passes) takes, ns (with the host's time once `with_host` adds
/// it).
#[derive(Clone, Copy, Debug, Default)]
struct PassTime {
    nanos: f64,
    compute_ns: f64,
    memory_ns: f64,
    communication_ns: f64,
    moe_ns: f64,
    parts: StepParts,
    /// From measured operations: what priced each.
    op_sources: Option<OpSources>,
    /// What priced the pass when not `op_sources` alone (a profile's curves).
    source: Option<CostSource>,
}

impl PassTime {
    fn add(&mut self, other: &PassTime) {
        self.nanos += other.nanos;
        self.compute_ns += other.compute_ns;
        self.memory_ns += other.memory_ns;
        self.communication_ns += other.communication_ns;
        self.moe_ns += other.moe_ns;
        let (p, o) = (&mut self.parts, &other.parts);
        p.linear_ns += o.linear_ns;
        p.elementwise_ns += o.elementwise_ns;
        p.attention_ns += o.attention_ns;
        p.head_ns += o.head_ns;
        p.host_ns += o.host_ns;
        self.op_sources = self.op_sources.or(other.op_sources);
        self.source = self.source.or(other.source);
    }

    /// The passes plus the host's `host_ns`.
    fn with_host(mut self, host_ns: f64) -> PassTime {
        self.nanos += host_ns;
        self.parts.host_ns += host_ns;
        self
    }

    /// The passes plus `swap_ns` of KV copies over the host link before them.
    fn with_swap(mut self, swap_ns: f64) -> PassTime {
        self.nanos += swap_ns;
        self.communication_ns += swap_ns;
        self
    }

    fn step_time(self, per_gpu_busy_ns: Vec<f64>) -> StepTime {
        StepTime {
            duration: SimDuration(self.nanos.round().max(1.0) as u64),
            breakdown: StepBreakdown {
                compute_ns: self.compute_ns,
                memory_ns: self.memory_ns,
                communication_ns: self.communication_ns,
                overhead_ns: self.parts.host_ns,
                moe_ns: self.moe_ns,
                per_gpu_busy_ns,
                op_sources: self.op_sources,
                parts: self.parts,
            },
            source: self.source.unwrap_or_else(|| {
                self.op_sources
                    .map_or(CostSource::Analytic, |s| s.step_source())
            }),
        }
    }
}

impl StepCost for ReplicaStepCost {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        if let Some(routed) = work.routed {
            self.set_adapter_copies(routed.copies);
        }
        let tokens = self.dense_tokens(work);
        // The vector `reuse` gave back, if any (one allocation a run, not one a step).
        let mut busy = std::mem::take(&mut self.spare_busy);
        busy.clear();
        busy.resize(self.dense_of_gpu.len(), 0.0);
        let rows = work.prefill_tokens + work.decode_tokens;
        let pass = self.pass(&tokens, work.prefill_tokens, rows, work.routed, &mut busy);
        pass.with_host(self.host.nanos(work.requests))
            .with_swap(self.swap.nanos(work))
            .step_time(busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::gpu::GpuSpec;
    use rand::RngExt;

    /// Mixtral-8x7B's MoE layer priced on `gpu` with `timing`.
    fn mixtral_on(gpu: &str, timing: Timing) -> MoeLayerCost {
        MoeLayerCost::new(
            &GpuSpec::by_name(gpu).unwrap(),
            &MoeModelShape::mixtral_8x7b(),
            timing,
        )
    }

    /// A lane group's times and rows by their bits, to compare two prices exactly.
    fn lane_bits(t: &LaneTimes) -> ([u64; LANES], [u64; LANES]) {
        (t.nanos.map(f64::to_bits), t.rows.map(f64::to_bits))
    }

    /// The lane groups of `gpus` GPUs in one copy: `LANES` GPUs each, the last one short.
    fn lane_groups(gpus: usize) -> Vec<Range<usize>> {
        (0..gpus)
            .step_by(LANES)
            .map(|g| g..(g + LANES).min(gpus))
            .collect()
    }

    /// A plain layout's tokens per slot, layer by layer and GPU by GPU, as the router hands
    /// them on (`RoutedTokens::per_slot`), from the tokens per expert of every layer.
    fn tokens_per_slot(layout: &ExpertLayout, per_expert: &[u32], gpus: usize) -> Vec<u32> {
        let experts = layout.n_experts;
        let mut per_slot = Vec::new();
        for (layer, row) in per_expert.chunks_exact(experts).enumerate() {
            for g in 0..gpus {
                per_slot.extend(layout.slot_tokens(layer, row, g));
            }
        }
        per_slot
    }

    /// The count memo returns the bits `lane_times_with` computes from the step's rows for
    /// every lane group, found or not: eight and five slots per GPU, one copy of the
    /// expert-parallel group and two (a lane group of two GPUs), slowed GPUs, graph and eager
    /// timing, adapter copies on random experts, groups of few rows and of many (past 64, and
    /// past the table's rows).
    #[test]
    fn the_count_memo_returns_what_pricing_computes() {
        let mut rng = crate::rng::stream(7, "count-memo");
        for timing in [Timing::Graph, Timing::Eager] {
            let cost = mixtral_on("Ascend-910B", timing);
            for (experts, ep, gpus) in [(64, 8, 8), (30, 6, 12)] {
                let layers = 3;
                let layout = ExpertLayout::linear(layers, experts, ep, gpus);
                let speeds: Vec<SpeedFactors> = (0..gpus)
                    .map(|g| match g % 3 {
                        1 => SpeedFactors::split(0.88, 0.0),
                        _ => SpeedFactors::NOMINAL,
                    })
                    .collect();
                let lane_ranges: Vec<Range<usize>> = (0..gpus / ep)
                    .flat_map(|copy| {
                        let end = (copy + 1) * ep;
                        (copy * ep..end)
                            .step_by(LANES)
                            .map(move |first| first..(first + LANES).min(end))
                    })
                    .collect();
                let lane_rates: Vec<LaneRates> = lane_ranges
                    .iter()
                    .map(|lanes| cost.rates.lanes(&speeds[lanes.clone()]))
                    .collect();
                let mut memo = CountMemo::new(true);
                let mut tokens: [Vec<u32>; LANES] = std::array::from_fn(|_| Vec::new());
                let (mut got, mut want) = (Vec::new(), Vec::new());
                for _ in 0..300 {
                    let per_expert: Vec<u32> = (0..layers * experts)
                        .map(|_| match rng.random_range(0..60u32) {
                            0 => rng.random_range(0..700),
                            1 => rng.random_range(60..70),
                            _ => rng.random_range(0..4),
                        })
                        .collect();
                    let copies: Vec<Vec<CopyTokens>> = (0..layers)
                        .map(|_| {
                            (0..rng.random_range(0..20))
                                .map(|_| CopyTokens {
                                    expert: rng.random_range(0..experts as u32),
                                    tokens: rng.random_range(0..6),
                                })
                                .collect()
                        })
                        .collect();
                    let mut rows = StepLaneRows::new(
                        &layout,
                        &copies,
                        &mut tokens,
                        &lane_ranges,
                        &per_expert,
                        &[],
                    );
                    memo.price(&cost, &mut rows, &lane_rates, layers, &mut got);
                    let mut rows = StepLaneRows::new(
                        &layout,
                        &copies,
                        &mut tokens,
                        &lane_ranges,
                        &per_expert,
                        &[],
                    );
                    cost.lane_times_with(
                        &lane_rates,
                        layers * lane_ranges.len(),
                        &mut rows,
                        &mut want,
                    );
                    assert_eq!(got.len(), want.len());
                    for (got, want) in got.iter().zip(&want) {
                        assert_eq!(lane_bits(got), lane_bits(want), "{timing:?}, {gpus} GPUs");
                    }
                }
                assert!(
                    memo.hits > 0 && memo.hits < memo.lookups,
                    "{} of {}",
                    memo.hits,
                    memo.lookups
                );
            }
        }
    }

    /// The memo returns the bits `lane_times_with` computes for every lane group, whether
    /// found whole, found in part or not at all: one slot or two per GPU, two lane groups (the
    /// second with a slowed GPU and a lane past its GPUs), graph and eager timing, rows small
    /// (repeating), at the table's edge and beyond it.
    #[test]
    fn the_lane_memo_returns_what_pricing_computes() {
        let speeds = [
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.88, 0.0),
            SpeedFactors::NOMINAL,
        ];
        let mut rng = crate::rng::stream(5, "lane-memo");
        for timing in [Timing::Graph, Timing::Eager] {
            let cost = mixtral_on("H100-SXM", timing);
            let rates = [
                cost.rates.lanes(&[SpeedFactors::NOMINAL; LANES]),
                cost.rates.lanes(&speeds),
            ];
            for slots in [1, 2] {
                let mut memo = LaneMemo::new(slots);
                let mut out = Vec::new();
                let mut expected = Vec::new();
                let mut keys = Vec::new();
                for _ in 0..200 {
                    keys.clear();
                    for _ in 0..2 * 8 {
                        let mut key = [0u32; MEMO_ROWS];
                        for rows in &mut key[..slots * LANES] {
                            *rows = match rng.random_range(0..20u32) {
                                0 => CAP as u32 - 1,
                                1 => CAP as u32,
                                2 => rng.random_range(0..3000),
                                _ => rng.random_range(0..4),
                            };
                        }
                        keys.push(key);
                    }
                    memo.price_keys(&cost, &rates, &keys, &mut out);
                    let counts: Vec<Vec<[u32; LANES]>> = keys
                        .iter()
                        .map(|key| {
                            (0..slots)
                                .map(|s| std::array::from_fn(|l| key[s * LANES + l]))
                                .collect()
                        })
                        .collect();
                    cost.lane_times_all(&rates, &counts, &mut expected);
                    assert_eq!(out.len(), expected.len());
                    for (got, want) in out.iter().zip(&expected) {
                        assert_eq!(lane_bits(got), lane_bits(want), "{timing:?}, {slots} slots");
                    }
                }
                assert!(memo.hits > 0 && memo.hits < memo.lookups, "{}", memo.hits);
            }
        }
    }

    #[test]
    fn the_lane_memo_keyed_by_the_routers_slots_prices_as_by_the_layout() {
        // A plain layout's tokens per slot (as the router hands them on) and the layout's own
        // gather of the tokens per expert key the memo alike: the same prices, bit for bit, as
        // pricing every lane group afresh, over steps whose rows repeat and pass the table.
        let cost = mixtral_on("H100-SXM", Timing::Graph);
        let mut rng = crate::rng::stream(7, "lane-memo-slots");
        for (experts, ep, slots) in [(8, 4, 2), (8, 8, 1), (16, 8, 2)] {
            let layers = 3;
            let layout = ExpertLayout::linear(layers, experts, ep, ep);
            assert!(layout.plain() && layout.slots_per_gpu == slots);
            let lane_ranges = lane_groups(ep);
            let speeds = [SpeedFactors::split(0.88, 0.0), SpeedFactors::NOMINAL];
            let rates: Vec<LaneRates> = lane_ranges
                .iter()
                .enumerate()
                .map(|(i, _)| cost.rates.lanes(&[speeds[i % 2]; LANES]))
                .collect();
            let (mut by_layout, mut by_slots) = (LaneMemo::new(slots), LaneMemo::new(slots));
            let (mut a, mut b, mut want) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..300 {
                let per_expert: Vec<u32> = (0..layers * experts)
                    .map(|_| match rng.random_range(0..10u32) {
                        0 => rng.random_range(0..200),
                        _ => rng.random_range(0..3),
                    })
                    .collect();
                let per_slot = tokens_per_slot(&layout, &per_expert, ep);
                for (memo, slotted, out) in [
                    (&mut by_layout, &[][..], &mut a),
                    (&mut by_slots, &per_slot[..], &mut b),
                ] {
                    memo.price(
                        &cost,
                        &layout,
                        &lane_ranges,
                        &rates,
                        layers,
                        &per_expert,
                        slotted,
                        out,
                    );
                }
                let counts: Vec<Vec<[u32; LANES]>> = (0..layers)
                    .flat_map(|layer| lane_ranges.iter().map(move |lanes| (layer, lanes)))
                    .map(|(layer, lanes)| {
                        (0..slots)
                            .map(|slot| {
                                std::array::from_fn(|i| {
                                    if i < lanes.len() {
                                        per_slot[(layer * ep + lanes.start + i) * slots + slot]
                                    } else {
                                        0
                                    }
                                })
                            })
                            .collect()
                    })
                    .collect();
                cost.lane_times_all(&rates, &counts, &mut want);
                assert_eq!(a.len(), want.len());
                assert_eq!(b.len(), want.len());
                for ((x, y), w) in a.iter().zip(&b).zip(&want) {
                    assert_eq!(lane_bits(x), lane_bits(w), "{experts} experts, EP {ep}");
                    assert_eq!(lane_bits(y), lane_bits(w), "{experts} experts, EP {ep}");
                }
            }
            assert!(by_slots.hits > 0 && by_slots.hits < by_slots.lookups);
            assert_eq!((by_slots.hits, by_slots.lookups), (by_layout.hits, by_layout.lookups));
        }
    }

    #[test]
    fn a_steps_lane_rows_from_the_routers_slots_are_the_layouts() {
        // `StepLaneRows` on the router's tokens per slot (one and two slots per GPU straight
        // into the float tally, four through the whole-number tally) and on the layout's
        // gather of the tokens per expert: the same prices, bit for bit, for every layer and
        // lane group, with a lane group short of GPUs.
        let cost = mixtral_on("H100-SXM", Timing::Eager);
        let mut rng = crate::rng::stream(9, "step-lane-rows");
        for (experts, ep) in [(8, 8), (8, 4), (16, 4), (12, 6)] {
            let layers = 3;
            let layout = ExpertLayout::linear(layers, experts, ep, ep);
            let slots = layout.slots_per_gpu;
            let lane_ranges = lane_groups(ep);
            let rates: Vec<LaneRates> = lane_ranges
                .iter()
                .map(|_| cost.rates.lanes(&[SpeedFactors::split(0.88, 0.5); LANES]))
                .collect();
            let copies = vec![Vec::new(); layers];
            let mut gpu_tokens: [Vec<u32>; LANES] = Default::default();
            for _ in 0..50 {
                let per_expert: Vec<u32> = (0..layers * experts)
                    .map(|_| match rng.random_range(0..4u32) {
                        0 => rng.random_range(0..5000),
                        _ => rng.random_range(0..9),
                    })
                    .collect();
                let per_slot = tokens_per_slot(&layout, &per_expert, ep);
                let mut priced = [Vec::new(), Vec::new()];
                for (slotted, out) in [&[][..], &per_slot[..]].into_iter().zip(&mut priced) {
                    let mut rows = StepLaneRows::new(
                        &layout,
                        &copies,
                        &mut gpu_tokens,
                        &lane_ranges,
                        &per_expert,
                        slotted,
                    );
                    cost.lane_times_with(&rates, layers * lane_ranges.len(), &mut rows, out);
                }
                assert_eq!(priced[0].len(), layers * lane_ranges.len());
                for (a, b) in priced[0].iter().zip(&priced[1]) {
                    assert_eq!(
                        lane_bits(a),
                        lane_bits(b),
                        "{experts} experts, EP {ep}, {slots} slots"
                    );
                }
            }
        }
    }
}
