//! The kernel model: what one kernel costs on one GPU, from a handful of named per-GPU rates
//! (`KernelRates`, read from `profiles/rates.json`, which `cost::fit` derives from the measured
//! files under `profiles/`). A kernel streams bytes and computes FLOPs; its GPU-side time is
//!
//! ```text
//! kernel_floor + reduction_latency x K + (memory^p + compute^p)^(1/p)
//! ```
//!
//! where `memory` is its bytes over the rate its parallelism reaches, `compute` its FLOPs on
//! tile-padded rows over the GEMM rate, and the p-norm (p a power of two, fitted) is how a
//! kernel's streaming and math overlap: the larger term alone far from the ridge, a little
//! more than it near the ridge. Which tile a GEMM of M rows runs with is the tile-choice
//! table (`dense_tile`, `grouped_tile`). A CUDA graph (vLLM's decode) replays kernels without
//! the host, so a kernel costs its GPU-side time; an eager loop launches each from the host, so
//! a kernel costs the longer of the host's launch and its GPU-side time. Derivation and every
//! constant: docs/cost-model.md, "The kernel model".

use crate::gpu::GpuSpec;
use crate::lanes::{F64x4, Lanes};
use crate::moe_layer::SpeedFactors;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// How a kernel is launched, and so what its time includes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Replayed in a CUDA graph: the GPU-side time alone (vLLM's decode steps).
    #[default]
    Graph,
    /// Launched from the host one by one: the longer of the host's launch and the GPU-side
    /// time (eager PyTorch, HF transformers, vLLM-Ascend).
    Eager,
}

impl Timing {
    pub fn as_str(self) -> &'static str {
        match self {
            Timing::Graph => "graph",
            Timing::Eager => "eager",
        }
    }
}

/// A GEMM tile: rows (M) and columns (N) of the output one thread block computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub rows: u64,
    pub cols: u64,
}

/// The tile a dense (cuBLAS) GEMM of `rows` rows runs with: 64 rows up to 64, then 128 (the
/// eager token sweep of gemm.csv steps every 128 rows above 128, e.g. Llama-2-7B's QKV at
/// 257-384 and 385-512 tokens).
pub fn dense_tile(rows: u64) -> Tile {
    if rows <= 64 {
        Tile {
            rows: 64,
            cols: 128,
        }
    } else {
        Tile {
            rows: 128,
            cols: 128,
        }
    }
}

/// The tile a grouped expert GEMM runs with, as PyTorch's `_grouped_mm` picks its CUTLASS
/// kernel on SM90 (aten/src/ATen/native/cuda/GroupMM.cu): 64 x 128 when the groups' mean rows
/// are at most 128 or the output is at most 128 wide, else 128 x 256. Both run with clusters of
/// two thread blocks along M that share one weight tile.
pub fn grouped_tile(mean_rows: f64, n: u64) -> Tile {
    if mean_rows <= 128.0 || n <= 128 {
        Tile {
            rows: 64,
            cols: 128,
        }
    } else {
        Tile {
            rows: 128,
            cols: 256,
        }
    }
}

/// `rows` rounded up to whole tiles of `tile` rows.
#[inline]
pub fn padded(rows: u64, tile: u64) -> u64 {
    rows.div_ceil(tile) * tile
}

/// The achievable rates of one GPU (docs/cost-model.md, "The kernel model").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRates {
    /// Weight (and KV) streaming of a kernel that keeps every SM busy, bytes/s.
    pub stream_bytes_per_s: f64,
    /// Dense bf16 GEMM, FLOP/s.
    pub gemm_flops: f64,
    /// A grouped expert GEMM whose groups each hold one M tile: one block of each two-block
    /// cluster streams, so half the SMs do, bytes/s. A group of two or more M tiles uses both
    /// blocks; the rate never exceeds `stream_bytes_per_s`.
    pub grouped_stream_bytes_per_s: f64,
    /// A grouped expert GEMM's math, FLOP/s.
    pub grouped_gemm_flops: f64,
    /// Every group of a grouped GEMM costs this many M tiles more (its tiles' pipeline fill
    /// and drain).
    pub group_tail_tiles: f64,
    /// GPU-side time of any kernel beyond its streaming and math, ns (in a CUDA graph).
    pub kernel_floor_ns: f64,
    /// GPU-side latency per element of a GEMM's reduction dimension K, ns.
    pub reduction_ns_per_element: f64,
    /// The p of the p-norm that combines a kernel's memory and compute terms (a power of two).
    pub overlap_norm: u32,
    /// Host time to launch one eager kernel (framework dispatch included), ns.
    pub host_launch_ns: f64,
    /// Softmax exponentials per second (SFU: 16 per SM per clock); 0 where unknown.
    pub exp_per_s: f64,
    /// Streaming multiprocessors.
    pub sms: u32,
}

/// One kernel's GPU-side time and the terms behind it, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KernelTime {
    pub memory_ns: f64,
    pub compute_ns: f64,
    /// The floor and the reduction latency.
    pub floor_ns: f64,
    /// GPU-side time: `floor_ns + combine(memory_ns, compute_ns)`.
    pub nanos: f64,
}

impl KernelTime {
    /// What the kernel costs under `timing` on a GPU whose host launches in `host_launch_ns`.
    #[inline]
    pub fn wall(&self, timing: Timing, host_launch_ns: f64) -> f64 {
        match timing {
            Timing::Graph => self.nanos,
            Timing::Eager => self.nanos.max(host_launch_ns),
        }
    }

    /// Adds `other`'s terms (a sequence of kernels).
    pub fn add(&mut self, other: &KernelTime) {
        self.memory_ns += other.memory_ns;
        self.compute_ns += other.compute_ns;
        self.floor_ns += other.floor_ns;
        self.nanos += other.nanos;
    }
}

/// The M tiles of the grouped GEMM's two kernels (`grouped_tile`).
const TILE_ROWS: [f64; 2] = [64.0, 128.0];

