//! Operations priced from measured kernel timings where the data allow, by the roofline where
//! they do not, and always saying which (`CostSource`). A class of operations (a gated MLP, the
//! attention projections, the element-wise kernels of a layer) whose exact shape a measured op
//! profile of the same GPU holds at the tensor-parallel degree in use is **measured**: the sum
//! of its operations' series, interpolated between measured token counts. One of another shape
//! (or degree) is **scaled** from the nearest measured shape by the roofline's ratio of the two
//! at that token count, so bytes scale it where the roofline is memory-bound and FLOPs where it
//! is compute-bound. Past the last measured token count nothing is extrapolated from the
//! measurements: the roofline carries the last measured point on (its time times the
//! roofline's growth from there), labelled **scaled**. A class no profile of the GPU holds is
//! **analytic**. Collectives follow the same rule on a network profile's message sizes.
//! Derivation: docs/cost-model.md, "Pricing from measured operations".

use super::source::CostSource;
use crate::gpu::{GpuSpec, LinkSpec};
use crate::kernel::{KernelRates, KernelTime};
use crate::op_profile::{
    Collective, CollectiveSeries, NetworkProfile, OpProfile, OpSeries, Operation,
};
use crate::roofline::Roofline;
use serde::Serialize;

/// Bytes of one activation element (bf16), the unit of every element-wise kernel's traffic.
const ACTIVATION_BYTES: f64 = 2.0;

/// A class of a layer's operations that measured op profiles hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// A gated MLP (a dense model's MLP, a shared expert, one routed expert): the up (and
    /// gate) GEMM, the activation, the down GEMM.
    Mlp,
    /// The QKV and the attention-output GEMMs.
    AttentionProjections,
    /// The layer's element-wise kernels: the two norms, the rotary embedding, the residual add.
    Elementwise,
}

impl OpClass {
    /// The profiled operations the class sums, once each (as the profiler's layer runs them).
    pub fn operations(self) -> &'static [Operation] {
        match self {
            OpClass::Mlp => &Operation::MLP,
            OpClass::AttentionProjections => &[Operation::AttnPreProj, Operation::AttnPostProj],
            OpClass::Elementwise => &[
                Operation::InputLayernorm,
                Operation::AttnRope,
                Operation::PostAttentionLayernorm,
                Operation::Add,
            ],
        }
    }

    /// The class's measured time at `tensor_parallel` workers: (tokens, the sum of its
    /// operations' nanoseconds) at every token count all of them were measured at; empty when
    /// one of its operations was not profiled at that degree.
    pub fn measured_totals(self, profile: &OpProfile, tensor_parallel: u32) -> Vec<(u64, f64)> {
        let Some(series): Option<Vec<_>> = self
            .operations()
            .iter()
            .map(|&op| profile.series(op, tensor_parallel))
            .collect()
        else {
            return Vec::new();
        };
        series[0]
            .points
            .iter()
            .filter_map(|&(tokens, _)| {
                let total: Option<f64> = series.iter().map(|s| s.nanos_at(tokens).ok()).sum();
                total.map(|ns| (tokens, ns))
            })
            .collect()
    }
}

/// The dimensions a class of operations depends on: a dense model's layer, or with `ffn` the
/// expert's intermediate width, one expert's MLP.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LayerShape {
    pub hidden: u64,
    /// MLP intermediate width (before tensor-parallel sharding).
    pub ffn: u64,
    /// SwiGLU (up and gate projections) rather than one up projection.
    pub gated: bool,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    /// Bytes of one stored weight (bf16: 2).
    pub bytes_per_param: f64,
}

impl LayerShape {
    /// The shape an op profile was measured at (bf16 weights, `head_dim = hidden / heads`).
    pub fn of_profile(profile: &OpProfile) -> LayerShape {
        let s = &profile.shape;
        LayerShape {
            hidden: s.n_embd,
            ffn: s.n_expanded_embd,
            gated: s.use_gated_mlp,
            n_heads: s.n_head,
            n_kv_heads: s.n_kv_head,
            head_dim: s.n_embd / s.n_head.max(1),
            bytes_per_param: 2.0,
        }
    }

