//! Writes the PTX NVRTC produces for every kernel of ours (sm_90) to the folder given as the
//! first argument, for `ptxas -v` register and spill reports (docs/performance.md). Needs
//! libnvrtc on LD_LIBRARY_PATH.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/ptx".into()),
    );
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("dump_ptx: cannot create {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    match kernels::nvrtc::compile_kernels(9, 0) {
        Ok(compiled) => {
            let path = dir.join("kernels_sm90.ptx");
            if let Err(e) = std::fs::write(&path, compiled.ptx) {
                eprintln!("dump_ptx: cannot write {}: {e}", path.display());
                return ExitCode::from(1);
            }
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dump_ptx: {e}");
            ExitCode::from(2)
        }
    }
}
