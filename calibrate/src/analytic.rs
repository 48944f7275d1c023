//! The analytic (roofline) reference profiles committed under `profiles/analytic/`: the bf16
//! Qwen1.5-MoE-A2.7B on H200, A100-80GB, L40 and L4, labelled `analytic-roofline`, used until
//! a measured profile replaces them. (the simulator's own generator keeps the L4 nf4 one.)

use expertsim_scenario::cost::gpu::GpuSpec;
use expertsim_scenario::cost::profile::{Profile, ProfileError};
use expertsim_scenario::cost::roofline::analytic_profile;
use expertsim_scenario::cost::shape::MoeModelShape;
use std::path::{Path, PathBuf};

/// (GPU catalogue name, model preset, file under `profiles/`).
pub const REFERENCE: &[(&str, &str, &str)] = &[
    (
        "H200",
        "qwen1.5-moe-a2.7b",
        "analytic/h200_qwen1.5-moe-a2.7b.json",
    ),
    (
        "A100-80GB",
        "qwen1.5-moe-a2.7b",
        "analytic/a100-80gb_qwen1.5-moe-a2.7b.json",
    ),
    (
        "L40",
        "qwen1.5-moe-a2.7b",
        "analytic/l40_qwen1.5-moe-a2.7b.json",
    ),
    (
        "L4",
        "qwen1.5-moe-a2.7b",
        "analytic/l4_qwen1.5-moe-a2.7b-bf16.json",
    ),
];

/// The analytic profile of `preset` (with the scenario-style overrides applied) on `gpu`.
pub fn profile_for(gpu: &str, shape: &MoeModelShape) -> Result<Profile, String> {
    let spec = GpuSpec::by_name(gpu).map_err(|e| e.to_string())?;
    Ok(analytic_profile(&spec, shape))
}

/// Every reference profile with its path under `profiles_dir`.
pub fn reference_profiles(profiles_dir: &Path) -> Vec<(PathBuf, Profile)> {
    REFERENCE
        .iter()
        .map(|(gpu, preset, file)| {
            let shape = MoeModelShape::preset(preset).expect("reference presets exist");
            let profile = profile_for(gpu, &shape).expect("reference GPUs are in the catalogue");
            (profiles_dir.join(file), profile)
        })
        .collect()
}

/// Writes every reference profile; returns the paths.
pub fn write_reference_profiles(profiles_dir: &Path) -> Result<Vec<PathBuf>, ProfileError> {
    reference_profiles(profiles_dir)
        .into_iter()
        .map(|(path, profile)| profile.save(&path).map(|()| path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::cost::profile::SourceKind;

    /// The committed files are what the roofline generates now. Regenerate with
    /// `EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-calibrate committed_analytic`.
    #[test]
    fn committed_analytic_profiles_match_the_roofline() {
        let profiles_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        if std::env::var_os("EXPERTSIM_UPDATE_PROFILES").is_some_and(|v| v == "1") {
            write_reference_profiles(&profiles_dir).unwrap();
        }
        for (path, profile) in reference_profiles(&profiles_dir) {
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == profile.to_json(),
                "{} differs from what the roofline generates; regenerate with \
                 EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-calibrate committed_analytic",
                path.display()
            );
            let loaded = Profile::load(&path).unwrap();
            assert_eq!(loaded.source.kind, SourceKind::AnalyticRoofline);
            loaded.check_shape(&profile.model).unwrap();
        }
    }
}
