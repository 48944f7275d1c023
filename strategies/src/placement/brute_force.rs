//! Exhaustive reference for the placement ILP on tiny instances: every integer split of every
//! model's prompts over the workers (a worker loads a model iff it gets a prompt of it: loading
//! without prompts only adds time), filtered by the replica caps and K.

use expertsim_serving::policies::placement::PlacementProblem;

fn compositions(total: u32, parts: usize) -> Vec<Vec<u32>> {
    if parts == 1 {
        return vec![vec![total]];
    }
    let mut out = Vec::new();
    for first in 0..=total {
        for mut rest in compositions(total - first, parts - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

/// The optimal makespan of `problem` by enumeration.
pub fn optimal_makespan(problem: &PlacementProblem) -> f64 {
    let n = problem.n_workers as usize;
    let options: Vec<Vec<Vec<u32>>> = problem
        .models
        .iter()
        .map(|m| {
            compositions(m.prompts, n)
                .into_iter()
                .filter(|split| {
                    let replicas = split.iter().filter(|&&y| y > 0).count() as u32;
                    replicas >= 1 && replicas <= m.replica_cap
                })
                .collect()
        })
        .collect();
    let mut best = f64::INFINITY;
    let mut choice = vec![0usize; options.len()];
    loop {
        let mut time = vec![0.0f64; n];
        let mut hosted = vec![0u32; n];
        for (i, m) in problem.models.iter().enumerate() {
            for (w, &y) in options[i][choice[i]].iter().enumerate() {
                if y > 0 {
                    time[w] += m.load_s + m.per_prompt_s * f64::from(y);
                    hosted[w] += 1;
                }
            }
        }
        if hosted.iter().all(|&h| h <= problem.max_models_per_worker) {
            best = best.min(time.iter().copied().fold(0.0, f64::max));
        }
        // Next combination (odometer).
        let mut i = 0;
        loop {
            if i == choice.len() {
                return best;
            }
            choice[i] += 1;
            if choice[i] < options[i].len() {
                break;
            }
            choice[i] = 0;
            i += 1;
        }
    }
}

#[test]
fn brute_force_knows_a_hand_solved_instance() {
    use crate::placement::testutil::problem;
    // One model of 4 prompts (1 s each, load 1) on 2 workers, cap 2: split 2 + 2 -> 3 s.
    assert_eq!(optimal_makespan(&problem(&[(4, 1.0, 1.0, 2)], 2, 1)), 3.0);
    // Cap 1: 5 s.
    assert_eq!(optimal_makespan(&problem(&[(4, 1.0, 1.0, 1)], 2, 1)), 5.0);
}
