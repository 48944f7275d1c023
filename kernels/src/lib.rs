//! expertsim kernels: CUDA C sources compiled at run time with NVRTC (through cudarc, loaded
//! dynamically so everything builds and tests without CUDA) and CPU reference implementations
//! with identical semantics, behind one `Backend` trait the calibration binary measures.
//!
//! Kernels: the MoE layer (`moe`), batched rerouting (`reroute`), a dense decode step
//! (`decode`). Backends: `cpu` (the references, wall-clock timing) and `cuda` (device events).

pub mod backend;
pub mod cpu;
pub mod cuda;
pub mod decode;
pub mod moe;
pub mod numeric;
pub mod nvrtc;
pub mod reroute;
pub mod source;

pub use backend::{Backend, BackendError, BackendKind, DeviceInfo, Output, Workload};
pub use half::bf16;
/// The simulator crate this one builds on; kernels report timings in its time units.
pub use sim::SimDuration;

/// Inputs a kernel cannot run on (wrong lengths, ids out of range, a bad tile size).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kernel}: {problem}")]
pub struct KernelInputError {
    /// The kernel family: "moe", "reroute" or "decode".
    pub kernel: &'static str,
    pub problem: String,
}

impl KernelInputError {
    pub(crate) fn new(kernel: &'static str, problem: String) -> KernelInputError {
        KernelInputError { kernel, problem }
    }
}

#[cfg(test)]
mod tests {
    /// An input error names its kernel before the problem, so a calibration failure says which
    /// kernel refused which input.
    #[test]
    fn an_input_error_names_its_kernel_and_problem() {
        let error = super::KernelInputError::new("reroute", "3 ids for 4 tokens".into());
        assert_eq!(error.to_string(), "reroute: 3 ids for 4 tokens");
        assert_ne!(
            error,
            super::KernelInputError::new("moe", "3 ids for 4 tokens".into())
        );
    }
}
