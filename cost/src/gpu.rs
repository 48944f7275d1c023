//! The one GPU catalogue: datasheet numbers (dense tensor throughput, memory bandwidth, compute
//! units, boost clock, memory, an assumed launch cost) of every accelerator a family names, and
//! the interconnects between them. Each number is cited once, here; the achievable rates the
//! cost model prices with are derived from them and from measurements (`cost::fit`,
//! `profiles/rates.json`).

use serde::{Deserialize, Serialize};

/// Host-side cost of launching one kernel on a CUDA GPU, in nanoseconds. Assumption, replaced
/// by calibration: CUDA launch latency is commonly measured at 3-10 us per kernel from an eager
/// framework; 5 us is used for every NVIDIA GPU of the catalogue.
pub const DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS: f64 = 5_000.0;

/// Peak numbers of one accelerator model. Throughputs are the dense (not 2:4-sparsity) figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Catalogue name ("L4", "H100-SXM", ...).
    pub name: String,
    /// Dense bf16 (= fp16) tensor-core throughput, in 10^12 FLOP/s.
    pub dense_bf16_tflops: f64,
    /// Peak memory bandwidth, in 10^9 bytes/s.
    pub memory_bandwidth_gbps: f64,
    /// Streaming multiprocessors (NVIDIA) or AI cores (Ascend).
    pub sm_count: u32,
    /// Memory capacity as the datasheet prints it, in GB.
    pub memory_gb: f64,
    /// Cost of launching one kernel, in nanoseconds (see [`DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS`]):
    /// the assumption `profiles/rates.json` keeps where no eager launch was measured.
    pub kernel_launch_overhead_ns: f64,
    /// Boost SM clock, MHz (0: not published); with 16 exponentials per SM per clock (the
    /// special-function units of compute capability 8.x and 9.x, CUDA C++ Programming Guide,
    /// "Arithmetic Instructions") it sets the softmax exponential rate.
    pub boost_clock_mhz: f64,
}

/// A GPU name that is not in the catalogue.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("unknown GPU {name:?}; known GPUs: {}", known.join(", "))]
pub struct UnknownGpu {
    pub name: String,
    pub known: Vec<&'static str>,
}

/// Names accepted by [`GpuSpec::by_name`].
pub const GPU_NAMES: &[&str] = &[
    "L4",
    "L40",
    "A100-80GB",
    "H100-SXM",
    "H200",
    "RTX-A6000",
    "A40",
    "Ascend-910B",
];