    /// Whether `other` has every dimension `class` depends on.
    fn same_for(&self, other: &LayerShape, class: OpClass) -> bool {
        let attention = (self.hidden, self.n_heads, self.n_kv_heads, self.head_dim)
            == (
                other.hidden,
                other.n_heads,
                other.n_kv_heads,
                other.head_dim,
            );
        match class {
            OpClass::Mlp => {
                (self.hidden, self.ffn, self.gated) == (other.hidden, other.ffn, other.gated)
                    && self.bytes_per_param == other.bytes_per_param
            }
            OpClass::AttentionProjections => {
                attention && self.bytes_per_param == other.bytes_per_param
            }
            OpClass::Elementwise => attention,
        }
    }

    /// Weight parameters `class` multiplies per row at tensor parallelism `tp` (0 for the
    /// element-wise kernels).
    fn params(&self, class: OpClass, tp: u32) -> f64 {
        let tp = f64::from(tp.max(1));
        let (h, q, kv) = (
            self.hidden as f64,
            (self.n_heads * self.head_dim) as f64,
            (self.n_kv_heads * self.head_dim) as f64,
        );
        match class {
            OpClass::Mlp => h * self.ffn as f64 * if self.gated { 3.0 } else { 2.0 } / tp,
            OpClass::AttentionProjections => (h * (q + 2.0 * kv) + q * h) / tp,
            OpClass::Elementwise => 0.0,
        }
    }

    /// The size [`nearest`] compares: the class's weights, or the hidden width for the
    /// element-wise kernels.
    fn size(&self, class: OpClass) -> f64 {
        match class {
            OpClass::Elementwise => self.hidden as f64,
            _ => self.params(class, 1),
        }
    }
}

/// The kernels of `class` on `shape` at tensor parallelism `tp` over `tokens` rows, as the
/// kernel model prices them (GPU side): a gated MLP's up (and gate) GEMM, activation and down
/// GEMM; the QKV and output projections; the element-wise kernels (two norms, the rotary
/// embedding, the residual add) each streaming its rows' bytes.
pub fn class_kernels(
    rates: &KernelRates,
    class: OpClass,
    shape: &LayerShape,
    tp: u32,
    tokens: u64,
) -> Vec<KernelTime> {
    let t = u64::from(tp.max(1));
    let rows = tokens as f64;
    let (h, bpp) = (shape.hidden, shape.bytes_per_param);
    match class {
        OpClass::Mlp => {
            let f = shape.ffn / t;
            let up = if shape.gated { 2 * f } else { f };
            vec![
                rates.gemm(tokens, h, up, bpp),
                rates.streaming(rows * (up + f) as f64 * ACTIVATION_BYTES),
                rates.gemm(tokens, f, h, bpp),
            ]
        }
        OpClass::AttentionProjections => {
            let q = shape.n_heads * shape.head_dim / t;
            let kv = shape.n_kv_heads * shape.head_dim / t;
            vec![
                rates.gemm(tokens, h, q + 2 * kv, bpp),
                rates.gemm(tokens, q, h, bpp),
            ]
        }
        OpClass::Elementwise => {
            let heads = ((shape.n_heads + shape.n_kv_heads) * shape.head_dim) as f64 / t as f64;
            let norm = rows * 2.0 * h as f64 * ACTIVATION_BYTES;
            vec![
                rates.streaming(norm),
                rates.streaming(rows * 2.0 * heads * ACTIVATION_BYTES),
                rates.streaming(norm),
                rates.streaming(rows * 3.0 * h as f64 * ACTIVATION_BYTES),
            ]
        }
    }
}

/// The kernel model's time of `class` on `shape` at tensor parallelism `tp` over `tokens` rows
/// on `roofline`'s GPU: its kernels' GPU-side times (`class_kernels`).
pub fn roofline_nanos(
    roofline: &Roofline,
    class: OpClass,
    shape: &LayerShape,
    tp: u32,
    tokens: u64,
) -> f64 {
    if tokens == 0 {
        return 0.0;
    }
    class_kernels(&roofline.rates, class, shape, tp, tokens)
        .iter()
        .map(|k| k.nanos)
        .sum()
}

/// A class of operations resolved against the measured profiles of one GPU, for one shape and
/// tensor-parallel degree: what prices it and how.
#[derive(Clone, Debug, PartialEq)]
pub struct PricedClass {
    pub class: OpClass,
    /// What prices the class inside the measured token range.
    pub source: CostSource,
    /// The measured model and degree it is priced from (`None`: analytic).
    pub from: Option<(String, u32)>,
    /// The measured series of the class's operations (empty: analytic).
    series: Vec<OpSeries>,
    measured_shape: LayerShape,
    target: LayerShape,
    tp: u32,
    roofline: Roofline,
    /// The measured token counts every series covers.
    range: (u64, u64),
}

