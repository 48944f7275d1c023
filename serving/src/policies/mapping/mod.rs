//! The expert-mapping extension point: which GPU hosts which expert of one MoE layer.
//! `ExpertMapper` is the trait, `MapperConfig` the serde registry of the policies
//! (implemented in `strategies::mapping`), `LayerMapping` the result, `LayerProblem` what a
//! mapper sees (with the per-GPU cost curves of `gpu_costs`), and `score` the GEM score S(M) of
//! equation 1. GEM brought the point; the serving family's expert mapping uses it as well.

pub mod gpu_costs;

use crate::rng::SimRng;
use gpu_costs::GpuCosts;
use serde::{Deserialize, Serialize};

/// Where each expert of one layer lives: `slots[g]` lists the experts GPU `g` hosts. An expert
/// listed on several GPUs (an EPLB replica) has its tokens split evenly among its copies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerMapping {
    pub slots: Vec<Vec<usize>>,
}

/// A mapping that breaks the rules every mapper must keep.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("mapping has {found} GPUs, expected {expected}")]
    GpuCount { found: usize, expected: usize },
    #[error("expert {expert} is out of range (the layer has {n_experts} experts)")]
    ExpertOutOfRange { expert: usize, n_experts: usize },
    #[error("expert {expert} is not placed on any GPU")]
    Unplaced { expert: usize },
    #[error(
        "GPU {gpu} hosts {found} expert slots, GPU 0 hosts {expected}; every GPU must host as many"
    )]
    UnequalSlots {
        gpu: usize,
        found: usize,
        expected: usize,
    },
}

impl LayerMapping {
    /// The mapping in which expert `e` lives on GPU `gpu_of_expert[e]`.
    pub fn from_assignment(gpu_of_expert: &[usize], n_gpus: usize) -> LayerMapping {
        let mut slots = vec![Vec::new(); n_gpus];
        for (expert, &gpu) in gpu_of_expert.iter().enumerate() {
            slots[gpu].push(expert);
        }
        LayerMapping { slots }
    }

    pub fn n_gpus(&self) -> usize {
        self.slots.len()
    }

    /// Copies of each expert.
    pub fn replica_counts(&self, n_experts: usize) -> Vec<usize> {
        let mut counts = vec![0; n_experts];
        for &e in self.slots.iter().flatten() {
            if e < n_experts {
                counts[e] += 1;
            }
        }
        counts
    }

    /// Checks the invariants: `n_gpus` GPUs, every expert in range and placed at least once,
    /// and the same number of slots on every GPU. (Two replicas of one expert may share a
    /// GPU, as DeepSeek's EPLB allows; they split the expert's tokens like any replicas.)
    pub fn check(&self, n_experts: usize, n_gpus: usize) -> Result<(), MappingError> {
        if self.slots.len() != n_gpus {
            return Err(MappingError::GpuCount {
                found: self.slots.len(),
                expected: n_gpus,
            });
        }
        for (gpu, slots) in self.slots.iter().enumerate() {
            if let Some(&e) = slots.iter().find(|&&e| e >= n_experts) {
                return Err(MappingError::ExpertOutOfRange {
                    expert: e,
                    n_experts,
                });
            }
            if slots.len() != self.slots[0].len() {
                return Err(MappingError::UnequalSlots {
                    gpu,
                    found: slots.len(),
                    expected: self.slots[0].len(),
                });
            }
        }
        if let Some(expert) = self.replica_counts(n_experts).iter().position(|&c| c == 0) {
            return Err(MappingError::Unplaced { expert });
        }
        Ok(())
    }

    /// Tokens each GPU receives when expert `e` receives `loads[e]`.
    pub fn gpu_tokens(&self, loads: &[f32]) -> Vec<f64> {
        let replicas = self.replica_counts(loads.len());
        self.slots
            .iter()
            .map(|slots| {
                slots
                    .iter()
                    .map(|&e| f64::from(loads[e]) / replicas[e] as f64)
                    .sum()
            })
            .collect()
    }
}

