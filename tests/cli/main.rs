//! Integration tests of the `expertsim` binary, linked as one test binary.

mod basics;
mod capacity;
mod common;
mod families;
mod figure_kinds;
mod fuzz;
mod gpu_script;
mod hostile;
mod live;
mod measured;
mod price;
mod readme;
mod reproduce_claims;
mod serving;
mod serving_chimera;
mod shard_resume;
mod studies;