impl PricedClass {
    /// The class's time over `tokens` rows, ns (0 for none).
    pub fn nanos(&self, tokens: u64) -> f64 {
        self.price(tokens).0
    }

    /// The time over `tokens` rows and what priced it.
    pub fn price(&self, tokens: u64) -> (f64, CostSource) {
        if tokens == 0 {
            return (0.0, self.source);
        }
        let analytic = |shape: &LayerShape, tp: u32, n: u64| {
            roofline_nanos(&self.roofline, self.class, shape, tp, n)
        };
        let Some((_, measured_tp)) = &self.from else {
            return (
                analytic(&self.target, self.tp, tokens),
                CostSource::Analytic,
            );
        };
        let (first, last) = self.range;
        let at = tokens.clamp(first, last);
        let measured: f64 = self
            .series
            .iter()
            .map(|s| s.nanos_at(at).expect("clamped into every series' range"))
            .sum();
        if at == tokens && self.source == CostSource::Measured {
            return (measured, CostSource::Measured);
        }
        let ratio = analytic(&self.target, self.tp, tokens)
            / analytic(&self.measured_shape, *measured_tp, at);
        (measured * ratio, CostSource::Scaled)
    }

    /// The measured token counts (`None`: analytic).
    pub fn measured_range(&self) -> Option<(u64, u64)> {
        self.from.as_ref().map(|_| self.range)
    }

    /// Every token count some series of the class was measured at, inside the common range,
    /// ascending: where a curve sampled from the class must have a point to reproduce the
    /// measurements' interpolation.
    pub fn measured_tokens(&self) -> Vec<u64> {
        let (first, last) = self.range;
        let mut tokens: Vec<u64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|&(t, _)| t))
            .filter(|t| (first..=last).contains(t))
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }
}

/// The measured op profiles of one GPU and its roofline.
#[derive(Clone, Debug)]
pub struct MeasuredOps {
    pub gpu: GpuSpec,
    pub roofline: Roofline,
    /// The profiles measured on this GPU, in the order given.
    pub profiles: Vec<OpProfile>,
}

impl MeasuredOps {
    /// The pricing on `gpu`, keeping the `profiles` measured on it.
    pub fn new(gpu: &GpuSpec, profiles: &[OpProfile]) -> MeasuredOps {
        MeasuredOps {
            gpu: gpu.clone(),
            roofline: Roofline::of(gpu),
            profiles: profiles
                .iter()
                .filter(|p| p.gpu.eq_ignore_ascii_case(&gpu.name))
                .cloned()
                .collect(),
        }
    }

    /// The series of `class`'s operations in `profile` at degree `tp`, if it has them all.
    fn series_of(profile: &OpProfile, class: OpClass, tp: u32) -> Option<Vec<OpSeries>> {
        class
            .operations()
            .iter()
            .map(|&op| profile.series(op, tp).cloned())
            .collect()
    }

    /// `class` on `target` at tensor parallelism `tp`: measured from a profile of the same
    /// shape with series at `tp`; otherwise scaled from the profile nearest in size
    /// (|ln(size ratio)|, the first on a tie), at `tp` if it has that degree, else at 1;
    /// analytic when no profile of the GPU has the class's operations.
    pub fn class(&self, class: OpClass, target: &LayerShape, tp: u32) -> PricedClass {
        let tp = tp.max(1);
        let exact = self.profiles.iter().find_map(|p| {
            let shape = LayerShape::of_profile(p);
            let series = Self::series_of(p, class, tp)?;
            target
                .same_for(&shape, class)
                .then_some((p, shape, series, tp, CostSource::Measured))
        });
        let chosen = exact.or_else(|| {
            let distance = |p: &OpProfile| {
                (target.size(class) / LayerShape::of_profile(p).size(class))
                    .ln()
                    .abs()
            };
            let mut nearest: Option<(&OpProfile, f64)> = None;
            for p in &self.profiles {
                if Self::series_of(p, class, 1).is_none() {
                    continue;
                }
                let d = distance(p);
                if nearest.is_none_or(|(_, best)| d < best) {
                    nearest = Some((p, d));
                }
            }
            let (p, _) = nearest?;
            let (series, degree) = match Self::series_of(p, class, tp) {
                Some(series) => (series, tp),
                None => (Self::series_of(p, class, 1)?, 1),
            };
            Some((
                p,
                LayerShape::of_profile(p),
                series,
                degree,
                CostSource::Scaled,
            ))
        });
        match chosen {
            Some((profile, measured_shape, series, degree, source)) => {
                let first = series.iter().map(|s| s.range().0).max().unwrap_or(1);
                let last = series.iter().map(|s| s.range().1).min().unwrap_or(1);
                PricedClass {
                    class,
                    source,
                    from: Some((profile.model.clone(), degree)),
                    series,
                    measured_shape,
                    target: *target,
                    tp,
                    roofline: self.roofline,
                    range: (first, last.max(first)),
                }
            }
            None => PricedClass {
                class,
                source: CostSource::Analytic,
                from: None,
                series: Vec::new(),
                measured_shape: *target,
                target: *target,
                tp,
                roofline: self.roofline,
                range: (0, 0),
            },
        }
    }
}

