//! expertsim kernels: the GEMMs through cuBLAS and the rest as CUDA C sources compiled at run
//! time with NVRTC (both through cudarc, loaded dynamically so everything builds and tests
//! without CUDA), and CPU reference implementations with the same semantics, behind one
//! `Backend` trait the calibration binary measures.
//!
//! Kernels: the MoE layer (`moe`), batched rerouting (`reroute`), a dense decode step
//! (`decode`). Backends: `cpu` (the references, wall-clock timing) and `cuda` (cuBLAS and our
//! kernels, device events around CUDA-graph replays).

pub mod backend;
pub mod blas;
pub mod cpu;
pub mod cuda;
pub mod decode;
pub mod moe;
pub mod numeric;
pub mod nvrtc;
pub mod reroute;
pub mod source;

pub use backend::{Backend, BackendError, BackendKind, DeviceInfo, Output, Workload};
/// The simulator crate this one builds on; kernels report timings in its time units.
pub use expertsim_scenario::SimDuration;
pub use half::bf16;
pub use numeric::Weights;

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

#[cfg(test)]
mod layering {
    /// The kernels know no model family (every registered family's module, the serving family's
    /// `serving_family` included) and no serving layer: they use `expertsim-scenario`'s core (random streams,
    /// time) only, so a family's shapes reach them as plain dimensions (`decode::DenseDims`).
    #[test]
    fn kernels_import_no_family_module() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let families = expertsim_scenario::registry::families().map(|f| f.module());
            for family in families.chain(["serving"]) {
                let import = format!("expertsim_scenario::{family}");
                assert!(!text.contains(&import), "{} uses {import}", path.display());
            }
        }
    }
}
