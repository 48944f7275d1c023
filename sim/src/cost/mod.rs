//! Cost models are data: GPU datasheet specs, token-vs-latency staircase curves, the versioned
//! calibration profile that holds them, and the analytic roofline that generates a default
//! profile when no measured one is given. See docs/cost-model.md.

pub mod curve;
pub mod gpu;
pub mod moe_layer;
pub mod op_profile;
pub mod profile;
pub mod roofline;

pub use curve::{CostCurve, CurveError};
pub use gpu::{GpuSpec, UnknownGpu};
pub use moe_layer::{LinkSpec, MoeLayerCost, MoeLayerParams, SpeedFactors};
pub use profile::{ExpertExecution, Profile, ProfileError, ProfileMismatch, SourceKind};
pub use roofline::{RooflineParams, analytic_profile};