/// Collectives priced from a network profile where it has the collective, by the link's
/// analytic model where it does not.
#[derive(Clone, Debug, PartialEq)]
pub struct Collectives {
    pub network: Option<NetworkProfile>,
    /// The link of the analytic model (and of the roofline carried past the measured sizes).
    pub link: LinkSpec,
}

impl Collectives {
    /// A ring all-reduce of `bytes` over `workers` GPUs on `link`: `2 (w - 1) / w` of the
    /// bytes cross each GPU's link, plus the link latency (`cost::roofline`'s all-reduce).
    pub fn ring_all_reduce_nanos(link: &LinkSpec, bytes: f64, workers: u32) -> f64 {
        let w = f64::from(workers.max(1));
        link.latency_ns + bytes * 2.0 * (w - 1.0) / w / link.bandwidth_bytes_per_s * 1e9
    }

    /// One transfer of `bytes` between two GPUs on `link`.
    pub fn transfer_nanos(link: &LinkSpec, bytes: f64) -> f64 {
        link.latency_ns + bytes / link.bandwidth_bytes_per_s * 1e9
    }

    /// `series` at `bytes`: measured inside its sizes, the analytic model carried on from the
    /// nearest measured size outside them (scaled).
    fn measured(
        series: &CollectiveSeries,
        bytes: f64,
        analytic: impl Fn(f64) -> f64,
    ) -> (f64, CostSource) {
        let (first, last) = (series.points[0].0, series.points[series.points.len() - 1].0);
        let whole = bytes.round().max(0.0) as u64;
        if (first..=last).contains(&whole) {
            let t = series.nanos_at(whole).expect("inside the measured sizes");
            return (t, CostSource::Measured);
        }
        let edge = whole.clamp(first, last);
        let t = series.nanos_at(edge).expect("a measured size");
        (
            t * analytic(bytes) / analytic(edge as f64),
            CostSource::Scaled,
        )
    }

    /// An all-reduce of `bytes` over `workers` GPUs of one node: the profile's series of that
    /// many workers, all in one node, where present; the ring model on the link otherwise.
    /// One worker: 0.
    pub fn all_reduce(&self, bytes: f64, workers: u32) -> (f64, CostSource) {
        if workers <= 1 || bytes <= 0.0 {
            return (0.0, CostSource::Analytic);
        }
        let analytic = |b: f64| Self::ring_all_reduce_nanos(&self.link, b, workers);
        match self
            .network
            .as_ref()
            .and_then(|n| n.series(Collective::AllReduce, workers, workers))
        {
            Some(series) => Self::measured(series, bytes, analytic),
            None => (analytic(bytes), CostSource::Analytic),
        }
    }

