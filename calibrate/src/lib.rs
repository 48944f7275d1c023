//! expertsim-calibrate's library: the calibration pipeline and its parts, shared by the
//! `expertsim-calibrate` binary and by `expertsim live` (its `--calibrate`, and the probe that
//! checks a profile against the device before a live run).

pub mod adaptive;
pub mod analytic;
pub mod bench;
pub mod dense;
pub mod h200;
pub mod import_table;
pub mod pipeline;
pub mod progress;
pub mod scenario_points;
pub mod stats;
pub mod timestamp;
pub mod vidur;
