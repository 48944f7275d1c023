//! Per-GPU MoE-layer cost curves (GEM's "variability profiles", section 3.3.2): for each GPU,
//! the latency of one MoE layer as a function of the tokens routed to that GPU, the staircase
//! the one MoE entry point gives at that GPU's speed (`planning_costs`), tabulated for the
//! mapping search.

use crate::cost::curve::CostCurve;
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};

/// The per-GPU token-vs-latency curves `C_g(n)` of one deployment, with dense integer lookup
/// tables (the mapping search evaluates them millions of times).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuCosts {
    curves: Vec<CostCurve>,
    /// `tables[g][n] = C_g(n)` for `n = 0..=table_limit`.
    tables: Vec<Vec<f64>>,
    /// `floors[g][i] = (n_i, least latency among samples i..)` of curve `g`'s samples `n_i`
    /// (`least_from`).
    floors: Vec<Vec<(f64, f64)>>,
    /// `least_tables[g][n] = least_from(g, n)` for `n = 0..=table_limit` (`least_below`).
    least_tables: Vec<Vec<f64>>,
    /// `rising_tables[g][n]`: the least of `tables[g][n..]` (`least_whole_from`).
    rising_tables: Vec<Vec<f64>>,
}

/// The per-GPU latency curves a mapper plans with (GEM's and the serving family's): GPU `g`
/// runs its MoE layer on `n` tokens spread as evenly as whole tokens allow over its
/// `experts_per_gpu` experts, at its own compute and bandwidth factors, through the one MoE
/// entry point (`MoeLayerCost::gpu`), tabulated at every whole token up to `table_limit`.
pub fn planning_costs(
    layer: &MoeLayerCost,
    experts_per_gpu: usize,
    speeds: &[SpeedFactors],
    table_limit: usize,
) -> GpuCosts {
    let limit = table_limit.max(1);
    GpuCosts::new(
        speeds
            .iter()
            .map(|&speed| {
                CostCurve::new(
                    (1..=limit)
                        .map(|n| {
                            let rows = ExpertRows::Even {
                                tokens: n as u64,
                                experts: experts_per_gpu,
                            };
                            (n as f64, layer.gpu(rows, speed).nanos)
                        })
                        .collect(),
                )
                .expect("positive increasing token counts and finite costs")
            })
            .collect(),
        limit,
    )
}