/// The shape-only quantities of a grouped GEMM `rows x k -> n` with `k x n` weights per group,
/// computed once per MoE layer (`cost::moe_layer`) rather than on every pricing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupedShape {
    pub k: u64,
    pub n: u64,
    /// One group's weight bytes.
    weight_bytes: f64,
    /// Activation bytes of one row (its input and output).
    row_bytes: f64,
    /// Output tiles across N, per tile shape (64 x 128, 128 x 256).
    n_tiles: [f64; 2],
    /// FLOPs of one padded row across the padded output, per tile shape.
    flops_per_row: [f64; 2],
}

impl GroupedShape {
    pub fn new(k: u64, n: u64, bytes_per_param: f64) -> GroupedShape {
        let (kf, nf) = (k as f64, n as f64);
        let tiles = |cols: u64| n.div_ceil(cols) as f64;
        let (small, large) = (grouped_tile(0.0, 1024), grouped_tile(1024.0, 1024));
        GroupedShape {
            k,
            n,
            weight_bytes: kf * nf * bytes_per_param,
            row_bytes: (kf + nf) * ACTIVATION_BYTES,
            n_tiles: [tiles(small.cols), tiles(large.cols)],
            flops_per_row: [
                2.0 * kf * tiles(small.cols) * small.cols as f64,
                2.0 * kf * tiles(large.cols) * large.cols as f64,
            ],
        }
    }
}

/// The groups of a grouped GEMM reduced to the sums its cost reads; each group weighs `p`
/// (1 for a counted group, the probability that it runs for an expected one).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupSums {
    pub groups: f64,
    pub rows: f64,
    /// Per tile height (64, 128): M tiles, padded rows, two-block clusters.
    tiles: [f64; 2],
    padded_rows: [f64; 2],
    clusters: [f64; 2],
}

impl GroupSums {
    /// Adds a group of `rows` rows (at least 1) with weight `p`.
    #[inline]
    pub fn add(&mut self, rows: u64, p: f64) {
        let t64 = rows.div_ceil(64);
        let t128 = rows.div_ceil(128);
        self.groups += p;
        self.rows += p * rows as f64;
        self.tiles[0] += p * t64 as f64;
        self.tiles[1] += p * t128 as f64;
        self.padded_rows[0] += p * (t64 * 64) as f64;
        self.padded_rows[1] += p * (t128 * 128) as f64;
        self.clusters[0] += p * t64.div_ceil(2) as f64;
        self.clusters[1] += p * t128.div_ceil(2) as f64;
    }

    /// The groups of `rows` (groups of 0 rows do not run).
    pub fn of_counts(rows: &[u32]) -> GroupSums {
        let mut sums = GroupSums::default();
        for &n in rows {
            if n > 0 {
                sums.add(u64::from(n), 1.0);
            }
        }
        sums
    }

    pub fn is_empty(&self) -> bool {
        self.groups <= 0.0
    }

    /// The eight sums in one array: groups, rows, tiles (64, 128), padded rows (64, 128),
    /// clusters (64, 128).
    #[cfg(test)]
    pub(crate) fn to_terms(self) -> [f64; 8] {
        let [t64, t128] = self.tiles;
        let [p64, p128] = self.padded_rows;
        let [c64, c128] = self.clusters;
        [self.groups, self.rows, t64, t128, p64, p128, c64, c128]
    }

    /// The sums of `to_terms`' array.
    #[inline(always)]
    pub(crate) fn from_terms(t: [f64; 8]) -> GroupSums {
        GroupSums {
            groups: t[0],
            rows: t[1],
            tiles: [t[2], t[3]],
            padded_rows: [t[4], t[5]],
            clusters: [t[6], t[7]],
        }
    }
}

/// How many GPUs `KernelRates::grouped_lanes` prices side by side.
pub const LANES: usize = 4;

/// Up to `LANES` GPUs' group sums side by side (structure of arrays), for `grouped_lanes`.
#[derive(Clone, Copy, Debug)]
pub struct LaneSums {
    groups: F64x4,
    rows: F64x4,
    /// Lanes whose mean rows per group (`rows / groups`) are at most 128: the small tile
    /// (`grouped_tile`), all bits set.
    small: F64x4,
    tiles: [F64x4; 2],
    padded_rows: [F64x4; 2],
    clusters: [F64x4; 2],
    /// Lanes without groups (and lanes past the GPUs given).
    empty: [bool; LANES],
}

impl LaneSums {
    /// The sums of up to `LANES` GPUs, one lane each.
    #[inline]
    pub fn of(sums: &[GroupSums]) -> LaneSums {
        assert!(sums.len() <= LANES, "at most {LANES} lanes");
        let none = GroupSums::default();
        let lane = |i: usize| sums.get(i).unwrap_or(&none);
        let field = |f: &dyn Fn(&GroupSums) -> f64| F64x4::new(std::array::from_fn(|i| f(lane(i))));
        let groups = field(&|s| s.groups);
        let rows = field(&|s| s.rows);
        LaneSums {
            groups,
            rows,
            small: (rows / groups).simd_le(F64x4::splat(128.0)),
            tiles: [field(&|s| s.tiles[0]), field(&|s| s.tiles[1])],
            padded_rows: [field(&|s| s.padded_rows[0]), field(&|s| s.padded_rows[1])],
            clusters: [field(&|s| s.clusters[0]), field(&|s| s.clusters[1])],
            empty: std::array::from_fn(|i| lane(i).is_empty()),
        }
    }

    /// The counted groups of up to `LANES` GPUs, one lane each (`counts[i]`: the rows of each
    /// expert GPU `i` holds, 0 where it does not run): `LaneTally` of every count.
    #[inline]
    pub fn of_counts(counts: &[&[u32]]) -> LaneSums {
        assert!(counts.len() <= LANES, "at most {LANES} lanes");
        let mut tally = LaneTally::<F64x4>::new();
        let longest = counts.iter().map(|c| c.len()).max().unwrap_or(0);
        for j in 0..longest {
            tally.add(std::array::from_fn(|i| {
                counts.get(i).and_then(|c| c.get(j)).copied().unwrap_or(0)
            }));
        }
        tally.finish()
    }

    /// Each lane's rows.
    #[inline]
    pub fn rows(&self) -> F64x4 {
        self.rows
    }
}

