//! A model loaded onto a replica's GPUs before it serves (`replica.load`, MOSAIC's session
//! load): each GPU copies its share of the weights, all GPUs in parallel, over the GPU's host
//! link (`cost::gpu::LinkSpec::host_of`: its measured page-locked copy rate and latency), over
//! a stated effective load path (`cost::load::LoadPath`: storage, host, PCIe and engine start-up
//! folded into one rate, as the mosaic family prices its sessions' loads), or for a given time.
//! The replica takes requests from time zero but starts no step before its load ends.

use super::config::LoadTable;
use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::load::LoadPath;
use crate::time::SimDuration;
use crate::validate::{FieldError, duration, positive};

/// The longest load a scenario may give (`replica.load.seconds`): a day.
const MAX_LOAD_S: f64 = 86_400.0;

/// How a replica's model load is priced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ModelLoad {
    /// Each GPU's weights over its host link: the link's latency plus bytes over its rate.
    HostLink(LinkSpec),
    /// Each GPU's weights over an effective load path.
    Path(LoadPath),
    /// A given load time.
    Fixed(SimDuration),
}

impl ModelLoad {
    /// `table` validated for a replica of `gpu`; errors name `<prefix>.load.<field>`.
    pub fn validate(prefix: &str, table: &LoadTable, gpu: &GpuSpec) -> Result<Self, FieldError> {
        Ok(match *table {
            LoadTable::HostLink => ModelLoad::HostLink(LinkSpec::host_of(gpu)),
            LoadTable::Path { gbps } => ModelLoad::Path(LoadPath {
                bandwidth_bytes_per_s: positive(&format!("{prefix}.load.gbps"), gbps)? * 1e9,
            }),
            LoadTable::Fixed { seconds } => ModelLoad::Fixed(duration(
                &format!("{prefix}.load.seconds"),
                seconds,
                MAX_LOAD_S,
            )?),
        })
    }

    /// The load of a replica whose GPUs each hold `weights_per_gpu_bytes` of weights.
    pub fn duration(&self, weights_per_gpu_bytes: f64) -> SimDuration {
        match *self {
            ModelLoad::HostLink(link) => SimDuration(
                (link.latency_ns + weights_per_gpu_bytes / link.bandwidth_bytes_per_s * 1e9).round()
                    as u64,
            ),
            ModelLoad::Path(path) => path.price(weights_per_gpu_bytes),
            ModelLoad::Fixed(d) => d,
        }
    }

    /// The pricing's name, as the run's details give it.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelLoad::HostLink(_) => "host_link",
            ModelLoad::Path(_) => "path",
            ModelLoad::Fixed(_) => "fixed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-2-7B's 13.48 GB on one H100: 248.5 ms over PCIe 5's measured 54.25 GB/s plus its
    /// 3.4 us; an A100 (PCIe 4, 25 GB/s, 10 us) takes twice as long and more; MOSAIC's 0.4 GB/s
    /// path takes 33.7 s; a fixed load is what it says whatever the bytes.
    #[test]
    fn a_load_is_each_gpus_weights_over_its_path() {
        let h100 = GpuSpec::by_name("H100-SXM").unwrap();
        let a100 = GpuSpec::by_name("A100-80GB").unwrap();
        let bytes = 13.48e9;
        let host = ModelLoad::validate("replica", &LoadTable::HostLink, &h100).unwrap();
        assert_eq!(
            host.duration(bytes),
            SimDuration((bytes / 54.25e9 * 1e9 + 3_403.0).round() as u64)
        );
        let slower = ModelLoad::validate("replica", &LoadTable::HostLink, &a100).unwrap();
        assert!(slower.duration(bytes).0 > 2 * host.duration(bytes).0);
        let path = ModelLoad::validate("replica", &LoadTable::Path { gbps: 0.4 }, &h100).unwrap();
        assert_eq!(path.duration(bytes), SimDuration(33_700_000_000));
        assert_eq!(path.duration(bytes / 2.0), SimDuration(16_850_000_000));
        let fixed =
            ModelLoad::validate("replica", &LoadTable::Fixed { seconds: 40.0 }, &h100).unwrap();
        assert_eq!(fixed.duration(bytes), SimDuration(40_000_000_000));
        assert_eq!(fixed.duration(0.0), SimDuration(40_000_000_000));
    }

    #[test]
    fn a_load_without_a_positive_rate_or_time_is_refused_naming_the_field() {
        let h100 = GpuSpec::by_name("H100-SXM").unwrap();
        let e =
            ModelLoad::validate("replica[1]", &LoadTable::Path { gbps: 0.0 }, &h100).unwrap_err();
        assert_eq!(e.path, "replica[1].load.gbps");
        let e =
            ModelLoad::validate("replica", &LoadTable::Fixed { seconds: -1.0 }, &h100).unwrap_err();
        assert_eq!(e.path, "replica.load.seconds");
    }
}
