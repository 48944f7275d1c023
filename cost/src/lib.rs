//! expertsim's one cost model (crate `expertsim-cost`, re-exported as `expertsim_scenario::cost`): the GPU catalogue (`gpu`), the model-shape catalogue (`shape`), the
//! host's time per step (`host`), the
//! roofline every family prices steps with (`roofline`: dense steps, the non-expert part of MoE
//! models, MLA attention, and the analytic profiles sampled from it), the grouped-GEMM MoE layer
//! (`moe_layer`), model loads (`load`: weight bytes over the load path), token-vs-latency
//! staircase curves (`curve`), the versioned calibration profile
//! that holds them (`profile`), measured per-operation profiles (`op_profile`), operation classes
//! priced from them where they apply (`measured_ops`: measured, scaled or analytic), and steps and
//! MoE curves built from those (`measured_steps`, with the record of what priced what), and where
//! a step's price came from (`source::CostSource`). See docs/cost-model.md. It depends on
//! `expertsim-core` (time, input files, the validation vocabulary) only: it knows no scheduler,
//! family or scenario loader, which Cargo enforces.

pub mod curve;
pub mod fidelity;
pub mod fit;
pub mod gpu;
pub mod host;
pub mod host_link;
pub mod kernel;
pub mod kernel_timings;
pub mod lanes;
pub mod load;
pub mod measured_ops;
pub mod measured_steps;
pub mod moe_layer;
pub mod op_profile;
pub mod price;
pub mod profile;
pub mod roofline;
pub mod sampling;
pub mod shape;
pub mod source;

pub use source::CostSource;

pub use curve::{CostCurve, CurveError};
pub use gpu::{GpuSpec, LinkSpec, UnknownGpu};
pub use moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
pub use profile::{ExpertExecution, Profile, ProfileError, ProfileMismatch, SourceKind};
pub use roofline::{RooflineParams, analytic_profile};
