//! The host's time per engine step (scheduling the next batch, building its input tensors,
//! sampling and detokenizing the outputs of the last one), as a term of its own beside the
//! GPU's kernels: `fixed_ns + per_sequence_ns x sequences`. The measured term is a straight
//! line fitted (least squares) through published per-iteration host times of vLLM; where it
//! comes from and which scheduler uses which term: docs/cost-model.md, "The host's time per
//! step".

use serde::Serialize;

/// The host's time per step: a fixed part and a part per sequence in the step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HostOverhead {
    pub fixed_ns: f64,
    pub per_sequence_ns: f64,
}

/// One published measurement: sequences in the batch and the host's time per iteration, ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostPoint {
    pub sequences: f64,
    pub host_ms: f64,
}

/// vLLM 0.5.4's per-iteration "Schedule" time (everything on the host between two forward
/// passes: output processing, scheduling, input preparation), by the number of requests, as
/// WukLab's study "Can Scheduling Overhead Dominate LLM Inference Performance?" (2024-09-10)
/// plots it (Llama-3-8B, NVIDIA A6000, Intel Xeon Gold 5218; read from the figure's bar
/// heights, 2.874 px per ms, which reproduce its printed shares 24.5 %, 32.1 % and 33.5 %).
/// The study: "scheduling overhead is proportional to the number of sequences in the batch,
/// rather than the number of tokens".
pub const VLLM_V0_HOST_POINTS: [HostPoint; 3] = [
    HostPoint {
        sequences: 128.0,
        host_ms: 10.64,
    },
    HostPoint {
        sequences: 512.0,
        host_ms: 24.61,
    },
    HostPoint {
        sequences: 1024.0,
        host_ms: 42.15,
    },
];

/// Where [`VLLM_V0_HOST_POINTS`] come from, for docs and results.
pub const VLLM_V0_HOST_SOURCE: &str = "vLLM 0.5.4 per-iteration schedule time, WukLab \
     'Can Scheduling Overhead Dominate LLM Inference Performance?' (2024-09-10), Llama-3-8B on \
     an A6000 with a Xeon Gold 5218: 10.64 / 24.61 / 42.15 ms at 128 / 512 / 1024 requests";

impl HostOverhead {
    /// A flat `ns` per step, whatever the batch (a scenario's `step_overhead_ms`).
    pub fn flat(ns: f64) -> HostOverhead {
        HostOverhead {
            fixed_ns: ns,
            per_sequence_ns: 0.0,
        }
    }

    /// The least-squares line through `points`.
    pub fn fitted(points: &[HostPoint]) -> HostOverhead {
        let n = points.len() as f64;
        let mean_x = points.iter().map(|p| p.sequences).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.host_ms).sum::<f64>() / n;
        let sxy: f64 = points
            .iter()
            .map(|p| (p.sequences - mean_x) * (p.host_ms - mean_y))
            .sum();
        let sxx: f64 = points.iter().map(|p| (p.sequences - mean_x).powi(2)).sum();
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        HostOverhead {
            fixed_ns: (mean_y - slope * mean_x) * 1e6,
            per_sequence_ns: slope * 1e6,
        }
    }

    /// vLLM's engine loop as measured ([`VLLM_V0_HOST_POINTS`]).
    pub fn vllm_v0() -> HostOverhead {
        HostOverhead::fitted(&VLLM_V0_HOST_POINTS)
    }

    /// The host's time of a step of `sequences` sequences, ns.
    #[inline]
    pub fn nanos(&self, sequences: u64) -> f64 {
        self.fixed_ns + self.per_sequence_ns * sequences as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vllm_line_passes_near_every_published_point() {
        let h = HostOverhead::vllm_v0();
        // About 6.3 ms plus 35 us per sequence.
        assert!(
            (h.fixed_ns - 6.32e6).abs() < 0.05e6,
            "{} ns fixed",
            h.fixed_ns
        );
        assert!(
            (h.per_sequence_ns - 35.1e3).abs() < 0.5e3,
            "{} ns per sequence",
            h.per_sequence_ns
        );
        for p in VLLM_V0_HOST_POINTS {
            let fit = h.nanos(p.sequences as u64) / 1e6;
            assert!((fit / p.host_ms - 1.0).abs() < 0.03, "{p:?}: {fit} ms");
        }
        assert_eq!(HostOverhead::flat(2e6).nanos(500), 2e6);
    }
}
