//! Writes the PTX NVRTC produces for every kernel (sm_90, tile sizes 32/64/128) to the folder
//! given as the first argument, for `ptxas -v` register and spill reports
//! (docs/performance.md). Needs libnvrtc on LD_LIBRARY_PATH.

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
    for tile in [32, 64, 128] {
        match kernels::nvrtc::compile_kernels(tile, 9, 0) {
            Ok(compiled) => {
                let path = dir.join(format!("kernels_tile{tile}_sm90.ptx"));
                if let Err(e) = std::fs::write(&path, compiled.ptx) {
                    eprintln!("dump_ptx: cannot write {}: {e}", path.display());
                    return ExitCode::from(1);
                }
                println!("{}", path.display());
            }
            Err(e) => {
                eprintln!("dump_ptx: {e}");
                return ExitCode::from(2);
            }
        }
    }
    ExitCode::SUCCESS
}