impl GpuSpec {
    /// The catalogue entry called `name` (exact, or differing only in ASCII case).
    ///
    /// Sources (NVIDIA datasheets; their tensor figures marked "with sparsity" are halved):
    /// - L4 (<https://www.nvidia.com/en-us/data-center/l4/>, L4 datasheet): BF16 242 TFLOPS
    ///   with sparsity -> 121 dense, 24 GB GDDR6, 300 GB/s; 7,424 CUDA cores = 58 SMs of 128
    ///   (Ada). GEM's and CAPS's GPU.
    /// - L40 (<https://www.nvidia.com/en-us/data-center/l40/>, L40 datasheet): BF16 181.05 dense
    ///   (362.1 sparse), 48 GB GDDR6, 864 GB/s, 18,176 CUDA cores = 142 SMs.
    /// - A100-80GB (SXM; <https://www.nvidia.com/en-us/data-center/a100/>, A100 datasheet):
    ///   BF16 312 dense (624 sparse), 80 GB HBM2e, 2,039 GB/s (the PCIe card: 1,935 GB/s);
    ///   108 SMs (A100 architecture whitepaper). MOSAIC's GPU.
    /// - H100-SXM (<https://www.nvidia.com/en-us/data-center/h100/>, H100 datasheet): BF16
    ///   1,979 with sparsity -> 989.4 dense (H100 architecture whitepaper), 80 GB HBM3,
    ///   3.35 TB/s, 132 SMs.
    /// - H200 (SXM; <https://www.nvidia.com/en-us/data-center/h200/>, H200 datasheet): BF16
    ///   1,979 with sparsity -> 989.4 dense, 141 GB HBM3e, 4.8 TB/s; same GH100 configuration
    ///   as H100 SXM, 132 SMs. GEM's serving GPU.
    ///
    /// Boost clocks (MHz), from the same datasheets and NVIDIA's product pages: L4 2040, L40
    /// 2490, A100 1410, H100 SXM and H200 1980 (the H200 of `profiles/h200/` ran at 1980 under
    /// load), RTX A6000 1800, A40 1740; the Ascend-910B's is not published (0).
    /// - RTX-A6000 (<https://www.nvidia.com/en-us/design-visualization/rtx-a6000/>, NVIDIA RTX
    ///   A6000 datasheet): 48 GB GDDR6 at 768 GB/s, 10,752 CUDA cores = 84 SMs, tensor BF16
    ///   309.7 TFLOPS with sparsity -> 154.8 dense. Chimera's GPU.
    /// - A40 (<https://www.nvidia.com/en-us/data-center/a40/>, NVIDIA A40 datasheet): BF16 149.7
    ///   dense (299.4 sparse), 48 GB GDDR6 at 696 GB/s, 10,752 CUDA cores = 84 SMs. The GPU of
    ///   Vidur's A40 profile (`profiles/vidur/a40/`).
    /// - Ascend-910B: the NPU ExpertWeave runs on (expertweave.txt, section 5: "8 Ascend NPUs,
    ///   where each NPU has 64GB of memory", vLLM-Ascend). Huawei publishes no datasheet with
    ///   both rates; 1.6 TB/s of HBM2e and 280 dense fp16 TFLOP/s are round figures of public
    ///   third-party reports for the 910B (which range over 280-320 TFLOP/s), not measured; 20
    ///   AI cores likewise. Launch cost 10 us: an assumption for eager operator dispatch through
    ///   torch_npu (vLLM-Ascend v0.8.4 runs eagerly), slower than a CUDA launch.
    pub fn by_name(name: &str) -> Result<GpuSpec, UnknownGpu> {
        let spec =
            |name: &str, tflops: f64, bandwidth: f64, sms: u32, memory: f64, clock: f64| GpuSpec {
                name: name.to_string(),
                dense_bf16_tflops: tflops,
                memory_bandwidth_gbps: bandwidth,
                sm_count: sms,
                memory_gb: memory,
                kernel_launch_overhead_ns: DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS,
                boost_clock_mhz: clock,
            };
        let canonical = GPU_NAMES
            .iter()
            .find(|known| known.eq_ignore_ascii_case(name));
        match canonical.copied() {
            Some("L4") => Ok(spec("L4", 121.0, 300.0, 58, 24.0, 2040.0)),
            Some("L40") => Ok(spec("L40", 181.05, 864.0, 142, 48.0, 2490.0)),
            Some("A100-80GB") => Ok(spec("A100-80GB", 312.0, 2039.0, 108, 80.0, 1410.0)),
            Some("H100-SXM") => Ok(spec("H100-SXM", 989.4, 3350.0, 132, 80.0, 1980.0)),
            Some("H200") => Ok(spec("H200", 989.4, 4800.0, 132, 141.0, 1980.0)),
            Some("RTX-A6000") => Ok(spec("RTX-A6000", 154.8, 768.0, 84, 48.0, 1800.0)),
            Some("A40") => Ok(spec("A40", 149.7, 696.0, 84, 48.0, 1740.0)),
            Some("Ascend-910B") => Ok(GpuSpec {
                kernel_launch_overhead_ns: 10_000.0,
                ..spec("Ascend-910B", 280.0, 1600.0, 20, 64.0, 0.0)
            }),
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

    /// Model FLOPs utilization: `model_flops` (the useful FLOPs of the model's forward passes,
    /// no tile padding) over what the datasheet peak could do in `seconds`.
    pub fn model_flops_utilization(&self, model_flops: f64, seconds: f64) -> f64 {
        if seconds > 0.0 {
            model_flops / (self.peak_flops() * seconds)
        } else {
            0.0
        }
    }

    /// Tokens of KV cache that fit once `weight_bytes` are placed, when an engine claims
    /// `utilization` of the memory (vLLM's `gpu_memory_utilization`) and a token takes
    /// `kv_bytes_per_token`; `None` when the weights leave no room.
    pub fn kv_capacity_tokens(
        &self,
        utilization: f64,
        weight_bytes: f64,
        kv_bytes_per_token: f64,
    ) -> Option<u64> {
        let usable = self.memory_gb * 1e9 * utilization;
        (usable > weight_bytes)
            .then(|| ((usable - weight_bytes) / kv_bytes_per_token).floor() as u64)
    }
}

/// The interconnect a group of GPUs exchanges activations over (the all-to-all of expert
/// parallelism, the all-reduce of tensor parallelism).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkSpec {
    /// Per-GPU unidirectional bandwidth, bytes/s.
    pub bandwidth_bytes_per_s: f64,
    /// Fixed cost of one collective, ns.
    pub latency_ns: f64,
}

impl LinkSpec {
    /// PCIe 4.0 x16 (the L4 servers of GEM and CAPS): 32 GB/s per direction on paper, about
    /// 25 GB/s achieved; a 10 us collective latency (NCCL all-to-all over PCIe). Assumptions.
    pub const PCIE4_X16: LinkSpec = LinkSpec {
        bandwidth_bytes_per_s: 25e9,
        latency_ns: 10_000.0,
    };