    /// One expert-parallel all-to-all among `workers` GPUs of one node in which each GPU sends
    /// `bytes_per_peer` to every other: built from the measured two-GPU send/recv of the
    /// GPU's whole outgoing message, `(workers - 1) x bytes_per_peer` (on an NVSwitch node a
    /// GPU reaches every peer at its full link rate, so its sends share its links and the
    /// latency is paid once). Scaled (a measured send/recv applied to an all-to-all) where the
    /// profile has the series; one transfer on the link otherwise.
    pub fn all_to_all(&self, bytes_per_peer: f64, workers: u32) -> (f64, CostSource) {
        if workers <= 1 || bytes_per_peer <= 0.0 {
            return (0.0, CostSource::Analytic);
        }
        let bytes = bytes_per_peer * f64::from(workers - 1);
        let analytic = |b: f64| Self::transfer_nanos(&self.link, b);
        match self
            .network
            .as_ref()
            .and_then(|n| n.series(Collective::SendRecv, 2, 2))
        {
            Some(series) => (
                Self::measured(series, bytes, analytic).0,
                CostSource::Scaled,
            ),
            None => (analytic(bytes), CostSource::Analytic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_profile::{DataSource, MeasuredShape, OP_PROFILE_FORMAT_VERSION};
    use std::path::Path;

    fn vidur(file: &str) -> OpProfile {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur");
        OpProfile::load(&root.join(file)).unwrap()
    }

    fn a100() -> GpuSpec {
        GpuSpec::by_name("A100-80GB").unwrap()
    }

    /// A gated MLP of `hidden x ffn` in bf16 (an expert), 32 heads of 128.
    fn expert(hidden: u64, ffn: u64) -> LayerShape {
        LayerShape {
            hidden,
            ffn,
            gated: true,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            bytes_per_param: 2.0,
        }
    }

    /// A hand-built profile on the A100: hidden 4096, intermediate 14336, at TP 1 the MLP's three
    /// operations measured at 1, 64 and 128 tokens (10 / 20 / 40 us each).
    fn hand_built() -> OpProfile {
        let series = |operation| OpSeries {
            operation,
            tensor_parallel: 1,
            points: vec![(1, 10_000.0), (64, 20_000.0), (128, 40_000.0)],
        };
        OpProfile {
            format_version: OP_PROFILE_FORMAT_VERSION,
            gpu: "A100-80GB".into(),
            model: "hand/built".into(),
            shape: MeasuredShape {
                n_head: 32,
                n_kv_head: 8,
                n_embd: 4096,
                n_expanded_embd: 14336,
                vocab_size: 32000,
                use_gated_mlp: true,
            },
            source: DataSource {
                repository: "here".into(),
                commit: "0".into(),
                file: "none".into(),
                licence: "MIT".into(),
                statistic: "median".into(),
            },
            series: Operation::MLP.iter().map(|&op| series(op)).collect(),
        }
    }

    /// The kernel model's gated expert FFN on the A100: the up GEMM (h -> 2f), the SwiGLU
    /// (n rows x 3f x 2 B) and the down GEMM (f -> h), each GPU-side on the A100's rates.
    fn by_hand(h: f64, f: f64, n: u64) -> f64 {
        let r = crate::kernel::KernelRates::of(&a100());
        let (h, f) = (h as u64, f as u64);
        r.gemm(n, h, 2 * f, 2.0).nanos
            + r.streaming(n as f64 * 3.0 * f as f64 * 2.0).nanos
            + r.gemm(n, f, h, 2.0).nanos
    }

    #[test]
    fn measured_scaled_and_analytic_on_a_hand_built_profile() {
        let ops = MeasuredOps::new(&a100(), &[hand_built()]);
        // The measured shape: measured, exactly at measured points, linear between them.
        let mlp = ops.class(OpClass::Mlp, &expert(4096, 14336), 1);
        assert_eq!(mlp.source, CostSource::Measured);
        assert_eq!(mlp.price(64), (60_000.0, CostSource::Measured));
        assert_eq!(mlp.price(128), (120_000.0, CostSource::Measured));
        // 96 tokens: halfway from 64 (3 x 20 us) to 128 (3 x 40 us).
        assert_eq!(mlp.price(96), (90_000.0, CostSource::Measured));
        // 65 tokens: 1/64 of the way.
        assert!((mlp.nanos(65) - (60_000.0 + 60_000.0 / 64.0)).abs() < 1e-9);

        // Past 128 tokens the roofline carries the last point on, never the measured slope:
        // 256 tokens cost the 128-token measurement times the roofline's 256 / 128 ratio.
        let (past, source) = mlp.price(256);
        assert_eq!(source, CostSource::Scaled);
        let expected = 120_000.0 * by_hand(4096.0, 14336.0, 256) / by_hand(4096.0, 14336.0, 128);
        assert!((past - expected).abs() < 1e-6, "{past} vs {expected}");
        // The measured slope (60 us per 64 tokens) would have given 240 us; the roofline's
        // compute-bound growth gives about 1.95x.
        assert!((past - 240_000.0).abs() > 1_000.0);

        // Another shape: the measurement times the roofline's ratio of the two shapes. At 64
        // tokens both are memory-bound, so the ratio is that of the weights plus launches.
        let small = ops.class(OpClass::Mlp, &expert(2048, 1408), 1);
        assert_eq!(small.source, CostSource::Scaled);
        let (scaled, source) = small.price(64);
        assert_eq!(source, CostSource::Scaled);
        let expected = 60_000.0 * by_hand(2048.0, 1408.0, 64) / by_hand(4096.0, 14336.0, 64);
        assert!((scaled - expected).abs() < 1e-6, "{scaled} vs {expected}");

        // A degree the profile lacks is scaled from its TP 1 series.
        let tp2 = ops.class(OpClass::Mlp, &expert(4096, 14336), 2);
        assert_eq!(tp2.source, CostSource::Scaled);
        assert_eq!(tp2.from, Some(("hand/built".to_string(), 1)));

        // The profile has no attention projections: analytic, the roofline itself.
        let attention = ops.class(OpClass::AttentionProjections, &expert(4096, 14336), 1);
        assert_eq!(attention.source, CostSource::Analytic);
        assert_eq!(attention.measured_range(), None);
        let (t, source) = attention.price(1);
        assert_eq!(source, CostSource::Analytic);
        // The QKV GEMM (4096 -> 6144) and the output projection (4096 -> 4096) of one row.
        let r = crate::kernel::KernelRates::of(&a100());
        let by_hand = r.gemm(1, 4096, 6144, 2.0).nanos + r.gemm(1, 4096, 4096, 2.0).nanos;
        assert!((t - by_hand).abs() < 1e-6);

        // Another GPU's profile prices nothing here.
        let h100 = MeasuredOps::new(&GpuSpec::by_name("H100-SXM").unwrap(), &[hand_built()]);
        assert!(h100.profiles.is_empty());
        let mlp = h100.class(OpClass::Mlp, &expert(4096, 14336), 1);
        assert_eq!(mlp.price(64).1, CostSource::Analytic);
        assert_eq!(mlp.nanos(0), 0.0);
    }

    #[test]
    fn one_mixtral_expert_is_the_measured_llama3_mlp() {
        // One Mixtral-8x7B expert is Llama-3-8B's MLP (4096 x 14336): measured on the A100.
        let llama3 = vidur("a100/Meta-Llama-3-8B.json");
        let ops = MeasuredOps::new(
            &a100(),
            &[
                vidur("a100/Llama-2-7b-hf.json"),
                llama3.clone(),
                vidur("h100/Llama-2-7b-hf.json"),
            ],
        );
        let mlp = ops.class(OpClass::Mlp, &expert(4096, 14336), 1);
        assert_eq!(mlp.from, Some(("meta-llama/Meta-Llama-3-8B".into(), 1)));
        for tokens in [1, 64, 100, 1024, 32_768] {
            let measured: f64 = Operation::MLP
                .iter()
                .map(|&op| llama3.series(op, 1).unwrap().nanos_at(tokens).unwrap())
                .sum();
            assert_eq!(mlp.price(tokens), (measured, CostSource::Measured));
        }
        // Its attention (32 heads, 8 KV heads of 128) is Llama-3-8B's too, at every degree.
        let attention = ops.class(OpClass::AttentionProjections, &expert(4096, 14336), 4);
        assert_eq!(attention.source, CostSource::Measured);
        assert_eq!(
            attention.from,
            Some(("meta-llama/Meta-Llama-3-8B".into(), 4))
        );
    }

    #[test]
    fn scaling_one_measured_shape_predicts_another() {
        // Scaled from Llama-2-7B's MLP alone, Llama-3-8B's (14336 wide, 1.30x the parameters)
        // against its own measurement on the A100: within 12 % from 1 to 4096 tokens, where the
        // roofline alone is off by up to 20 % (docs/cost-model.md).
        let only_llama2 = MeasuredOps::new(&a100(), &[vidur("a100/Llama-2-7b-hf.json")]);
        let llama3 = vidur("a100/Meta-Llama-3-8B.json");
        let mlp = only_llama2.class(OpClass::Mlp, &expert(4096, 14336), 1);
        for tokens in [1u64, 16, 64, 256, 1024, 2048, 4096] {
            let (nanos, source) = mlp.price(tokens);
            assert_eq!(source, CostSource::Scaled);
            let measured: f64 = Operation::MLP
                .iter()
                .map(|&op| llama3.series(op, 1).unwrap().nanos_at(tokens).unwrap())
                .sum();
            let ratio = nanos / measured;
            assert!((0.88..1.12).contains(&ratio), "{tokens} tokens: {ratio:.3}");
        }
    }

    fn network(series: Vec<CollectiveSeries>) -> Collectives {
        Collectives {
            network: Some(NetworkProfile {
                format_version: OP_PROFILE_FORMAT_VERSION,
                topology: "hand".into(),
                sources: Vec::new(),
                series,
            }),
            link: LinkSpec {
                bandwidth_bytes_per_s: 100e9,
                latency_ns: 10_000.0,
            },
        }
    }

    #[test]
    fn an_all_reduce_from_a_network_profile_row_by_hand() {
        // Two GPUs of one node: 1 MiB in 20 us, 2 MiB in 30 us.
        let c = network(vec![CollectiveSeries {
            collective: Collective::AllReduce,
            workers: 2,
            devices_per_node: 2,
            points: vec![(1 << 20, 20_000.0), (2 << 20, 30_000.0)],
        }]);
        assert_eq!(
            c.all_reduce((1 << 20) as f64, 2),
            (20_000.0, CostSource::Measured)
        );
        // 1.5 MiB: halfway, 25 us.
        assert_eq!(
            c.all_reduce(1.5 * (1 << 20) as f64, 2),
            (25_000.0, CostSource::Measured)
        );
        // 4 MiB, past the last size: the 2 MiB measurement times the ring model's growth,
        // (10 us + 4 MiB / 100 GB/s) / (10 us + 2 MiB / 100 GB/s) (2 (w - 1) / w = 1).
        let (t, source) = c.all_reduce((4 << 20) as f64, 2);
        assert_eq!(source, CostSource::Scaled);
        let ring = |b: f64| 10_000.0 + b / 100e9 * 1e9;
        let expected = 30_000.0 * ring((4 << 20) as f64) / ring((2 << 20) as f64);
        assert!((t - expected).abs() < 1e-6, "{t} vs {expected}");
        // Four workers are not in the profile: the ring model, 2 x 3/4 of the bytes.
        let (t, source) = c.all_reduce((1 << 20) as f64, 4);
        assert_eq!(source, CostSource::Analytic);
        assert!((t - (10_000.0 + (1 << 20) as f64 * 1.5 / 100e9 * 1e9)).abs() < 1e-6);
        assert_eq!(c.all_reduce(1e6, 1), (0.0, CostSource::Analytic));
    }

    #[test]
    fn an_all_to_all_is_built_from_send_recv() {
        // A GPU of 4 sends 1 MiB to each of 3 peers: one 3 MiB transfer, measured 2 MiB in
        // 20 us and 4 MiB in 40 us: 30 us.
        let c = network(vec![CollectiveSeries {
            collective: Collective::SendRecv,
            workers: 2,
            devices_per_node: 2,
            points: vec![(2 << 20, 20_000.0), (4 << 20, 40_000.0)],
        }]);
        assert_eq!(
            c.all_to_all((1 << 20) as f64, 4),
            (30_000.0, CostSource::Scaled)
        );
        let without = Collectives { network: None, ..c };
        let (t, source) = without.all_to_all((1 << 20) as f64, 4);
        assert_eq!(source, CostSource::Analytic);
        assert!((t - (10_000.0 + (3 << 20) as f64 / 100e9 * 1e9)).abs() < 1e-6);
    }

    #[test]
    fn committed_network_profiles_price_an_all_reduce() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur");
        let network = NetworkProfile::load(&root.join("network/a100_dgx.json")).unwrap();
        let series = network.series(Collective::AllReduce, 4, 4).unwrap().clone();
        let c = Collectives {
            network: Some(network),
            link: LinkSpec::PCIE4_X16,
        };
        let (bytes, nanos) = series.points[10];
        assert_eq!(c.all_reduce(bytes as f64, 4), (nanos, CostSource::Measured));
    }
}
