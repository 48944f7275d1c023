//! Per-GPU MoE-layer cost curves (GEM's "variability profiles", section 3.3.2): for each GPU,
//! the latency of one MoE layer as a function of the tokens routed to that GPU, a staircase
//! derived from a profile's expert-FFN curve and scaled by the GPU's speed factor.

use crate::cost::curve::CostCurve;
use crate::cost::profile::ExpertFfnCurve;

/// The per-GPU token-vs-latency curves `C_g(n)` of one deployment, with dense integer lookup
/// tables (the mapping search evaluates them millions of times).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuCosts {
    curves: Vec<CostCurve>,
    /// `tables[g][n] = C_g(n)` for `n = 0..=table_limit`.
    tables: Vec<Vec<f64>>,
}

/// The MoE-layer curve of one GPU at speed 1 that hosts `experts_per_gpu` experts: `n` routed
/// tokens spread evenly over `a = min(experts_per_gpu, n)` active experts cost, with the
/// profile's split of the layer (cost/profile.rs `MoeLayerSplit`), `fixed(n) + a x g(n / a)`
/// (the layer's kernels around its GEMMs once, each active expert's GEMM pair `g`); without
/// one, from the expert curve `e(n)`, `launch_ns` of which is kernel-launch overhead:
/// `launch_ns + a x (e(n / a) - launch_ns)` — a fused MoE kernel launches once per layer for
/// all its local experts, and an expert that receives no token is not run. Sampled exactly: at
/// every count up to `experts_per_gpu`, then at `experts_per_gpu` times each sample of the
/// expert curve, so the tile steps of the expert curve (at multiples of its tile) reappear at
/// multiples of `experts_per_gpu x tile`, and at the fixed part's own samples.
pub fn gpu_layer_curve(
    expert: &ExpertFfnCurve,
    experts_per_gpu: usize,
    launch_ns: f64,
) -> CostCurve {
    let m = experts_per_gpu.max(1) as f64;
    let cost = |n: f64| {
        let active = m.min(n.max(1.0));
        match &expert.split {
            Some(split) => split.fixed.at(n.max(1.0)) + active * split.expert_gemms.at(n / active),
            None => launch_ns + active * (expert.curve.at(n / active) - launch_ns).max(0.0),
        }
    };
    let per_expert = match &expert.split {
        Some(split) => &split.expert_gemms,
        None => &expert.curve,
    };
    let mut points: Vec<f64> = (1..=experts_per_gpu.max(1)).map(|n| n as f64).collect();
    if let Some(split) = &expert.split {
        points.extend(split.fixed.samples().map(|(n, _)| n));
    }
    for (tokens, _) in per_expert.samples() {
        let n = tokens * m;
        if n > m {
            points.push(n);
        }
    }
    points.sort_by(f64::total_cmp);
    points.dedup();
    CostCurve::new(points.into_iter().map(|n| (n, cost(n))).collect())
        .expect("positive increasing token counts and finite costs")
}

/// `curve` with every latency divided by `speed` (a GPU with speed 0.88 delivers 88 % of the
/// nominal throughput, so each step takes 1 / 0.88 as long).
pub fn scaled_curve(curve: &CostCurve, speed: f64) -> CostCurve {
    assert!(speed > 0.0, "scaled_curve: speed {speed} must be positive");
    CostCurve::new(curve.samples().map(|(n, ns)| (n, ns / speed)).collect())
        .expect("scaling keeps a curve valid")
}

impl GpuCosts {
    /// One curve per GPU; integer lookups are tabulated up to `table_limit` tokens.
    pub fn new(curves: Vec<CostCurve>, table_limit: usize) -> GpuCosts {
        assert!(!curves.is_empty(), "GpuCosts needs at least one GPU");
        let tables = curves
            .iter()
            .map(|c| (0..=table_limit).map(|n| c.at(n as f64)).collect())
            .collect();
        GpuCosts { curves, tables }
    }

    /// GPU `g` runs `base` at speed `speeds[g]`.
    pub fn scaled(base: &CostCurve, speeds: &[f64], table_limit: usize) -> GpuCosts {
        GpuCosts::new(
            speeds.iter().map(|&s| scaled_curve(base, s)).collect(),
            table_limit,
        )
    }

    pub fn n_gpus(&self) -> usize {
        self.curves.len()
    }

    /// Largest token count served from the lookup tables.
    pub fn table_limit(&self) -> usize {
        self.tables[0].len() - 1
    }

    /// `C_g(tokens)` in nanoseconds (fractional counts interpolate).
    #[inline]
    pub fn cost(&self, gpu: usize, tokens: f64) -> f64 {
        let rounded = tokens as usize;
        if rounded as f64 == tokens && rounded < self.tables[gpu].len() {
            self.tables[gpu][rounded]
        } else {
            self.curves[gpu].at(tokens)
        }
    }

    /// The lookup table of GPU `gpu`: entry `n` is `C_g(n)`.
    #[inline]
    pub fn table(&self, gpu: usize) -> &[f64] {
        &self.tables[gpu]
    }

    /// The curve of GPU `gpu`.
    pub fn curve(&self, gpu: usize) -> &CostCurve {
        &self.curves[gpu]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_curve_spreads_tokens_over_active_experts() {
        // Expert: 10 ns floor up to 4 tokens, +10 ns per further 4-token tile.
        let curve =
            CostCurve::new(vec![(1.0, 10.0), (4.0, 10.0), (5.0, 20.0), (8.0, 20.0)]).unwrap();
        let expert = ExpertFfnCurve {
            hidden: 64,
            expert_ffn: 64,
            dtype: crate::cost::shape::WeightDtype::Bf16,
            curve: curve.clone(),
            split: None,
        };
        let gpu = gpu_layer_curve(&expert, 2, 0.0);
        // A launch overhead is paid once per layer, not once per expert.
        assert_eq!(gpu_layer_curve(&expert, 2, 4.0).at(2.0), 4.0 + 2.0 * 6.0);
        assert_eq!(gpu.at(1.0), 10.0); // one expert, one token
        assert_eq!(gpu.at(2.0), 20.0); // two experts, one token each
        assert_eq!(gpu.at(8.0), 20.0); // two experts, four tokens each
        assert_eq!(gpu.at(10.0), 40.0); // five each: second tile
        assert_eq!(gpu.at(16.0), 40.0);
        let slow = scaled_curve(&gpu, 0.5);
        assert_eq!(slow.at(16.0), 80.0);
        let costs = GpuCosts::scaled(&gpu, &[1.0, 0.5], 20);
        assert_eq!(costs.cost(1, 10.0), 80.0);
        assert_eq!(costs.table(0)[10], 40.0);
        assert_eq!(costs.cost(0, 100.0), gpu.at(100.0));
        assert_eq!(costs.cost(0, 9.5), gpu.at(9.5));
        // Split by mechanism: the fixed part (3 ns) once, each active expert's GEMM pair.
        let split = ExpertFfnCurve {
            split: Some(crate::cost::profile::MoeLayerSplit {
                fixed: CostCurve::new(vec![(1.0, 3.0), (16.0, 3.0)]).unwrap(),
                expert_gemms: curve,
            }),
            ..expert
        };
        let gpu = gpu_layer_curve(&split, 2, 100.0);
        assert_eq!(gpu.at(1.0), 3.0 + 10.0);
        assert_eq!(gpu.at(8.0), 3.0 + 2.0 * 10.0);
        assert_eq!(gpu.at(10.0), 3.0 + 2.0 * 20.0);
    }
}