/// Up to `LANES` GPUs' counted groups summed side by side on the lanes `L`, one group of each
/// GPU at a time (`add`), then `finish`: `LaneSums::of` of each GPU's `GroupSums::of_counts`.
/// A count is a whole number below 2^32, exact as an f64; a tile count is the ceiling of its
/// quotient by a power of two (exact), a cluster count the ceiling of half of it; every sum is
/// a whole number far below 2^53, exact in any order. So each lane has the bits of the scalar
/// sums.
#[derive(Clone, Copy)]
pub struct LaneTally<L> {
    groups: L,
    rows: L,
    /// Per tile height (64, 128): M tiles and two-block clusters.
    tiles: [L; 2],
    clusters: [L; 2],
}

impl<L: Lanes> LaneTally<L> {
    #[inline(always)]
    pub fn new() -> LaneTally<L> {
        let zero = L::splat(0.0);
        LaneTally {
            groups: zero,
            rows: zero,
            tiles: [zero; 2],
            clusters: [zero; 2],
        }
    }

    /// Adds one group of each lane's GPU, `rows[i]` rows in lane `i` (a group of 0 rows does
    /// not run).
    #[inline(always)]
    pub fn add(&mut self, rows: [u32; LANES]) {
        let splat = L::splat;
        let n = L::from_u32(rows);
        let runs = n.simd_gt(splat(0.0)).bitselect(splat(1.0), splat(0.0));
        self.groups = self.groups + runs;
        self.rows = self.rows + n;
        for (t, height) in [64.0, 128.0].into_iter().enumerate() {
            let tiles = (n * splat(1.0 / height)).ceil();
            self.tiles[t] = self.tiles[t] + tiles;
            self.clusters[t] = self.clusters[t] + (tiles * splat(0.5)).ceil();
        }
    }

    /// Adds every group of each lane's GPU at once, from their sums in whole numbers
    /// (`WholeTally`): the same whole-number sums as `add` of each group, so the same bits.
    #[inline(always)]
    pub fn add_whole(&mut self, whole: &WholeTally) {
        self.groups = self.groups + L::from_u32(whole.groups);
        self.rows = self.rows + L::from_u32(whole.rows);
        // A cluster is two tiles: ceil(ceil(n / 64) / 2) = ceil(n / 128), and so on.
        let [by_64, by_128, by_256] = whole.tiles.map(L::from_u32);
        self.tiles = [self.tiles[0] + by_64, self.tiles[1] + by_128];
        self.clusters = [self.clusters[0] + by_128, self.clusters[1] + by_256];
    }

    /// The lanes' sums.
    #[inline(always)]
    pub fn finish(self) -> LaneSums {
        let splat = L::splat;
        let groups = self.groups.store();
        LaneSums {
            groups,
            rows: self.rows.store(),
            // `rows / groups <= 128` without the division: exact for whole numbers (a mean
            // above 128 is at least 128 + 1/groups, far above 128's rounding).
            small: self.rows.simd_le(splat(128.0) * self.groups).store(),
            tiles: self.tiles.map(L::store),
            padded_rows: [
                (self.tiles[0] * splat(64.0)).store(),
                (self.tiles[1] * splat(128.0)).store(),
            ],
            clusters: self.clusters.map(L::store),
            empty: groups.to_array().map(|g| g == 0.0),
        }
    }
}

/// Up to `LANES` GPUs' counted groups summed side by side in whole numbers, one group of each
/// GPU at a time (`add`), for `LaneTally::add_whole`: per lane the groups that run (more than
/// 0 rows), the rows, and the ceilings of each count over 64, 128 and 256 rows (the tiles of
/// either height; a two-tile cluster of 64-row tiles is a 128-row tile, of 128-row tiles a
/// 256-row one). Integer operations in place of `LaneTally::add`'s float ones. Each lane's
/// counts must sum below 2^32 (a layer's tokens do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WholeTally {
    groups: [u32; LANES],
    rows: [u32; LANES],
    tiles: [[u32; LANES]; 3],
}

impl WholeTally {
    /// Adds one group of each lane's GPU, `rows[i]` rows in lane `i`.
    #[inline(always)]
    pub fn add(&mut self, rows: [u32; LANES]) {
        for (i, &n) in rows.iter().enumerate() {
            self.groups[i] += u32::from(n > 0);
            self.rows[i] += n;
            self.tiles[0][i] += n.div_ceil(64);
            self.tiles[1][i] += n.div_ceil(128);
            self.tiles[2][i] += n.div_ceil(256);
        }
    }
}

impl<L: Lanes> Default for LaneTally<L> {
    fn default() -> Self {
        LaneTally::new()
    }
}

/// A kernel of up to `LANES` GPUs side by side (`KernelRates::grouped_lanes`).
#[derive(Clone, Copy, Debug)]
pub struct LaneKernels {
    pub memory_ns: F64x4,
    pub compute_ns: F64x4,
    pub floor_ns: f64,
    /// GPU-side time; meaningless in empty lanes.
    pub nanos: F64x4,
    /// Lanes without groups: they cost nothing.
    pub empty: [bool; LANES],
}

impl LaneKernels {
    /// Lane `i` as one GPU's kernel (zero where empty).
    #[inline]
    pub fn get(&self, i: usize) -> KernelTime {
        if self.empty[i] {
            KernelTime::default()
        } else {
            KernelTime {
                memory_ns: self.memory_ns.as_array()[i],
                compute_ns: self.compute_ns.as_array()[i],
                floor_ns: self.floor_ns,
                nanos: self.nanos.as_array()[i],
            }
        }
    }
}

/// The rates that speed factors scale, of up to `LANES` GPUs side by side
/// (`KernelRates::lanes`).
#[derive(Clone, Copy, Debug)]
pub struct LaneRates {
    stream: F64x4,
    /// The grouped GEMM's streaming rate per resident thread block (its single-tile rate over
    /// half the SMs).
    grouped_stream_per_block: F64x4,
    grouped_flops: F64x4,
}

/// Bytes of one bf16 activation element.
const ACTIVATION_BYTES: f64 = 2.0;

/// The committed rates file.
const RATES_JSON: &str = include_str!("../../profiles/rates.json");

/// `profiles/rates.json`: every catalogue GPU's rates with the source of each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatesFile {
    pub format_version: u32,
    /// How the file is made.
    pub note: String,
    pub gpus: Vec<GpuRatesEntry>,
}