    /// NVLink 4 through NVSwitch (H100/H200 SXM servers): 18 links x 25 GB/s = 450 GB/s per
    /// direction per GPU on paper (H100 datasheet: 900 GB/s bidirectional); 360 GB/s achieved
    /// (80 %, the bus bandwidth NCCL's all-reduce tests reach on 8-GPU H100 nodes), and a 5 us
    /// collective latency (the order of vLLM's custom all-reduce on small messages).
    /// Assumptions, like `PCIE4_X16`'s.
    pub const NVLINK4: LinkSpec = LinkSpec {
        bandwidth_bytes_per_s: 360e9,
        latency_ns: 5_000.0,
    };

    /// PCIe 5.0 x16 (the host link of the H100 and H200 SXM boards): 64 GB/s per direction on
    /// paper; measured on one H200 (`profiles/measured/host-link/nvidia-h200.csv`, page-locked
    /// `cudaMemcpyAsync` from 64 KiB to 1 GiB, `scripts/host_link_bandwidth.cu`), fitted by
    /// `host_link::fit_copy_times` (a test holds this constant to that fit): 54.25 GB/s (85 % of
    /// the paper rate) and 3.4 us per copy. The H100's measured copies
    /// (`profiles/measured/host-link/nvidia-h100-80gb-hbm3.csv`) fit 54.98 GB/s and 3.45 us,
    /// within 1.5 % of it (tested), so both boards take this one link.
    pub const PCIE5_X16: LinkSpec = LinkSpec {
        bandwidth_bytes_per_s: 54.25e9,
        latency_ns: 3_403.0,
    };

    /// The link between `gpu` and its host's memory, which swapped-out KV blocks cross: PCIe 5.0
    /// x16 for the H100 and H200 SXM (their datasheets' "PCIe Gen5: 128 GB/s", both directions),
    /// PCIe 4.0 x16 for the rest (the A100, L4, L40, A40 and RTX A6000 datasheets' "PCIe Gen4";
    /// the Ascend 910B's host interface is taken as the same, an assumption).
    pub fn host_of(gpu: &GpuSpec) -> LinkSpec {
        match gpu.name.as_str() {
            "H100-SXM" | "H200" => LinkSpec::PCIE5_X16,
            _ => LinkSpec::PCIE4_X16,
        }
    }

    /// Time to move `bytes` over the link in one direction, its latency included; 0 for none.
    pub fn transfer_ns(&self, bytes: f64) -> f64 {
        if bytes > 0.0 {
            self.latency_ns + bytes / self.bandwidth_bytes_per_s * 1e9
        } else {
            0.0
        }
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
            assert!(spec.memory_gb > 0.0 && spec.sm_count > 0);
        }
        let l4 = GpuSpec::by_name("l4").unwrap();
        assert_eq!(
            (l4.dense_bf16_tflops, l4.memory_bandwidth_gbps, l4.sm_count),
            (121.0, 300.0, 58)
        );
        let a6000 = GpuSpec::by_name("rtx-a6000").unwrap();
        assert_eq!(
            (a6000.dense_bf16_tflops, a6000.memory_bandwidth_gbps),
            (154.8, 768.0)
        );
    }

    #[test]
    fn host_links_are_pcie5_on_hopper_boards_and_pcie4_elsewhere() {
        let link = |name: &str| LinkSpec::host_of(&GpuSpec::by_name(name).unwrap());
        assert_eq!(link("H100-SXM"), LinkSpec::PCIE5_X16);
        assert_eq!(link("H200"), LinkSpec::PCIE5_X16);
        assert_eq!(link("A100-80GB"), LinkSpec::PCIE4_X16);
        assert_eq!(link("L4"), LinkSpec::PCIE4_X16);
        // 1 GB over PCIe 5 at the measured 54.25 GB/s: 18.43 ms plus the 3.4 us latency;
        // nothing moved costs nothing.
        let one_gb = LinkSpec::PCIE5_X16.transfer_ns(1e9);
        assert!(
            (one_gb - (3_403.0 + 1e18 / 54.25e9)).abs() < 1.0,
            "{one_gb}"
        );
        assert_eq!(LinkSpec::PCIE5_X16.transfer_ns(0.0), 0.0);
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
