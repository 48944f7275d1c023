//! Placement ILP speed: the paper's instance (M = 6 experts, N = 4 workers, K = 2) to proven
//! optimality (goal < 50 ms), and M = 20 on N = 16 solved or stopped at a budget of 5,000
//! branch-and-bound nodes with the gap reported (goal < 30 s; one timed solve, printed, since
//! criterion's minimum of ten samples would take minutes).

use criterion::Criterion;
use expertsim_serving::policies::placement::{ModelDemand, Placement, PlacementProblem};
use std::hint::black_box;
use std::time::Instant;
use strategies::placement::ilp::Ilp;

fn demand(name: String, prompts: u32, load_s: f64, per_prompt_s: f64, n: u32) -> ModelDemand {
    let predicted = per_prompt_s * f64::from(prompts);
    ModelDemand {
        name,
        prompts,
        load_s,
        predicted_session_s: predicted,
        per_prompt_s,
        replica_cap: PlacementProblem::replica_cap(predicted, load_s, n),
    }
}

/// MMLU-Pro's Table 3 slot counts with load costs and per-prompt costs of the order the
/// simulator's calibration gives (reasoning ~1-2 s, instruction ~0.05-0.15 s per prompt).
fn paper_instance() -> PlacementProblem {
    let rows = [
        ("Gemma", 1632, 46.2, 0.10),
        ("QwenR1", 1428, 38.0, 0.55),
        ("Qwen", 956, 38.0, 0.06),
        ("LlamaR1", 1070, 40.1, 0.50),
        ("Exaone", 547, 39.0, 0.10),
        ("GLM", 667, 47.0, 0.10),
    ];
    PlacementProblem {
        models: rows
            .iter()
            .map(|&(n, p, l, t)| demand(n.into(), p, l, t, 4))
            .collect(),
        n_workers: 4,
        max_models_per_worker: 2,
    }
}

/// 20 experts (6 reasoning, 14 instruction-tuned) on 16 workers, K = 2, from a fixed formula.
fn large_instance() -> PlacementProblem {
    let models = (0..20u32)
        .map(|i| {
            let reasoning = i % 10 < 3;
            let prompts = 200 + (i * 7919) % 1800;
            let load = 38.0 + f64::from((i * 37) % 10);
            let tau = if reasoning {
                0.4 + 0.05 * f64::from(i % 5)
            } else {
                0.04 + 0.02 * f64::from(i % 6)
            };
            demand(format!("m{i}"), prompts, load, tau, 16)
        })
        .collect();
    PlacementProblem {
        models,
        n_workers: 16,
        max_models_per_worker: 2,
    }
}

fn main() {
    let large = large_instance();
    let mut ilp = Ilp {
        node_limit: 5_000,
        valid_bound: true,
        warm_start: true,
    };
    let started = Instant::now();
    let plan = ilp.place(&large).expect("feasible");
    let wall = started.elapsed().as_secs_f64();
    let report = plan.solver.expect("the ILP reports");
    println!(
        "placement_ilp/m20_n16: {wall:.2} s wall, status {:?}, makespan {:.1} s, bound {:.1} s, gap {:.2} %, {} nodes",
        report.status,
        report.objective_s,
        report.bound_s,
        100.0 * report.gap,
        report.nodes
    );
    let paper = paper_instance();
    let mut criterion = Criterion::default().configure_from_args();
    criterion.bench_function("placement_ilp/paper_m6_n4", |b| {
        b.iter(|| {
            let plan = Ilp::default().place(black_box(&paper)).expect("feasible");
            assert_eq!(
                plan.solver.as_ref().map(|s| s.status),
                Some(expertsim_serving::policies::placement::SolveStatus::Optimal)
            );
            plan
        })
    });
    criterion.final_summary();
}