/// One GPU's rates and where each comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRatesEntry {
    pub gpu: String,
    pub rates: KernelRates,
    /// `measured`, `measured (Vidur)` or `datasheet x efficiency`: the GEMM and streaming rates'.
    pub source: String,
    /// One line per constant: where its value comes from.
    pub derivation: Vec<String>,
}

impl RatesFile {
    pub fn committed() -> &'static RatesFile {
        static RATES: OnceLock<RatesFile> = OnceLock::new();
        RATES.get_or_init(|| {
            serde_json::from_str(RATES_JSON).expect("profiles/rates.json is valid (committed)")
        })
    }

    pub fn entry(&self, gpu: &str) -> Option<&GpuRatesEntry> {
        self.gpus.iter().find(|e| e.gpu == gpu)
    }

    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("rates serialize");
        text.push('\n');
        text
    }
}

impl KernelRates {
    /// The rates of `gpu` (`profiles/rates.json`).
    pub fn of(gpu: &GpuSpec) -> KernelRates {
        RatesFile::committed()
            .entry(&gpu.name)
            .unwrap_or_else(|| panic!("profiles/rates.json has no entry for {}", gpu.name))
            .rates
    }

    /// The same GPU slowed by `speed`: streaming times `speed.bandwidth`, math times
    /// `speed.compute` (the floors are left alone).
    #[inline]
    pub fn scaled(&self, speed: SpeedFactors) -> KernelRates {
        KernelRates {
            stream_bytes_per_s: self.stream_bytes_per_s * speed.bandwidth,
            grouped_stream_bytes_per_s: self.grouped_stream_bytes_per_s * speed.bandwidth,
            gemm_flops: self.gemm_flops * speed.compute,
            grouped_gemm_flops: self.grouped_gemm_flops * speed.compute,
            exp_per_s: self.exp_per_s * speed.compute,
            ..*self
        }
    }

    /// How a kernel's memory and compute terms combine: their p-norm (the one place of the
    /// formula; `Roofline::op` and every kernel below call it).
    #[inline]
    pub fn combine(&self, memory_ns: f64, compute_ns: f64) -> f64 {
        combine(self.overlap_norm, memory_ns, compute_ns)
    }

    /// Per-SM streaming rate of a grouped GEMM (its single-tile rate over half the SMs).
    fn sm_stream(&self) -> f64 {
        self.grouped_stream_bytes_per_s / (f64::from(self.sms) / 2.0)
    }

    #[inline]
    fn kernel(&self, floor_ns: f64, memory_ns: f64, compute_ns: f64) -> KernelTime {
        KernelTime {
            memory_ns,
            compute_ns,
            floor_ns,
            nanos: floor_ns + self.combine(memory_ns, compute_ns),
        }
    }

    /// A dense GEMM `rows x k -> n` with `k x n` weights of `bytes_per_param` bytes.
    pub fn gemm(&self, rows: u64, k: u64, n: u64, bytes_per_param: f64) -> KernelTime {
        if rows == 0 {
            return KernelTime::default();
        }
        let (kf, nf) = (k as f64, n as f64);
        let bytes = kf * nf * bytes_per_param + rows as f64 * (kf + nf) * ACTIVATION_BYTES;
        let flops = 2.0 * kf * nf * padded(rows, dense_tile(rows).rows) as f64;
        self.kernel(
            self.kernel_floor_ns + self.reduction_ns_per_element * kf,
            bytes / self.stream_bytes_per_s * 1e9,
            flops / self.gemm_flops * 1e9,
        )
    }

    /// A grouped GEMM `rows_g x k -> n` per group, each group its own `k x n` weights.
    pub fn grouped_gemm(
        &self,
        groups: &GroupSums,
        k: u64,
        n: u64,
        bytes_per_param: f64,
    ) -> KernelTime {
        self.grouped(&GroupedShape::new(k, n, bytes_per_param), groups)
    }

    /// A grouped GEMM of `shape` over `groups` (`grouped_lanes` with one lane).
    #[inline]
    pub fn grouped(&self, shape: &GroupedShape, groups: &GroupSums) -> KernelTime {
        let lanes = LaneSums::of(std::slice::from_ref(groups));
        self.grouped_lanes(&self.lanes(&[]), shape, &lanes).get(0)
    }

    /// The rates of up to `LANES` GPUs slowed by `speeds` (each as `scaled`; lanes past
    /// `speeds` nominal), side by side for `grouped_lanes`.
    #[inline]
    pub fn lanes(&self, speeds: &[SpeedFactors]) -> LaneRates {
        let speed = |i: usize| speeds.get(i).copied().unwrap_or(SpeedFactors::NOMINAL);
        let half_sms = 0.5 * f64::from(self.sms);
        // `scaled` multiplies by 1.0 for a nominal GPU, which leaves every bit as it is.
        LaneRates {
            stream: F64x4::new(std::array::from_fn(|i| {
                self.stream_bytes_per_s * speed(i).bandwidth
            })),
            grouped_stream_per_block: F64x4::new(std::array::from_fn(|i| {
                self.grouped_stream_bytes_per_s * speed(i).bandwidth / half_sms
            })),
            grouped_flops: F64x4::new(std::array::from_fn(|i| {
                self.grouped_gemm_flops * speed(i).compute
            })),
        }
    }

    /// A grouped GEMM of `shape` over each lane's `groups` at that lane's `rates` (`lanes`):
    /// the tile the groups' mean rows choose, the streaming rate its working thread blocks
    /// reach (two-block clusters along M, half the SMs resident at once; a cluster whose group
    /// has one M tile streams with one block), its weights and activations over that rate, its
    /// tile-padded rows (plus each group's tail) over the grouped GEMM rate. Every lane runs
    /// the same IEEE operations in the same order (a branch becomes a lane select), so a lane's
    /// result is the bits one GPU priced alone gets; the lanes let the divisions and square
    /// roots of several GPUs run side by side. An empty lane costs nothing.
    #[inline(always)]
    pub fn grouped_lanes(
        &self,
        rates: &LaneRates,
        shape: &GroupedShape,
        groups: &LaneSums,
    ) -> LaneKernels {
        self.grouped_lanes_in::<F64x4>(rates, shape, groups)
    }