/// What a mapper sees for one layer: the trace window (tokens per expert per step) and the
/// per-GPU cost curves.
#[derive(Clone, Copy, Debug)]
pub struct LayerProblem<'a> {
    pub layer: usize,
    pub n_experts: usize,
    /// `window[t * n_experts + e]`: tokens routed to expert `e` at window step `t`.
    pub window: &'a [f32],
    pub costs: &'a GpuCosts,
}

impl LayerProblem<'_> {
    pub fn n_gpus(&self) -> usize {
        self.costs.n_gpus()
    }
    pub fn n_steps(&self) -> usize {
        self.window.len() / self.n_experts.max(1)
    }
    /// Tokens of window step `t`, one entry per expert.
    pub fn step(&self, t: usize) -> &[f32] {
        &self.window[t * self.n_experts..(t + 1) * self.n_experts]
    }
    /// Mean tokens per step of each expert over the window (`u` of Appendix B).
    pub fn mean_utilization(&self) -> Vec<f64> {
        let mut u = vec![0.0; self.n_experts];
        for t in 0..self.n_steps() {
            for (acc, &x) in u.iter_mut().zip(self.step(t)) {
                *acc += f64::from(x);
            }
        }
        let steps = self.n_steps().max(1) as f64;
        u.iter_mut().for_each(|x| *x /= steps);
        u
    }
}

/// GEM's score (equation 1): the sum over the window's steps of the slowest GPU's latency,
/// `S(M) = sum_t max_g C_g(n_g(M, t))`, in nanoseconds.
pub fn score(mapping: &LayerMapping, problem: &LayerProblem<'_>) -> f64 {
    (0..problem.n_steps())
        .map(|t| {
            mapping
                .gpu_tokens(problem.step(t))
                .iter()
                .enumerate()
                .map(|(g, &n)| problem.costs.cost(g, n))
                .fold(0.0, f64::max)
        })
        .sum()
}

/// A policy that maps the experts of one layer to GPUs. Called once per layer, in layer
/// order, with the layer's own random stream; the result must pass [`LayerMapping::check`].
pub trait ExpertMapper {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, rng: &mut SimRng) -> LayerMapping;
}

fn default_gem_restarts() -> usize {
    30
}
fn default_window() -> usize {
    16
}
fn default_gem_noise() -> f64 {
    0.2
}
fn default_min_relative_drop() -> f64 {
    0.001
}
fn default_true() -> bool {
    true
}
fn default_one() -> usize {
    1
}

/// The registry of expert-mapping policies, named in a scenario by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MapperConfig {
    /// vLLM's default: contiguous blocks of experts by index (remainder to the first ranks).
    Linear,
    /// Expert `e` on GPU `e mod G`.
    RoundRobin,
    /// DeepSeek's expert-parallel load balancer over the window's summed loads.
    Eplb {
        /// Extra physical slots holding replicas of the heaviest experts (0 by default).
        #[serde(default)]
        redundant_slots: usize,
        /// Expert groups (hierarchical policy when they divide among the nodes).
        #[serde(default = "default_one")]
        n_groups: usize,
        /// Nodes the GPUs are spread over.
        #[serde(default = "default_one")]
        n_nodes: usize,
        /// Trace steps whose loads are summed.
        #[serde(default = "default_window")]
        window: usize,
    },
    /// GEM (gem.txt Algorithms 2-4).
    Gem {
        /// K, independent restarts.
        #[serde(default = "default_gem_restarts")]
        restarts: usize,
        /// Trace steps the search scores mappings on.
        #[serde(default = "default_window")]
        window: usize,
        /// Relative utilization noise of restarts after the first (0.2 = 20 %).
        #[serde(default = "default_gem_noise")]
        noise: f64,
        /// Refinement stops after a best swap that lowers the score by less than this
        /// fraction (0.001 = 0.1 %).
        #[serde(default = "default_min_relative_drop")]
        min_relative_drop: f64,
        /// Keep the linear mapping (the one deployed while the trace was collected) when it
        /// scores better than every restart.
        #[serde(default = "default_true")]
        keep_linear_if_better: bool,
    },
}

