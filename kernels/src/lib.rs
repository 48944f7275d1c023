//! expertsim kernels: CUDA C sources compiled at run time with NVRTC, and CPU reference
//! implementations with identical semantics. Nothing is implemented yet (see issue 7); this
//! crate only fixes its place in the dependency graph: kernels -> sim.

/// The simulator crate this one builds on; kernels report timings in its time units.
pub use sim::SimDuration;

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_report_durations_in_sim_nanoseconds() {
        // The one contract this crate has so far: durations are the simulator's integer nanoseconds.
        assert_eq!(super::SimDuration::from_micros_f64(1.0).0, 1_000);
    }
}
