//! GPU datasheet numbers (dense tensor throughput, memory bandwidth, SMs, memory) for the
//! analytic roofline, a catalogue of common serving GPUs, and the achievable-fraction
//! assumptions the roofline applies to the peaks until calibration replaces them.

use serde::{Deserialize, Serialize};

/// Fraction of the datasheet memory bandwidth a weight-streaming kernel sustains.
/// Assumption, replaced by calibration: bandwidth tests (STREAM-like copies, large GEMV)
/// typically reach 80-90 % of the peak on HBM and GDDR6 parts; 0.80 is the low end.
pub const DEFAULT_MEMORY_EFFICIENCY: f64 = 0.80;

/// Fraction of the datasheet dense bf16 tensor throughput a small MoE GEMM sustains.
/// Assumption, replaced by calibration: large cuBLAS GEMMs reach 70-80 % of the dense peak;
/// expert GEMMs are narrow (a 1408-wide intermediate for Qwen1.5-MoE) and short, so 0.60.
pub const DEFAULT_COMPUTE_EFFICIENCY: f64 = 0.60;

/// Host-side cost of launching one kernel, in nanoseconds. Assumption, replaced by
/// calibration: CUDA launch latency is commonly measured at 3-10 us per kernel from an eager
/// framework; 5 us is used for every GPU of the catalogue.
pub const DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS: f64 = 5_000.0;

/// Peak numbers of one GPU model. Throughputs are the dense (not 2:4-sparsity) figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Catalogue name ("L4", "H100-SXM", ...).
    pub name: String,
    /// Dense bf16 (= fp16) tensor-core throughput, in 10^12 FLOP/s.
    pub dense_bf16_tflops: f64,
    /// Peak memory bandwidth, in 10^9 bytes/s.
    pub memory_bandwidth_gbps: f64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Memory capacity as the datasheet prints it, in GB.
    pub memory_gb: f64,
    /// Cost of launching one kernel, in nanoseconds (see [`DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS`]).
    pub kernel_launch_overhead_ns: f64,
}

/// A GPU name that is not in the catalogue.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("unknown GPU {name:?}; known GPUs: {}", known.join(", "))]
pub struct UnknownGpu {
    pub name: String,
    pub known: Vec<&'static str>,
}

/// Names accepted by [`GpuSpec::by_name`].
pub const GPU_NAMES: &[&str] = &["L4", "L40", "A100-80GB", "H100-SXM", "H200"];

impl GpuSpec {
    /// The catalogue entry called `name` (exact, or differing only in ASCII case).
    ///
    /// Sources (NVIDIA datasheets; their tensor figures marked "with sparsity" are halved):
    /// - L4: NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity -> 121 dense,
    ///   24 GB GDDR6, 300 GB/s; 7,424 CUDA cores = 58 SMs of 128 (Ada).
    /// - L40: NVIDIA L40 datasheet: BF16 181.05 dense (362.1 sparse), 48 GB GDDR6, 864 GB/s,
    ///   18,176 CUDA cores = 142 SMs.
    /// - A100-80GB (SXM): NVIDIA A100 datasheet: BF16 312 dense (624 sparse), 80 GB HBM2e,
    ///   2,039 GB/s (the PCIe card: 1,935 GB/s); 108 SMs (A100 architecture whitepaper).
    /// - H100-SXM: NVIDIA H100 datasheet: BF16 1,979 with sparsity -> 989.4 dense (H100
    ///   architecture whitepaper), 80 GB HBM3, 3.35 TB/s, 132 SMs.
    /// - H200 (SXM): NVIDIA H200 datasheet: BF16 1,979 with sparsity -> 989.4 dense, 141 GB
    ///   HBM3e, 4.8 TB/s; same GH100 configuration as H100 SXM, 132 SMs.
    pub fn by_name(name: &str) -> Result<GpuSpec, UnknownGpu> {
        let spec = |name: &str, tflops: f64, bandwidth: f64, sms: u32, memory: f64| GpuSpec {
            name: name.to_string(),
            dense_bf16_tflops: tflops,
            memory_bandwidth_gbps: bandwidth,
            sm_count: sms,
            memory_gb: memory,
            kernel_launch_overhead_ns: DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS,
        };
        let canonical = GPU_NAMES
            .iter()
            .find(|known| known.eq_ignore_ascii_case(name));
        match canonical.copied() {
            Some("L4") => Ok(spec("L4", 121.0, 300.0, 58, 24.0)),
            Some("L40") => Ok(spec("L40", 181.05, 864.0, 142, 48.0)),
            Some("A100-80GB") => Ok(spec("A100-80GB", 312.0, 2039.0, 108, 80.0)),
            Some("H100-SXM") => Ok(spec("H100-SXM", 989.4, 3350.0, 132, 80.0)),
            Some("H200") => Ok(spec("H200", 989.4, 4800.0, 132, 141.0)),
            _ => Err(UnknownGpu {
                name: name.to_string(),
                known: GPU_NAMES.to_vec(),
            }),
        }
    }

    /// Peak dense bf16 throughput in FLOP/s.
    pub fn peak_flops(&self) -> f64 {
        self.dense_bf16_tflops * 1e12
    }

    /// Peak memory bandwidth in bytes/s.
    pub fn peak_bandwidth(&self) -> f64 {
        self.memory_bandwidth_gbps * 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_every_listed_gpu() {
        for name in GPU_NAMES {
            let spec = GpuSpec::by_name(name).unwrap();
            assert_eq!(spec.name, *name);
            assert!(spec.dense_bf16_tflops > 0.0 && spec.memory_bandwidth_gbps > 0.0);
        }
        let l4 = GpuSpec::by_name("l4").unwrap();
        assert_eq!(
            (l4.dense_bf16_tflops, l4.memory_bandwidth_gbps, l4.sm_count),
            (121.0, 300.0, 58)
        );
    }

    #[test]
    fn unknown_gpu_lists_known_names() {
        let message = GpuSpec::by_name("RTX 4090").unwrap_err().to_string();
        assert!(message.contains("\"RTX 4090\""), "{message}");
        for name in GPU_NAMES {
            assert!(message.contains(name), "{message}");
        }
    }
}
