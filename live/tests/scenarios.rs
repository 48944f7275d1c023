//! Every live scenario runs on the CPU backend, and the live run decides exactly what the
//! simulated run decides: with time advancing by the predicted durations for any workload, and
//! with time advancing by the measured durations for an offline one (every request present at
//! time 0, so no decision can depend on when a step ends).

use live::{BackendKind, Clock, LiveOptions, LiveReport};
use std::path::PathBuf;

/// A live scenario file. The package folder is read at run time when cargo (or
/// scripts/gpu_validate.sh, running this binary on another machine) sets CARGO_MANIFEST_DIR.
fn scenario(name: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../scenarios/live")
        .join(name)
}

fn cpu(clock: Clock) -> LiveOptions {
    LiveOptions {
        backend: BackendKind::Cpu,
        device: 0,
        realtime: false,
        clock,
        tile: 64,
        decode_context: 256,
        repetitions: 1,
    }
}

fn live(name: &str, sets: &[&str], options: &LiveOptions) -> LiveReport {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let plan = expertsim_scenario::scenario::load(&scenario(name), &sets)
        .unwrap_or_else(|e| panic!("{e}"));
    live::run(&plan, &strategies::Registry, options).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check_measured(report: &LiveReport) {
    assert!(!report.steps.is_empty(), "{}: no step ran", report.scenario);
    for step in &report.steps {
        assert!(
            step.measured_ns > 0.0 && step.predicted_ns > 0.0,
            "{}: {step:?}",
            report.scenario
        );
    }
    assert_eq!(report.errors.steps, report.steps.len());
    assert!(report.errors.mape_pct.is_finite());
    assert!(!report.metrics.is_empty());
}

/// Every scenario file under scenarios/live/, sorted.
fn live_scenarios() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(scenario(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 2, "{names:?}");
    names
}

#[test]
fn every_live_scenario_runs_on_the_cpu_and_decides_as_the_simulation() {
    for name in &live_scenarios() {
        let report = live(name, &[], &cpu(Clock::Predicted));
        check_measured(&report);
        assert!(
            report.decisions.identical && report.decisions.simulated_count > 0,
            "{name}: {:?}",
            report.decisions
        );
        // On the predicted clock the live run's metrics are the simulated run's.
        for m in &report.metrics {
            assert_eq!(m.simulated, m.live, "{name}: {}", m.metric);
        }
    }
}

#[test]
fn offline_workloads_decide_the_same_on_the_measured_clock() {
    let path = scenario("caps.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let poisson = "pattern = \"poisson\"\nrate_per_s = 40\n";
    assert!(
        text.contains(poisson),
        "caps.toml no longer has the Poisson arrivals this replaces"
    );
    let offline = text.replace(poisson, "pattern = \"offline\"\n");
    let plan = expertsim_scenario::scenario::load_str(&path, &offline, &[]).unwrap();
    let caps = live::run(&plan, &strategies::Registry, &cpu(Clock::Measured)).unwrap();
    check_measured(&caps);
    assert!(caps.decisions.identical, "{:?}", caps.decisions);
    let gem = live("gem.toml", &[], &cpu(Clock::Measured));
    check_measured(&gem);
    assert!(gem.decisions.identical, "{:?}", gem.decisions);
    assert!(gem.variability.as_deref().unwrap().contains("emulated"));
}

#[test]
fn a_run_of_several_cells_is_refused() {
    let plan =
        expertsim_scenario::scenario::load(&scenario("caps.toml"), &["seeds=[1, 2]".to_string()])
            .unwrap();
    let error = live::run(&plan, &strategies::Registry, &cpu(Clock::Measured)).unwrap_err();
    assert_eq!(error.exit_code(), 2, "{error}");
}

#[test]
fn mosaic_places_the_same_sessions_on_either_clock() {
    // Placement is solved offline from the calibration, so the plan, the loads and the sessions
    // are the simulated ones whatever the steps measure. The order in which sessions on
    // different workers start their steps does depend on the measured durations, so the
    // decisions are compared step for step on the predicted clock only.
    for placement in ["ilp", "round_robin"] {
        let set = format!("placement.policy.kind=\"{placement}\"");
        let predicted = live("mosaic.toml", &[&set], &cpu(Clock::Predicted));
        let d = &predicted.decisions;
        assert!(d.identical, "{placement}: {d:?}");
        // Every simulated step of every session (the aggregator's among them) runs on the
        // kernels; the log then holds one gate decision per question (6).
        assert_eq!(d.simulated_count, predicted.steps.len() + 6, "{d:?}");
        let report = live("mosaic.toml", &[&set], &cpu(Clock::Measured));
        check_measured(&report);
        assert_eq!(report.steps.len(), predicted.steps.len(), "{placement}");
        let execution = report.execution.as_deref().unwrap();
        assert!(execution.contains("scaled down"), "{execution}");
        let metric = |name: &str| report.metrics.iter().find(|m| m.metric == name).unwrap();
        // Same placement, same sessions: the loads are the simulated run's, priced by
        // `replica.load` on both sides (the serving server has no load seam for the device to
        // copy through), so their time is the same.
        assert_eq!(metric("model_loads").simulated, metric("model_loads").live);
        assert_eq!(metric("ilp_status").simulated, metric("ilp_status").live);
        assert_eq!(metric("load_time_s").simulated, metric("load_time_s").live);
    }
}

/// On a GPU: every live scenario runs its steps on the CUDA kernels (timed with device
/// events) and, on the predicted clock, decides exactly as the simulation.
#[test]
#[ignore = "needs a GPU: scripts/gpu_validate.sh"]
fn gpu_every_live_scenario_runs_on_cuda_and_decides_as_the_simulation() {
    let options = LiveOptions {
        backend: BackendKind::Cuda,
        ..cpu(Clock::Predicted)
    };
    for name in &live_scenarios() {
        let report = live(name, &[], &options);
        assert_eq!(report.backend, "cuda", "{name}");
        check_measured(&report);
        assert!(
            report.decisions.identical && report.decisions.simulated_count > 0,
            "{name}: {:?}",
            report.decisions
        );
    }
}
