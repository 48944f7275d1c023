//! expertsim-calibrate: will measure MoE and decode kernels on a GPU and write a profile the
//! simulator reads (issue 7). Until the kernels exist it refuses, naming why, and exits 2 instead
//! of writing a profile that was not measured.

use std::process::ExitCode;

/// What calibration can do today: nothing, and it says so.
fn calibrate() -> Result<(), String> {
    Err("no kernels are implemented yet (see issue 7); nothing was measured and no profile was written".into())
}

fn main() -> ExitCode {
    match calibrate() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("expertsim-calibrate: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn refuses_rather_than_writing_an_unmeasured_profile() {
        let err = super::calibrate().unwrap_err();
        assert!(err.contains("nothing was measured"), "{err}");
    }
}
