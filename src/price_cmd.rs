//! `expertsim price`: prices the operations of a CSV (`gpu`, `model` as the catalogues name
//! them, then per row `op` + `tokens`, or `experts_on_gpu` + `tokens_on_gpu`, or
//! `rows_per_expert`) through the very entry points the simulator uses (`expertsim_scenario::cost::price`),
//! and writes the same rows with `predicted_us` and the memory, compute, floor and host terms
//! (docs/cost-model.md, "Pricing operations: expertsim price"). A refused row is named with the
//! file, line and column, exit code 2, and nothing is written.

use clap::{Args, ValueEnum};
use expertsim_scenario::cost::kernel::Timing;
use expertsim_scenario::cost::price::{PriceOptions, price_csv};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TimingArg {
    /// GPU-side time, as in a CUDA graph (vLLM's decode).
    Graph,
    /// Launched one by one from the host: the host's launch cost included.
    Eager,
}

/// Price operations on a GPU through the simulator's cost model.
#[derive(Args)]
pub struct PriceArgs {
    /// The CSV of operations to price.
    input: PathBuf,
    /// What a kernel's time includes.
    #[arg(long, value_enum, default_value = "graph")]
    timing: TimingArg,
    /// Scale MoE rows to the GPU's measured grouped GEMMs where the expert shape was measured
    /// (as GEM's runs price them); the kernel model alone without.
    #[arg(long)]
    measured_curves: bool,
    /// Write the priced CSV here instead of to standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: PriceArgs) -> ExitCode {
    let options = PriceOptions {
        timing: match args.timing {
            TimingArg::Graph => Timing::Graph,
            TimingArg::Eager => Timing::Eager,
        },
        measured_curves: args.measured_curves,
    };
    let priced = match price_csv(&args.input, options) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match &args.out {
        None => {
            print!("{priced}");
            ExitCode::SUCCESS
        }
        Some(path) => match expertsim_scenario::results::write_atomic(path, priced.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: --out {}: {e}", path.display());
                ExitCode::from(1)
            }
        },
    }
}