/// The compute and bandwidth factors of a GPU whose throughput factor is `throughput` on the
/// workload's MoE layer: `tokens` routed rows spread evenly over `experts_per_gpu` experts
/// (gem.txt section 4.2: per-GPU power caps calibrated so the GPU delivers that share of the
/// nominal throughput, Figure 14 inverted). A power cap lowers the SM clock `c`; HBM keeps its
/// own clock, so the bandwidth factor is `1 - (1 - c) x bandwidth_share` (1 by default), and
/// `c` is solved (bisection) so the layer takes `1 / throughput` as long as at nominal speed:
/// where the layer is memory-bound the clock falls further than the throughput. A factor of 1
/// or more is taken as the clock itself (a cap cannot raise the clock). See docs/cost-model.md,
/// "GPU variability".
pub fn throughput_speed(
    layer: &MoeLayerCost,
    experts_per_gpu: usize,
    tokens: u64,
    throughput: f64,
    bandwidth_share: f64,
) -> SpeedFactors {
    if throughput >= 1.0 {
        return SpeedFactors::split(throughput, bandwidth_share);
    }
    let rows = ExpertRows::Even {
        tokens: tokens.max(1),
        experts: experts_per_gpu,
    };
    let time = |clock: f64| {
        layer
            .gpu(rows, SpeedFactors::split(clock, bandwidth_share))
            .nanos
    };
    let target = time(1.0) / throughput;
    // The layer's time falls as the clock rises: keep `time(low) >= target > time(high)`.
    let (mut low, mut high) = (1e-3, 1.0);
    if time(low) < target {
        return SpeedFactors::split(low, bandwidth_share);
    }
    for _ in 0..60 {
        let mid = 0.5 * (low + high);
        if time(mid) >= target {
            low = mid;
        } else {
            high = mid;
        }
    }
    SpeedFactors::split(low, bandwidth_share)
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
        let floors = curves
            .iter()
            .map(|c| {
                let mut floor: Vec<(f64, f64)> = c.samples().collect();
                for i in (0..floor.len().saturating_sub(1)).rev() {
                    floor[i].1 = floor[i].1.min(floor[i + 1].1);
                }
                floor
            })
            .collect();
        let mut costs = GpuCosts {
            curves,
            tables,
            floors,
            least_tables: Vec::new(),
            rising_tables: Vec::new(),
        };
        costs.rising_tables = costs
            .tables
            .iter()
            .map(|table| {
                let mut least = table.clone();
                for n in (0..least.len().saturating_sub(1)).rev() {
                    least[n] = least[n].min(least[n + 1]);
                }
                least
            })
            .collect();
        costs.least_tables = (0..costs.curves.len())
            .map(|g| {
                (0..=table_limit)
                    .map(|n| costs.least_from(g, n as f64))
                    .collect()
            })
            .collect();
        costs
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

    /// Each GPU's curve (the tables are read off them).
    pub fn curves(&self) -> &[CostCurve] {
        &self.curves
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

    /// The least latency of GPU `gpu` at `tokens` or more: `min C_g(m)` over `m >= tokens` (a
    /// lower bound that holds where the curve is not monotone, e.g. where a larger tile starts;
    /// `C_g(tokens)` itself on a non-decreasing curve). The curve interpolates linearly between
    /// its samples and never falls past the last, so the least is at `tokens` or at a sample.
    pub fn least_from(&self, gpu: usize, tokens: f64) -> f64 {
        let floor = &self.floors[gpu];
        let at = self.cost(gpu, tokens);
        match floor.get(floor.partition_point(|&(n, _)| n < tokens)) {
            Some(&(_, least)) if least < at => least,
            _ => at,
        }
    }

    /// A lower bound of `least_from(gpu, tokens)` by lookup: the least cost at `floor(tokens)` or
    /// more (a superset of the counts `least_from` ranges over), tabulated at whole tokens up to
    /// the table limit; `least_from` itself past it. For a search's pruning, where a lookup is
    /// cheaper than the binary search and a slightly looser bound prunes as soundly.
    #[inline]
    pub fn least_below(&self, gpu: usize, tokens: f64) -> f64 {
        match self.least_tables[gpu].get(tokens as usize) {
            Some(&least) if tokens >= 0.0 => least,
            _ => self.least_from(gpu, tokens),
        }
    }

    /// GPU `gpu`'s least tabled cost from each whole count on: entry `n` is the least of
    /// `table(gpu)[n..]`, so it never falls as `n` grows, and at every whole count `m` from `n` to
    /// the table limit `C_g(m)` is at least entry `n` (the same values, compared, not computed).
    #[inline]
    pub fn least_whole_from(&self, gpu: usize) -> &[f64] {
        &self.rising_tables[gpu]
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
    fn scaled_curves_and_lookups() {
        let gpu = CostCurve::new(vec![(1.0, 10.0), (8.0, 20.0), (16.0, 40.0)]).unwrap();
        let slow = scaled_curve(&gpu, 0.5);
        assert_eq!(slow.at(16.0), 80.0);
        let costs = GpuCosts::scaled(&gpu, &[1.0, 0.5], 20);
        assert_eq!(costs.cost(1, 16.0), 80.0);
        assert_eq!(costs.table(0)[16], 40.0);
        assert_eq!(costs.cost(0, 100.0), gpu.at(100.0));
        assert_eq!(costs.cost(0, 9.5), gpu.at(9.5));
    }

    #[test]
    fn least_from_is_the_curves_least_cost_at_or_above_a_count() {
        // A staircase that falls where a larger tile starts (at 8 tokens), then rises again.
        let gpu =
            CostCurve::new(vec![(1.0, 10.0), (4.0, 40.0), (8.0, 20.0), (16.0, 60.0)]).unwrap();
        let costs = GpuCosts::new(vec![gpu.clone()], 16);
        // Below the fall, the least lies at 8 tokens; past it, the cost itself.
        assert_eq!(costs.least_from(0, 2.0), 20.0);
        assert_eq!(costs.least_from(0, 5.5), 20.0);
        assert_eq!(costs.least_from(0, 1.0), 10.0);
        assert_eq!(costs.least_from(0, 12.0), gpu.at(12.0));
        assert_eq!(costs.least_from(0, 100.0), gpu.at(100.0));
        // Never above any cost from there on.
        for n in 0..=40 {
            let x = f64::from(n) * 0.5;
            let least = (0..=200)
                .map(|m| gpu.at(x + f64::from(m) * 0.1))
                .fold(f64::INFINITY, f64::min);
            assert!(costs.least_from(0, x) <= least, "{x}");
        }
        // The lookup never exceeds the exact least, and equals it at whole tokens.
        for n in 0..=40 {
            let x = f64::from(n) * 0.5;
            assert!(costs.least_below(0, x) <= costs.least_from(0, x), "{x}");
            if n % 2 == 0 {
                assert_eq!(costs.least_below(0, x), costs.least_from(0, x), "{x}");
            }
        }
        assert_eq!(costs.least_below(0, 100.0), costs.least_from(0, 100.0));
        // The whole-token table's least from each count on: the least of the entries.
        let least = costs.least_whole_from(0);
        assert_eq!(least.len(), 17);
        for (n, &entry) in least.iter().enumerate() {
            let brute = costs.table(0)[n..]
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            assert_eq!(entry, brute, "{n}");
        }
        assert_eq!(least[2], 20.0);
        assert_eq!(least[12], gpu.at(12.0));
        // On a non-decreasing curve, the cost itself.
        let rising = GpuCosts::new(
            vec![CostCurve::new(vec![(1.0, 3.0), (9.0, 7.0)]).unwrap()],
            9,
        );
        for x in [0.5, 1.0, 2.5, 9.0, 20.0] {
            assert_eq!(rising.least_from(0, x), rising.cost(0, x));
        }
    }

    #[test]
    fn a_throughput_factor_is_met_on_the_workloads_layer_by_the_clock_alone() {
        use crate::cost::gpu::GpuSpec;
        use crate::cost::kernel::Timing;
        use crate::cost::shape::MoeModelShape;
        let layer = MoeLayerCost::new(
            &GpuSpec::by_name("H200").unwrap(),
            &MoeModelShape::mixtral_8x7b(),
            Timing::Graph,
        );
        let time = |tokens: u64, speed: SpeedFactors| {
            let rows = ExpertRows::Even { tokens, experts: 2 };
            layer.gpu(rows, speed).nanos
        };
        for tokens in [16, 1024, 8192] {
            let speed = throughput_speed(&layer, 2, tokens, 0.88, 0.0);
            // HBM untouched; the layer takes 1 / 0.88 as long.
            assert_eq!(speed.bandwidth, 1.0);
            let ratio = time(tokens, SpeedFactors::NOMINAL) / time(tokens, speed);
            assert!((ratio - 0.88).abs() < 1e-6, "{tokens} tokens: {ratio}");
            assert!(speed.compute <= 0.88 + 1e-9, "{tokens}: {speed:?}");
        }
        // A few decode rows per expert are memory-bound: the clock must fall far below 0.88
        // before the layer slows, unlike a compute-bound prefill-sized layer.
        let decode = throughput_speed(&layer, 2, 16, 0.88, 0.0).compute;
        let prefill = throughput_speed(&layer, 2, 8192, 0.88, 0.0).compute;
        assert!(decode < prefill - 0.1, "{decode} vs {prefill}");
        // A uniform slowdown reaches the factor at the factor itself, within the unscaled floors.
        let uniform = throughput_speed(&layer, 2, 8192, 0.88, 1.0);
        assert!((uniform.compute - 0.88).abs() < 0.02, "{uniform:?}");
    }

    #[test]
    fn planning_curves_are_each_gpus_even_spread_at_its_speed() {
        use crate::cost::gpu::GpuSpec;
        use crate::cost::kernel::Timing;
        use crate::cost::shape::MoeModelShape;
        let layer = MoeLayerCost::new(
            &GpuSpec::by_name("H200").unwrap(),
            &MoeModelShape::mixtral_8x7b(),
            Timing::Graph,
        );
        let speeds = [SpeedFactors::split(0.88, 0.0), SpeedFactors::NOMINAL];
        let costs = planning_costs(&layer, 2, &speeds, 300);
        for n in [1u64, 3, 64, 129, 300] {
            for (g, &speed) in speeds.iter().enumerate() {
                let rows = ExpertRows::Even {
                    tokens: n,
                    experts: 2,
                };
                assert_eq!(costs.cost(g, n as f64), layer.gpu(rows, speed).nanos);
            }
        }
        // A slower clock costs more once the layer is compute-bound, nothing while it streams.
        assert!(costs.cost(0, 300.0) > costs.cost(1, 300.0));
        assert!((costs.cost(0, 2.0) / costs.cost(1, 2.0) - 1.0).abs() < 1e-2);
    }

    #[test]
    fn a_measured_split_plans_its_fixed_part_once_per_gpu() {
        use crate::cost::gpu::GpuSpec;
        use crate::cost::kernel::Timing;
        use crate::cost::profile::{ExpertFfnCurve, MoeLayerSplit};
        use crate::cost::shape::{MoeModelShape, WeightDtype};
        // Fixed part 3 us; each expert's GEMM pair 10 us up to 4 rows, 20 us up to 8.
        let pair = CostCurve::new(vec![
            (1.0, 10_000.0),
            (4.0, 10_000.0),
            (5.0, 20_000.0),
            (8.0, 20_000.0),
        ])
        .unwrap();
        let shape = MoeModelShape::mixtral_8x7b();
        let entry = ExpertFfnCurve {
            hidden: shape.hidden,
            expert_ffn: shape.expert_ffn,
            dtype: WeightDtype::Bf16,
            curve: pair.clone(),
            split: Some(MoeLayerSplit {
                fixed: CostCurve::new(vec![(1.0, 3_000.0), (16.0, 3_000.0)]).unwrap(),
                expert_gemms: pair,
            }),
        };
        let layer = MoeLayerCost::new(&GpuSpec::by_name("H200").unwrap(), &shape, Timing::Graph)
            .with_profile(&entry);
        // A GPU at 0.5 of its clock and bandwidth slows its GEMM pairs, not its fixed part.
        let speeds = [SpeedFactors::NOMINAL, SpeedFactors::split(0.5, 1.0)];
        let costs = planning_costs(&layer, 2, &speeds, 16);
        assert_eq!(costs.cost(0, 1.0), 3_000.0 + 10_000.0);
        assert_eq!(costs.cost(0, 8.0), 3_000.0 + 2.0 * 10_000.0);
        assert_eq!(costs.cost(0, 10.0), 3_000.0 + 2.0 * 20_000.0);
        assert_eq!(costs.cost(1, 8.0), 3_000.0 + 2.0 * 2.0 * 10_000.0);
    }
}
