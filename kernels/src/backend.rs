//! The backend abstraction: a workload (one kernel family with its inputs) is run for its
//! outputs, or timed over repetitions. `cpu` runs the references and times them with the wall
//! clock; `cuda` runs the GEMMs through cuBLAS and the rest through our NVRTC-compiled kernels,
//! and times them with device events around CUDA-graph replays.

use crate::KernelInputError;
use crate::decode::{DecodeOutput, DecodeProblem};
use crate::moe::{MoeOutput, MoeProblem};
use crate::reroute::{RerouteProblem, RerouteVariant};
use std::fmt;

/// One kernel family with its inputs.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    Moe(MoeProblem),
    Reroute(RerouteProblem, RerouteVariant),
    Decode(DecodeProblem),
}

impl Workload {
    /// Checks the inputs (each backend does so before running).
    pub fn validate(&self) -> Result<(), KernelInputError> {
        match self {
            Workload::Moe(p) => p.validate(),
            Workload::Reroute(p, _) => p.validate(),
            Workload::Decode(p) => p.validate(),
        }
    }
}

/// What a workload computes.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Moe(MoeOutput),
    /// The rerouted expert ids, `[tokens][top_k]`.
    Reroute(Vec<i32>),
    Decode(DecodeOutput),
}

/// Which backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Cpu,
    Cuda,
}

impl BackendKind {
    /// `"cpu"` or `"cuda"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The device a backend runs on, as a profile records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    /// The GPU's name from the driver, or the CPU's model name.
    pub name: String,
    /// `(major, minor)` on CUDA.
    pub compute_capability: Option<(i32, i32)>,
    /// The CUDA driver version ("12.8") on CUDA.
    pub driver: Option<String>,
    /// How `time` measures, in words ("wall clock", or the CUDA backend's device events
    /// around graph replays).
    pub timing: String,
    /// The vendor libraries in use, with versions and the files loaded (CUDA).
    pub libraries: Option<String>,
}

/// Why a backend cannot run. The CUDA variants are what a machine without a GPU gets, in one
/// line each, instead of a panic from the driver bindings.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no CUDA driver found (libcuda.so could not be loaded)")]
    NoDriver,
    #[error("no device: {0}")]
    NoDevice(String),
    #[error(
        "NVRTC not found (libnvrtc.so.12 could not be loaded; install the nvidia-cuda-nvrtc-cu12 wheel and put its lib folder on LD_LIBRARY_PATH)"
    )]
    NoNvrtc,
    #[error(
        "cuBLAS not found (libcublas.so or libcublas.so.12 could not be loaded; put a CUDA toolkit's or the nvidia-cublas wheel's lib folder on LD_LIBRARY_PATH, with a libcublas.so link to CUDA 13's libcublas.so.13: scripts/gpu_validate.sh makes one)"
    )]
    NoCublas,
    #[error("cuBLAS error in {context}: {message}")]
    Cublas {
        context: &'static str,
        message: String,
    },
    #[error("NVRTC failed: {0}")]
    Nvrtc(String),
    #[error("CUDA driver error in {context}: {message}")]
    Driver {
        context: &'static str,
        message: String,
    },
    #[error(transparent)]
    Input(#[from] KernelInputError),
    #[error("invalid timing request: {0}")]
    Timing(String),
}

/// A device that runs and times the kernels.
pub trait Backend {
    /// The device this backend runs on.
    fn device(&self) -> &DeviceInfo;

    /// Runs `workload` once and returns what it computed.
    fn run(&mut self, workload: &Workload) -> Result<Output, BackendError>;

    /// Runs `workload` `warmup` times untimed, then `repetitions` times, and returns each
    /// repetition's duration in nanoseconds (inputs are prepared once, outside the timing).
    fn time(
        &mut self,
        workload: &Workload,
        warmup: usize,
        repetitions: usize,
    ) -> Result<Vec<f64>, BackendError>;

    /// Copies `host` into a freshly allocated device buffer (a model load: the CPU backend's
    /// "device" is host memory, so there it is an allocation and a memcpy) and returns the
    /// nanoseconds from the start of the copy until the bytes are on the device.
    fn copy_to_device(&mut self, host: &[u8]) -> Result<f64, BackendError>;
}

/// Opens a backend of `kind` (device 0 for CUDA).
pub fn open(kind: BackendKind) -> Result<Box<dyn Backend>, BackendError> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(crate::cpu::CpuBackend::new())),
        BackendKind::Cuda => Ok(Box::new(crate::cuda::CudaBackend::open(0)?)),
    }
}