impl MapperConfig {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            MapperConfig::Linear => "linear",
            MapperConfig::RoundRobin => "round_robin",
            MapperConfig::Eplb { .. } => "eplb",
            MapperConfig::Gem { .. } => "gem",
        }
    }

    /// Trace steps the mapper reads (0 for trace-oblivious mappers).
    pub fn window(&self) -> usize {
        match self {
            MapperConfig::Linear | MapperConfig::RoundRobin => 0,
            MapperConfig::Eplb { window, .. } | MapperConfig::Gem { window, .. } => *window,
        }
    }

    /// What the mapper holds in memory for a model of `layers` x `experts`, as `[limits]`
    /// demands caused by fields under `prefix`: the window of observed steps (trace steps, and
    /// routing entries per layer and expert) and GEM's restarts (a utilization vector per
    /// restart and layer).
    pub fn demands(
        &self,
        layers: usize,
        experts: usize,
        prefix: &str,
    ) -> Vec<crate::validate::limits::Demand> {
        use crate::validate::limits::{Demand, Quantity};
        let per_step = layers as f64 * experts as f64;
        let window = self.window() as f64;
        let mut d = Vec::new();
        if window > 0.0 {
            let field = format!("{prefix}.window");
            d.push(Demand::new(Quantity::TraceSteps, window, &field));
            d.push(Demand::new(
                Quantity::RoutingEntries,
                window * per_step,
                &field,
            ));
        }
        if let MapperConfig::Gem { restarts, .. } = self {
            d.push(Demand::new(
                Quantity::RoutingEntries,
                *restarts as f64 * per_step,
                &format!("{prefix}.restarts"),
            ));
        }
        d
    }

    /// Checks the parameters against the deployment; errors are (field under `mapper`, message).
    pub fn check(
        &self,
        n_experts: usize,
        n_gpus: usize,
        observed_steps: usize,
    ) -> Result<(), (&'static str, String)> {
        let window = self.window();
        if window > observed_steps {
            return Err((
                "window",
                format!(
                    "= {window} exceeds the trace's observed steps ({observed_steps}); raise trace.observed_steps"
                ),
            ));
        }
        match self {
            MapperConfig::Linear | MapperConfig::RoundRobin => Ok(()),
            MapperConfig::Eplb {
                redundant_slots,
                n_groups,
                n_nodes,
                window,
            } => {
                if *window == 0 {
                    return Err(("window", "must be at least 1".into()));
                }
                if !(n_experts + redundant_slots).is_multiple_of(n_gpus) {
                    return Err((
                        "redundant_slots",
                        format!(
                            "= {redundant_slots}: {n_experts} experts + {redundant_slots} redundant slots must divide evenly over {n_gpus} GPUs"
                        ),
                    ));
                }
                if *n_groups == 0 || !n_experts.is_multiple_of(*n_groups) {
                    return Err((
                        "n_groups",
                        format!(
                            "= {n_groups} must be at least 1 and divide the {n_experts} experts"
                        ),
                    ));
                }
                if *n_nodes == 0 || !n_gpus.is_multiple_of(*n_nodes) {
                    return Err((
                        "n_nodes",
                        format!("= {n_nodes} must be at least 1 and divide the {n_gpus} GPUs"),
                    ));
                }
                Ok(())
            }
            MapperConfig::Gem {
                restarts,
                window,
                noise,
                min_relative_drop,
                ..
            } => {
                if *restarts == 0 {
                    return Err(("restarts", "must be at least 1".into()));
                }
                if *window == 0 {
                    return Err(("window", "must be at least 1".into()));
                }
                if !(noise.is_finite() && (0.0..1.0).contains(noise)) {
                    return Err(("noise", format!("must be in [0, 1), got {noise}")));
                }
                if !(min_relative_drop.is_finite() && *min_relative_drop >= 0.0) {
                    return Err((
                        "min_relative_drop",
                        format!("must be finite and >= 0, got {min_relative_drop}"),
                    ));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::curve::CostCurve;

    /// Figure 13: experts E0..E3, E0 and E1 on GPU-0, E2 and E3 on GPU-1. Step 0 routes
    /// 1, 2, 3, 3 tokens; the variability profiles give C_0(3) = 2 and C_1(6) = 5, and in steps
    /// 1 and 2 GPU-0 is the straggler at 4. Score 5 + 4 + 4 = 13.
    pub(crate) fn figure_13() -> (GpuCosts, Vec<f32>, LayerMapping) {
        // GPU-0: 2 up to 3 tokens, 4 from 4 to 6; GPU-1: 1 up to 3 tokens, 5 from 4 to 6.
        let c0 = CostCurve::new(vec![(1.0, 2.0), (3.0, 2.0), (4.0, 4.0), (6.0, 4.0)]).unwrap();
        let c1 = CostCurve::new(vec![(1.0, 1.0), (3.0, 1.0), (4.0, 5.0), (6.0, 5.0)]).unwrap();
        let costs = GpuCosts::new(vec![c0, c1], 16);
        let trace = vec![
            1.0, 2.0, 3.0, 3.0, // step 0: GPU-0 3 tokens (2), GPU-1 6 tokens (5)
            3.0, 2.0, 1.0, 1.0, // step 1: GPU-0 5 tokens (4), GPU-1 2 tokens (1)
            2.0, 3.0, 0.0, 2.0, // step 2: GPU-0 5 tokens (4), GPU-1 2 tokens (1)
        ];
        let mapping = LayerMapping::from_assignment(&[0, 0, 1, 1], 2);
        (costs, trace, mapping)
    }

    #[test]
    fn score_of_the_figure_13_example_is_13() {
        let (costs, trace, mapping) = figure_13();
        let problem = LayerProblem {
            layer: 0,
            n_experts: 4,
            window: &trace,
            costs: &costs,
        };
        assert_eq!(problem.n_steps(), 3);
        assert_eq!(score(&mapping, &problem), 13.0);
        // Swapping E1 and E2 changes the score: the function reads the mapping.
        let swapped = LayerMapping::from_assignment(&[0, 1, 0, 1], 2);
        assert_ne!(score(&swapped, &problem), 13.0);
    }

    #[test]
    fn check_catches_every_broken_invariant() {
        let ok = LayerMapping::from_assignment(&[0, 0, 1, 1], 2);
        assert_eq!(ok.check(4, 2), Ok(()));
        assert!(matches!(ok.check(4, 3), Err(MappingError::GpuCount { .. })));
        let unequal = LayerMapping::from_assignment(&[0, 0, 0, 1], 2);
        assert!(matches!(
            unequal.check(4, 2),
            Err(MappingError::UnequalSlots { .. })
        ));
        let missing = LayerMapping {
            slots: vec![vec![0, 1], vec![1, 2]],
        };
        assert_eq!(
            missing.check(4, 2),
            Err(MappingError::Unplaced { expert: 3 })
        );
        let out_of_range = LayerMapping {
            slots: vec![vec![0, 1], vec![2, 3]],
        };
        assert!(matches!(
            out_of_range.check(3, 2),
            Err(MappingError::ExpertOutOfRange { expert: 3, .. })
        ));
        let twice = LayerMapping {
            slots: vec![vec![0, 0], vec![1, 2]],
        };
        assert_eq!(twice.check(3, 2), Ok(()));
        assert_eq!(twice.gpu_tokens(&[4.0, 2.0, 2.0])[0], 4.0);
        let replicated = LayerMapping {
            slots: vec![vec![0, 1], vec![0, 2]],
        };
        assert_eq!(replicated.check(3, 2), Ok(()));
        assert_eq!(replicated.gpu_tokens(&[4.0, 1.0, 2.0]), vec![3.0, 4.0]);
    }

    #[test]
    fn mapper_config_parses_with_defaults_and_rejects_unknown_fields() {
        let gem: MapperConfig = toml::from_str("kind = \"gem\"").unwrap();
        assert_eq!(
            gem,
            MapperConfig::Gem {
                restarts: 30,
                window: 16,
                noise: 0.2,
                min_relative_drop: 0.001,
                keep_linear_if_better: true
            }
        );
        let eplb: MapperConfig = toml::from_str("kind = \"eplb\"\nredundant_slots = 4").unwrap();
        assert_eq!(eplb.window(), 16);
        assert!(toml::from_str::<MapperConfig>("kind = \"gem\"\nrestart = 3").is_err());
        assert!(toml::from_str::<MapperConfig>("kind = \"greedy\"").is_err());
        let error = eplb.check(8, 5, 256).unwrap_err();
        assert_eq!(error.0, "redundant_slots");
        assert!(gem.check(8, 4, 8).is_err());
    }
}
