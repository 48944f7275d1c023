//! The recorder's vocabulary below the serving layer: a family's metrics declared once as a table
//! (`table::MetricDef`: name, unit, better direction, how to compute; a failed run's reason,
//! `table::failed`), a step's expert-load statistics accumulated over a replica's steps
//! (`expert_load::ExpertLoad`), and the ranking-quality measures of predictors and routers
//! (`ranking`). The recorder of replicas (`expertsim_scenario::recorder`: `ReplicaRecorder`, `TraceEvents`)
//! reads the serving layer and re-exports these under its own path.

pub mod expert_load;
pub mod ranking;
pub mod table;

pub use expert_load::ExpertLoad;
pub use table::{MetricDef, failed, infos, scalars};
