//! expertsim-calibrate: will measure MoE and decode kernels on a GPU and write a profile the
//! simulator reads (issue 7). Until then it says so and exits non-zero instead of pretending.

fn main() {
    eprintln!(
        "expertsim-calibrate: no kernels are implemented yet (see issue 7); nothing was measured"
    );
    std::process::exit(2);
}
