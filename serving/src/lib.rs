//! expertsim's serving layer (crate `expertsim-serving`, re-exported by `expertsim-scenario` under the same module
//! names): one continuous-batching replica, the queue-policy, batch-former and router extension
//! points, the step-cost seam, per-request latencies and a dense model's serving cost
//! (`serving`, docs/serving.md); the other extension points' traits and registry enums
//! (`policies`: batch, mapping, placement, gate, adapter memory, and the `Policies` registry
//! trait); the recorder of replicas above both (`recorder`); the files a sweep's cells share
//! (`load_cache`) and the `Family` trait with what families share with the layers above
//! (`family`; the loader and the lookups by name stay in `expertsim-scenario`), and the families above all of
//! them, declared and registered in one list, `families!` below: today the serving family, the
//! one simulator every paper is a preset of (`serving_family`, docs/serving-family.md). It sits above `expertsim-core` (time, events, random streams,
//! arrivals, the validation vocabulary, metrics) and `expertsim-cost` (the cost model), which it
//! re-exports under the module names the moved files use (`crate::time`, `crate::cost`, ...);
//! it knows no scenario loader, family registry or policy implementation, which Cargo enforces.

pub mod family;
pub mod load_cache;
pub mod policies;
pub mod recorder;
pub mod serving;

/// Declares each family's module and registers its `Family` implementation, from one line per
/// family, `<module>::<type>,`: `pub mod <module>;` (its folder beside the invocation),
/// `FAMILIES` (every family, in the order `expertsim` lists them; `expertsim_scenario::registry` finds them by
/// name) and `family_modules` (each module once more, which `expertsim-scenario` re-exports under its root).
#[macro_export]
macro_rules! families {
    ($($module:ident :: $family:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every family the simulator knows, in the order `expertsim` lists them.
        pub static FAMILIES: &[&dyn $crate::family::RegisteredFamily] = &[$(&$module::$family),*];

        /// Every family's module, for a crate above to re-export (`expertsim-scenario`: `expertsim_scenario::serving_family`).
        pub mod family_modules {
            $(pub use super::$module;)*
        }
    };
}

// The registration list: adding a family is its folder under `serving/src/` and its line here
// (ARCHITECTURE.md, "Adding a family").
families! {
    serving_family::Serving,
}

// The crates below this one, under the module names every path already uses.
pub use expertsim_core::{
    apportion, arrivals, distributions, engine, event_queue, input, memo, metrics, records, rng,
    time,
};
pub use expertsim_cost as cost;

/// The validation vocabulary (`expertsim_core::validate`, `[limits]` included) with the one
/// check that reads the cost model, a measured set's GPU (`cost::measured_steps::measured_on`),
/// as `expertsim_scenario::validate` has it.
pub mod validate {
    pub use expertsim_core::validate::*;
    pub use expertsim_cost::measured_steps::measured_on;
}

pub use time::{SimDuration, SimTime};