    /// `grouped_lanes` on the lanes `L` (`lanes::Lanes`: the same bits on each).
    #[inline(always)]
    pub fn grouped_lanes_in<L: Lanes>(
        &self,
        rates: &LaneRates,
        shape: &GroupedShape,
        groups: &LaneSums,
    ) -> LaneKernels {
        let splat = L::splat;
        let load = L::load;
        // The large tile (128 x 256) where the mean rows exceed 128 and the output is wider
        // than 128: `pick(small, large)` per lane.
        let small = load(groups.small);
        let pick = |s: L, l: L| {
            if shape.n <= 128 {
                s
            } else {
                small.bitselect(s, l)
            }
        };
        let n_tiles = pick(splat(shape.n_tiles[0]), splat(shape.n_tiles[1]));
        let half_sms = splat(0.5 * f64::from(self.sms));
        let working = pick(load(groups.tiles[0]), load(groups.tiles[1])) * n_tiles;
        let clusters = pick(load(groups.clusters[0]), load(groups.clusters[1])) * n_tiles;
        let active = clusters
            .simd_gt(half_sms)
            .bitselect(working * half_sms / clusters, working);
        // `min` of the two rates.
        let reached = active * load(rates.grouped_stream_per_block);
        let stream = load(rates.stream);
        let rate = reached.simd_lt(stream).bitselect(reached, stream);
        let (groups_n, rows_n) = (load(groups.groups), load(groups.rows));
        let bytes = groups_n * splat(shape.weight_bytes) + rows_n * splat(shape.row_bytes);
        let rows = pick(load(groups.padded_rows[0]), load(groups.padded_rows[1]))
            + splat(self.group_tail_tiles)
                * pick(splat(TILE_ROWS[0]), splat(TILE_ROWS[1]))
                * groups_n;
        let memory_ns = bytes / rate * splat(1e9);
        let compute_ns = pick(splat(shape.flops_per_row[0]), splat(shape.flops_per_row[1])) * rows
            / load(rates.grouped_flops)
            * splat(1e9);
        let floor_ns = self.kernel_floor_ns + self.reduction_ns_per_element * shape.k as f64;
        LaneKernels {
            memory_ns: memory_ns.store(),
            compute_ns: compute_ns.store(),
            floor_ns,
            nanos: (splat(floor_ns) + combine_lanes(self.overlap_norm, memory_ns, compute_ns))
                .store(),
            empty: groups.empty,
        }
    }

    /// `streaming` of each lane's `bytes` at that lane's `rates`: its GPU-side time (0 where
    /// `bytes` is not positive). The same operations as `streaming` (whose p-norm with a zero
    /// compute term is the memory term), so the same bits.
    #[inline(always)]
    pub fn streaming_lanes(&self, rates: &LaneRates, bytes: F64x4) -> F64x4 {
        self.streaming_lanes_in::<F64x4>(rates, bytes)
    }

    /// `streaming_lanes` on the lanes `L`.
    #[inline(always)]
    pub fn streaming_lanes_in<L: Lanes>(&self, rates: &LaneRates, bytes: L) -> L {
        let splat = L::splat;
        let nanos = splat(self.kernel_floor_ns) + bytes / L::load(rates.stream) * splat(1e9);
        bytes.simd_gt(splat(0.0)).bitselect(nanos, splat(0.0))
    }

    /// An element-wise kernel moving `bytes` (activation functions, norms, rotary embedding).
    #[inline]
    pub fn streaming(&self, bytes: f64) -> KernelTime {
        if bytes <= 0.0 {
            return KernelTime::default();
        }
        self.kernel(
            self.kernel_floor_ns,
            bytes / self.stream_bytes_per_s * 1e9,
            0.0,
        )
    }

    /// FlashAttention decode: `batch` sequences, one query each over its cached tokens,
    /// `kv_bytes` of K and V read (the grouped-query heads' re-reads hit L2), `pairs` (query
    /// head, cached token) products. One thread block per (sequence, query head) streams its
    /// share, so a small batch reaches only its blocks' per-SM rate.
    pub fn decode_attention(
        &self,
        batch: u64,
        heads: u64,
        head_dim: u64,
        kv_bytes: f64,
        pairs: f64,
    ) -> KernelTime {
        if batch == 0 || kv_bytes <= 0.0 {
            return KernelTime::default();
        }
        let blocks = (batch * heads) as f64;
        let rate = (blocks * self.sm_stream()).min(self.stream_bytes_per_s);
        let flops = 4.0 * head_dim as f64 * pairs;
        self.kernel(
            self.kernel_floor_ns,
            kv_bytes / rate * 1e9,
            flops / self.gemm_flops * 1e9 + self.exp_ns(pairs),
        )
    }

    /// FlashAttention causal prefill of one sequence of `length` tokens: 128 x 128 blocks of
    /// (query, key) pairs on and below the diagonal, 4 x head_dim FLOPs and one softmax
    /// exponential per pair and head, the exponentials not overlapped with the matmuls.
    pub fn prefill_attention(&self, length: u64, heads: u64, head_dim: u64) -> KernelTime {
        if length == 0 {
            return KernelTime::default();
        }
        let blocks = length.div_ceil(128) as f64;
        let pairs = heads as f64 * blocks * (blocks + 1.0) / 2.0 * 128.0 * 128.0;
        let bytes = 4.0 * (length * heads * head_dim) as f64 * ACTIVATION_BYTES;
        let flops = 4.0 * head_dim as f64 * pairs;
        self.kernel(
            self.kernel_floor_ns,
            bytes / self.stream_bytes_per_s * 1e9,
            flops / self.gemm_flops * 1e9 + self.exp_ns(pairs),
        )
    }

    /// Time of `count` softmax exponentials, ns (0 where the rate is unknown).
    pub fn exp_ns(&self, count: f64) -> f64 {
        if self.exp_per_s > 0.0 {
            count / self.exp_per_s * 1e9
        } else {
            0.0
        }
    }
}

