//! The host's time per engine step (scheduling the next batch, building its input tensors,
//! sampling and detokenizing the outputs of the last one), as a term of its own beside the
//! GPU's kernels: `fixed_ns + per_sequence_ns x sequences`. Each measured term is a straight
//! line fitted (least squares) through measured per-iteration host times of one engine: vLLM's
//! as published, Sarathi-Serve's as Vidur profiled it; where they come from and which scheduler
//! uses which term: docs/cost-model.md, "The host's time per step".

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

/// Vidur's CPU-overhead profile of the Sarathi-Serve engine on an A100 server
/// (github.com/microsoft/vidur, commit 6d98aa8, `data/profiling/a100/cpu_overheads.csv`, MIT;
/// copied unedited to `profiles/vidur/cpu_overheads/a100.csv`): per model, tensor-parallel
/// degree and batch size, the medians of each host stage of a step, ms.
pub const SARATHI_A100_CPU_OVERHEADS: &str =
    include_str!("../../profiles/vidur/cpu_overheads/a100.csv");

/// The host stages Vidur adds to a step's execution time (its `cpu_overhead` predictors): the
/// medians of the four stages and the mean of the residual it calls Ray communication time.
const VIDUR_HOST_COLUMNS: [&str; 5] = [
    "schedule_median",
    "sampler_e2e_median",
    "prepare_inputs_e2e_median",
    "process_model_outputs_median",
    "ray_comm_time_mean",
];

/// The points of a Vidur `cpu_overheads.csv` for one model at one tensor-parallel degree: the
/// batch size and the sum of [`VIDUR_HOST_COLUMNS`]. An error names the line and column.
pub fn vidur_host_points(
    csv: &str,
    model: &str,
    tensor_parallel: u32,
) -> Result<Vec<HostPoint>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(csv.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| format!("line 1: cannot read the header: {e}"))?
        .clone();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("line 1: no column `{name}`"))
    };
    let (model_col, tp_col, batch_col) = (
        column("model_name")?,
        column("tensor_parallel_degree")?,
        column("batch_size")?,
    );
    let stage_cols = VIDUR_HOST_COLUMNS
        .iter()
        .map(|c| column(c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut points = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| format!("cannot read: {e}"))?;
        let line = record.position().map_or(0, csv::Position::line);
        let number = |c: usize| -> Result<f64, String> {
            let text = record.get(c).unwrap_or("");
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(format!(
                    "line {line}, column `{}`: expected a non-negative number, got `{text}`",
                    &header[c]
                )),
            }
        };
        if record.get(model_col) != Some(model) || number(tp_col)? != f64::from(tensor_parallel) {
            continue;
        }
        let mut host_ms = 0.0;
        for &c in &stage_cols {
            host_ms += number(c)?;
        }
        points.push(HostPoint {
            sequences: number(batch_col)?,
            host_ms,
        });
    }
    if points.len() < 2 {
        return Err(format!(
            "fewer than two rows for {model} at tensor parallel degree {tensor_parallel}"
        ));
    }
    Ok(points)
}

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

    /// Sarathi-Serve's engine loop as Vidur measured it ([`SARATHI_A100_CPU_OVERHEADS`],
    /// Llama-2-7B at TP 1: the profile's one single-GPU dense model with batches up to 128).
    /// Fitted once per process: every replica and price row reads the same line.
    pub fn sarathi_serve() -> HostOverhead {
        static LINE: std::sync::LazyLock<HostOverhead> = std::sync::LazyLock::new(|| {
            let points =
                vidur_host_points(SARATHI_A100_CPU_OVERHEADS, "meta-llama/Llama-2-7b-hf", 1)
                    .expect("the committed Vidur CPU-overhead profile parses (tested)");
            HostOverhead::fitted(&points)
        });
        *LINE
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

    #[test]
    fn the_sarathi_line_passes_near_every_profiled_batch() {
        let points =
            vidur_host_points(SARATHI_A100_CPU_OVERHEADS, "meta-llama/Llama-2-7b-hf", 1).unwrap();
        // Batches 8 to 128 in steps of 8 to 64 and of 16 above (64 twice).
        assert_eq!(points.len(), 13, "{points:?}");
        let h = HostOverhead::sarathi_serve();
        // About 1 ms plus 49 us per sequence: a small batch pays far less than vLLM's line
        // extrapolates below its first point (128 requests).
        assert!(
            (0.7e6..1.3e6).contains(&h.fixed_ns),
            "{} ns fixed",
            h.fixed_ns
        );
        assert!(
            (40e3..55e3).contains(&h.per_sequence_ns),
            "{} ns per sequence",
            h.per_sequence_ns
        );
        assert!(h.nanos(8) < 0.3 * HostOverhead::vllm_v0().nanos(8));
        for p in points {
            let fit = h.nanos(p.sequences as u64) / 1e6;
            assert!((fit / p.host_ms - 1.0).abs() < 0.12, "{p:?}: {fit} ms");
        }
    }

    #[test]
    fn a_broken_vidur_profile_names_its_line_and_column() {
        let csv = "model_name,tensor_parallel_degree,batch_size,schedule_median,\
                   sampler_e2e_median,prepare_inputs_e2e_median,process_model_outputs_median,\
                   ray_comm_time_mean\nm,1,8,0.1,0.2,0.3,oops,0.5\n";
        let err = vidur_host_points(csv, "m", 1).unwrap_err();
        assert!(
            err.contains("line 2") && err.contains("process_model_outputs_median"),
            "{err}"
        );
        let err = vidur_host_points("model_name,batch_size\n", "m", 1).unwrap_err();
        assert!(err.contains("tensor_parallel_degree"), "{err}");
        let ok = "model_name,tensor_parallel_degree,batch_size,schedule_median,\
                  sampler_e2e_median,prepare_inputs_e2e_median,process_model_outputs_median,\
                  ray_comm_time_mean\nm,1,8,1,1,1,1,1\n";
        assert!(
            vidur_host_points(ok, "m", 1)
                .unwrap_err()
                .contains("fewer than two")
        );
    }
}