/// The p-norm of two non-negative terms, p a power of two (1, 2, 4, 8: square roots, no
/// `powf` on the hot path). Far from the ridge (the smaller term under a tenth of the larger,
/// p = 4) the root is its series to second order, exact to 1e-13 relative.
#[inline]
pub fn combine(p: u32, a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo <= 0.0 {
        return hi.max(0.0);
    }
    let r = lo / hi;
    match p {
        0 | 1 => hi + lo,
        2 => hi * (1.0 + r * r).sqrt(),
        4 => {
            let r4 = (r * r) * (r * r);
            if r4 < 1e-4 {
                hi * (1.0 + r4 * (0.25 - 0.09375 * r4))
            } else {
                hi * (1.0 + r4).sqrt().sqrt()
            }
        }
        8 => {
            let r4 = (r * r) * (r * r);
            hi * (1.0 + r4 * r4).sqrt().sqrt().sqrt()
        }
        _ => hi * (1.0 + r.powi(p as i32)).powf(1.0 / f64::from(p)),
    }
}

/// `combine` of each lane's two terms: the same operations per lane in the same order (each
/// branch a lane select), so every lane gets the bits `combine` returns for it.
#[inline(always)]
pub fn combine_lanes<L: Lanes>(p: u32, a: L, b: L) -> L {
    let splat = L::splat;
    let a_larger = a.simd_ge(b);
    let (hi, lo) = (a_larger.bitselect(a, b), a_larger.bitselect(b, a));
    let r = lo / hi;
    let one = splat(1.0);
    let combined = match p {
        0 | 1 => hi + lo,
        2 => hi * (one + r * r).sqrt(),
        4 => {
            let r4 = (r * r) * (r * r);
            let far = r4.simd_lt(splat(1e-4));
            let series = hi * (one + r4 * (splat(0.25) - splat(0.09375) * r4));
            if far.all() {
                series
            } else {
                far.bitselect(series, hi * (one + r4).sqrt().sqrt())
            }
        }
        8 => {
            let r4 = (r * r) * (r * r);
            hi * (one + r4 * r4).sqrt().sqrt().sqrt()
        }
        _ => {
            let (a, b) = (a.store().to_array(), b.store().to_array());
            return L::load(F64x4::new(std::array::from_fn(|i| combine(p, a[i], b[i]))));
        }
    };
    // `hi.max(0.0)` where the smaller term is not positive.
    let larger = hi.simd_ge(splat(0.0)).bitselect(hi, splat(0.0));
    lo.simd_le(splat(0.0)).bitselect(larger, combined)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_p_norm_is_the_larger_term_far_from_the_ridge() {
        assert_eq!(combine(4, 0.0, 0.0), 0.0);
        assert_eq!(combine(1, 2.0, 3.0), 5.0);
        // p = 2: a right triangle.
        assert!((combine(2, 3.0, 4.0) - 5.0).abs() < 1e-12);
        // p = 4 at the ridge: 2^(1/4) x the term.
        assert!((combine(4, 10.0, 10.0) - 10.0 * 2f64.powf(0.25)).abs() < 1e-9);
        // Far from it, the larger term (within 0.1 % at a ratio of 4), and the series branch
        // agrees with the root.
        assert!((combine(4, 100.0, 25.0) / 100.0 - 1.0) < 1e-3 + 0.001);
        for r in [0.01f64, 0.05, 0.09, 0.1, 0.2] {
            let exact = (1.0f64 + r.powi(4)).powf(0.25);
            assert!((combine(4, 1.0, r) - exact).abs() < 1e-13, "{r}");
            assert_eq!(combine(4, r, 1.0), combine(4, 1.0, r));
        }
        assert!((combine(8, 1.0, 0.5) - (1.0f64 + 0.5f64.powi(8)).powf(0.125)).abs() < 1e-12);
        assert_eq!(combine(4, 3.0, 0.0), 3.0);
    }

    #[test]
    fn tile_choice_follows_the_kernel_libraries() {
        assert_eq!(dense_tile(1).rows, 64);
        assert_eq!(dense_tile(64).rows, 64);
        assert_eq!(dense_tile(65).rows, 128);
        assert_eq!(
            grouped_tile(128.0, 4096),
            Tile {
                rows: 64,
                cols: 128
            }
        );
        assert_eq!(
            grouped_tile(128.5, 4096),
            Tile {
                rows: 128,
                cols: 256
            }
        );
        assert_eq!(
            grouped_tile(4096.0, 128),
            Tile {
                rows: 64,
                cols: 128
            }
        );
        assert_eq!(padded(65, 64), 128);
        assert_eq!(padded(128, 128), 128);
    }

    fn rates() -> KernelRates {
        KernelRates {
            stream_bytes_per_s: 4e12,
            gemm_flops: 800e12,
            grouped_stream_bytes_per_s: 2.64e12,
            grouped_gemm_flops: 640e12,
            group_tail_tiles: 0.25,
            kernel_floor_ns: 5_000.0,
            reduction_ns_per_element: 0.25,
            overlap_norm: 4,
            host_launch_ns: 28_000.0,
            exp_per_s: 4e12,
            sms: 132,
        }
    }

    #[test]
    fn a_decode_gemm_streams_its_weights_after_its_floor() {
        // 1 row x 4096 -> 28672 in bf16: 234,881,024 weight bytes + 65,536 activation bytes
        // over 4 TB/s; 2 x 4096 x 28672 x 64 padded rows over 800 TFLOP/s is far below it.
        let r = rates();
        let t = r.gemm(1, 4096, 28672, 2.0);
        let memory = (234_881_024.0 + 2.0 * (4096.0 + 28672.0)) / 4e12 * 1e9;
        assert!((t.memory_ns - memory).abs() < 1e-6);
        assert_eq!(t.floor_ns, 5_000.0 + 0.25 * 4096.0);
        let compute = 2.0 * 4096.0 * 28672.0 * 64.0 / 800e12 * 1e9;
        assert!((t.compute_ns - compute).abs() < 1e-6);
        let expected = t.floor_ns + (memory.powi(4) + compute.powi(4)).powf(0.25);
        assert!((t.nanos - expected).abs() < 1e-6);
        // Eager: the host launch when the kernel is shorter, the kernel when longer.
        assert_eq!(
            r.gemm(1, 1408, 2048, 2.0).wall(Timing::Eager, 28_000.0),
            28_000.0
        );
        assert_eq!(t.wall(Timing::Eager, 28_000.0), t.nanos);
        assert_eq!(t.wall(Timing::Graph, 28_000.0), t.nanos);
    }

    #[test]
    fn grouped_single_tile_groups_stream_with_half_the_sms() {
        // One expert of 4 rows, w2 of Mixtral (14336 -> 4096): 64 x 128 tiles, 32 output
        // tiles, one M tile each: 32 working blocks of 66 resident clusters, each at the
        // per-SM rate 2.64 TB/s / 66 = 40 GB/s: 1.28 TB/s. Two experts of 64 rows: 64 blocks.
        let r = rates();
        let one = r.grouped_gemm(&GroupSums::of_counts(&[4]), 14336, 4096, 2.0);
        let bytes = 14336.0 * 4096.0 * 2.0 + 4.0 * (14336.0 + 4096.0) * 2.0;
        assert!((one.memory_ns - bytes / (32.0 * 40e9) * 1e9).abs() < 1e-3);
        // 128 rows: two M tiles, both blocks of each cluster stream: twice the rate.
        let two_tiles = r.grouped_gemm(&GroupSums::of_counts(&[128]), 14336, 4096, 2.0);
        let bytes128 = 14336.0 * 4096.0 * 2.0 + 128.0 * (14336.0 + 4096.0) * 2.0;
        assert!((two_tiles.memory_ns - bytes128 / (64.0 * 40e9) * 1e9).abs() < 1e-3);
        // Many groups fill the SMs: the rate caps at the half-SM rate for single tiles ...
        let many = r.grouped_gemm(&GroupSums::of_counts(&[4; 8]), 4096, 28672, 2.0);
        let bytes8 = 8.0 * 4096.0 * 28672.0 * 2.0 + 32.0 * (4096.0 + 28672.0) * 2.0;
        assert!((many.memory_ns - bytes8 / 2.64e12 * 1e9).abs() < 1e-3);
        // ... and at the streaming rate for pairs of tiles.
        let full = r.grouped_gemm(&GroupSums::of_counts(&[128; 8]), 4096, 28672, 2.0);
        let bytes_full = 8.0 * 4096.0 * 28672.0 * 2.0 + 1024.0 * (4096.0 + 28672.0) * 2.0;
        assert!((full.memory_ns - bytes_full / 4e12 * 1e9).abs() < 1e-3);
        // Compute: 129 mean rows pick 128 x 256 tiles; each group pads to 256 rows plus a
        // quarter tile.
        let big = r.grouped_gemm(&GroupSums::of_counts(&[129, 129]), 2048, 2816, 2.0);
        let rows = 2.0 * 256.0 + 0.25 * 128.0 * 2.0;
        let flops = 2.0 * 2048.0 * 11.0 * 256.0 * rows;
        assert!((big.compute_ns - flops / 640e12 * 1e9).abs() < 1e-6);
    }

    #[test]
    fn expected_groups_weigh_their_probability() {
        let mut half = GroupSums::default();
        half.add(3, 0.5);
        half.add(3, 0.5);
        let one = GroupSums::of_counts(&[3]);
        assert_eq!(half, one);
    }

    #[test]
    fn attention_kernels_by_hand() {
        let r = rates();
        // Decode: 1 sequence, 32 heads: 32 blocks at 40 GB/s = 1.28 TB/s for 64 MiB.
        let kv = 67_108_864.0;
        let t = r.decode_attention(1, 32, 128, kv, 32.0 * 16384.0);
        assert!((t.memory_ns - kv / 1.28e12 * 1e9).abs() < 1e-3);
        // 256 sequences: 8192 blocks, capped at 4 TB/s.
        let t = r.decode_attention(256, 32, 128, kv, 0.0);
        assert!((t.memory_ns - kv / 4e12 * 1e9).abs() < 1e-3);
        // Prefill of 256 tokens: 2 blocks of 128 -> 3 block pairs of 16384 (query, key) pairs
        // per head.
        let t = r.prefill_attention(256, 32, 128);
        let pairs = 32.0 * 3.0 * 16384.0;
        let compute = 512.0 * pairs / 800e12 * 1e9 + pairs / 4e12 * 1e9;
        assert!((t.compute_ns - compute).abs() < 1e-6);
    }

    /// `combine_lanes` on AVX lanes, where the CPU has AVX.
    fn avx_combine(p: u32, a: F64x4, b: F64x4) -> Option<F64x4> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            #[target_feature(enable = "avx")]
            fn on_avx(p: u32, a: F64x4, b: F64x4) -> F64x4 {
                use crate::lanes::avx::Avx;
                combine_lanes(p, Avx::load(a), Avx::load(b)).store()
            }
            // SAFETY: the CPU has AVX.
            return Some(unsafe { on_avx(p, a, b) });
        }
        None
    }

    #[test]
    fn lanes_give_each_gpu_the_bits_it_gets_alone() {
        // The p-norm: every lane is `combine` of its pair, bit for bit, on both sides of the
        // series' threshold, at the ridge, with a zero term, for every p.
        let pairs = [
            (1.0, 0.05),
            (0.1, 1.0),
            (3.0, 3.0),
            (7.0, 0.0),
            (2.5, 0.2813),
            (1e6, 99_999.7),
            (0.0, 4.0),
            (0.3, 0.29),
        ];
        for p in [1, 2, 4, 8, 16] {
            for w in pairs.windows(4) {
                let a = F64x4::new(std::array::from_fn(|i| w[i].0));
                let b = F64x4::new(std::array::from_fn(|i| w[i].1));
                let lanes = combine_lanes(p, a, b).to_array();
                // The AVX lanes too, where this CPU has AVX.
                let avx = avx_combine(p, a, b).map(F64x4::to_array);
                for (i, &(x, y)) in w.iter().enumerate() {
                    let bits = combine(p, x, y).to_bits();
                    assert_eq!(lanes[i].to_bits(), bits, "p {p}: {x}, {y}");
                    if let Some(avx) = avx {
                        assert_eq!(avx[i].to_bits(), bits, "AVX p {p}: {x}, {y}");
                    }
                }
            }
        }
        // The grouped GEMM: GPUs of either tile, above and below the cluster limit, slowed or
        // not, and an empty one, priced together as each alone.
        let r = rates();
        let counts: [&[u32]; 4] = [&[3, 0, 1], &[700, 650, 900, 20], &[], &[129, 130, 4000]];
        let speeds = [
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.8, 0.3),
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.93, 1.0),
        ];
        let sums = counts.map(GroupSums::of_counts);
        for shape in [
            GroupedShape::new(4096, 28672, 2.0),
            GroupedShape::new(2048, 128, 2.0),
        ] {
            let together = r.grouped_lanes(&r.lanes(&speeds), &shape, &LaneSums::of(&sums));
            for (i, (&speed, sums)) in speeds.iter().zip(&sums).enumerate() {
                let alone = r.scaled(speed).grouped(&shape, sums);
                for (x, y) in [
                    (together.get(i).nanos, alone.nanos),
                    (together.get(i).memory_ns, alone.memory_ns),
                    (together.get(i).compute_ns, alone.compute_ns),
                    (together.get(i).floor_ns, alone.floor_ns),
                ] {
                    assert_eq!(x.to_bits(), y.to_bits(), "lane {i}");
                }
            }
            assert_eq!(together.get(2), KernelTime::default());
        }
    }

    /// Row counts of `gpus` GPUs, `slots` each, from a fixed pseudo-random sequence: every
    /// tile boundary region, zeros (experts that do not run) and prefill-sized groups.
    pub(crate) fn count_sets(seed: u64, gpus: usize, slots: usize) -> Vec<Vec<u32>> {
        let mut x = seed;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32
        };
        (0..gpus)
            .map(|_| {
                (0..slots)
                    .map(|_| match next() % 4 {
                        0 => 0,
                        1 => next() % 140,
                        2 => 60 + next() % 200,
                        _ => next() % 5000,
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn counts_tallied_on_the_lanes_are_the_group_sums() {
        // The tile test without the division agrees with it for every whole mean near 128.
        for groups in 1..=16i64 {
            for rows in 0..=4 * 128 * groups {
                let counts: Vec<u32> = (0..groups)
                    .map(|g| (rows / groups + i64::from(g < rows % groups)) as u32)
                    .collect();
                let lanes = LaneSums::of_counts(&[&counts]);
                let divided = (rows as f64 / groups as f64) <= 128.0;
                let small = lanes.small.as_array()[0].to_bits() == u64::MAX;
                assert_eq!(small, divided || rows == 0, "{rows} rows over {groups}");
            }
        }
        // Every field of every lane: the bits of `of` over `GroupSums::of_counts`.
        for seed in 0..500 {
            let sets = count_sets(seed, 1 + seed as usize % LANES, 1 + seed as usize % 9);
            let counts: Vec<&[u32]> = sets.iter().map(Vec::as_slice).collect();
            let sums: Vec<GroupSums> = counts.iter().map(|c| GroupSums::of_counts(c)).collect();
            let (ints, floats) = (LaneSums::of_counts(&counts), LaneSums::of(&sums));
            assert_eq!(ints.empty, floats.empty);
            let bits = |v: F64x4| v.to_array().map(f64::to_bits);
            for i in (0..LANES).filter(|&i| !ints.empty[i]) {
                let pairs = [
                    (ints.groups, floats.groups),
                    (ints.rows, floats.rows),
                    (ints.small, floats.small),
                    (ints.tiles[0], floats.tiles[0]),
                    (ints.tiles[1], floats.tiles[1]),
                    (ints.padded_rows[0], floats.padded_rows[0]),
                    (ints.padded_rows[1], floats.padded_rows[1]),
                    (ints.clusters[0], floats.clusters[0]),
                    (ints.clusters[1], floats.clusters[1]),
                ];
                for (k, (a, b)) in pairs.into_iter().enumerate() {
                    assert_eq!(bits(a)[i], bits(b)[i], "seed {seed}, lane {i}, field {k}");
                }
            }
        }
    }

    #[test]
    fn whole_tallies_add_what_the_groups_add_one_by_one() {
        // Counts around every tile edge and large ones, on lanes of unequal lengths.
        let edges = [
            0u32, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 8191, 70_000,
        ];
        for seed in 0..300usize {
            let sets: Vec<Vec<u32>> = (0..LANES)
                .map(|i| {
                    (0..(seed + 3 * i) % 11)
                        .map(|j| edges[(seed * 7 + i * 5 + j * 3) % edges.len()])
                        .collect()
                })
                .collect();
            let mut each = LaneTally::<F64x4>::new();
            let longest = sets.iter().map(Vec::len).max().unwrap_or(0);
            for j in 0..longest {
                each.add(std::array::from_fn(|i| {
                    sets[i].get(j).copied().unwrap_or(0)
                }));
            }
            let mut sums = WholeTally::default();
            for j in 0..longest {
                sums.add(std::array::from_fn(|i| {
                    sets[i].get(j).copied().unwrap_or(0)
                }));
            }
            let mut whole = LaneTally::<F64x4>::new();
            whole.add_whole(&sums);
            let (a, b) = (each.finish(), whole.finish());
            let bits = |v: F64x4| v.to_array().map(f64::to_bits);
            assert_eq!(a.empty, b.empty, "seed {seed}");
            let fields = |s: &LaneSums| {
                [
                    s.groups,
                    s.rows,
                    s.small,
                    s.tiles[0],
                    s.tiles[1],
                    s.padded_rows[0],
                    s.padded_rows[1],
                    s.clusters[0],
                    s.clusters[1],
                ]
                .map(bits)
            };
            assert_eq!(fields(&a), fields(&b), "seed {seed}");
        }
    }

    #[test]
    fn streaming_lanes_are_streaming_alone() {
        let r = rates();
        let speeds = [
            SpeedFactors::NOMINAL,
            SpeedFactors::split(0.8, 0.3),
            SpeedFactors::split(0.93, 1.0),
            SpeedFactors::NOMINAL,
        ];
        for bytes in [[0.0, 1.0, 3.5e6, 1e9], [8.6e5, 0.0, 123_456.7, 2.2e11]] {
            let lanes = r
                .streaming_lanes(&r.lanes(&speeds), F64x4::new(bytes))
                .to_array();
            for i in 0..LANES {
                let alone = r.scaled(speeds[i]).streaming(bytes[i]).nanos;
                assert_eq!(lanes[i].to_bits(), alone.to_bits(), "{} bytes", bytes[i]);
            }
        }
    }
}
