//! The adapter-memory extension point: how a manager places the base model and a set of ESFT
//! adapters in device memory (`AdapterMemory`), what it reports (`MemoryPlan`, `MemoryReport`),
//! and the registry enum (`MemoryConfig`) scenario files name managers by. What a manager sees
//! lives here too: the adapters as data (`adapters`) and the device budget (`device`). ExpertWeave
//! brought the point; the serving family's adapter groups use it as well.

pub mod adapters;
pub mod device;

use crate::cost::shape::MlaMoeShape;
use adapters::{AdapterError, EsftAdapter};
use device::{DeviceMemory, KvCapacity};
use serde::{Deserialize, Serialize};

/// One serving instance a plan creates: the adapters whose requests it takes, whether it runs
/// their fine-tuned experts, and the KV capacity its memory leaves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstancePlan {
    /// Indices (into the adapter list given to `plan`) of the adapters this instance serves.
    pub adapters: Vec<usize>,
    /// True when tokens are rerouted to adapter experts (shared managers); false for a merged
    /// copy (the adapter is baked in, no rerouting) and for base-only (adapters ignored).
    pub reroutes: bool,
    /// True when the instance computes with the adapters' fine-tuned experts (false only for
    /// base-only, which answers every request with the base model).
    pub adapter_experts: bool,
    /// Devices the instance runs on.
    pub n_devices: u64,
    /// Weight bytes the instance holds.
    pub weight_bytes: u64,
    /// KV capacity left to it.
    pub kv: KvCapacity,
}

/// The memory breakdown of a plan, summed over its instances (docs/expertweave.md defines each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryReport {
    /// Adapters loaded.
    pub n_adapters: usize,
    /// Bytes of every weight held (all instances).
    pub weight_bytes: u64,
    /// Bytes of one base model.
    pub base_weight_bytes: u64,
    /// Bytes the fine-tuned experts need (sum over adapters and layers x expert bytes).
    pub adapter_expert_bytes: u64,
    /// Bytes allocated on account of the adapters: padded slots (padding), mapped adapter pages
    /// (virtual weight tensor), the extra model copies (merged: weights minus one base model).
    pub adapter_allocated_bytes: u64,
    /// Allocated adapter bytes that hold no fine-tuned expert (padding slots, partly used pages).
    pub padding_waste_bytes: u64,
    /// Allocated over needed adapter bytes (Section 3.1's memory fragmentation factor); 1 for
    /// merged (no padding) and base-only (nothing allocated).
    pub fragmentation_factor: f64,
    /// Mean adapter sparsity factor of the loaded adapters.
    pub sparsity_factor: f64,
    /// KV bytes summed over instances.
    pub kv_bytes: u64,
    /// KV tokens summed over instances.
    pub kv_capacity_tokens: u64,
    /// Some instance does not fit: the engine would fail to start.
    pub out_of_memory: bool,
    /// Physical pages mapped (virtual weight tensor only; 0 otherwise).
    pub mapped_pages: u64,
    /// Mapped pages shared by two neighbouring ranges (virtual weight tensor only).
    pub shared_pages: u64,
}

/// A plan: the instances, and the breakdown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    pub instances: Vec<InstancePlan>,
    pub report: MemoryReport,
}

/// A manager could not plan: bad configuration or adapters (running out of memory is not an
/// error; it is `MemoryReport::out_of_memory`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AdapterMemoryError {
    #[error(transparent)]
    Adapter(#[from] AdapterError),
    #[error("{manager}: {problem}")]
    Config {
        manager: &'static str,
        problem: String,
    },
    #[error("base model: {0}")]
    Model(String),
    #[error("device: {0}")]
    Device(String),
}

/// The extension point: a policy for holding the base model and ESFT adapters in device memory.
pub trait AdapterMemory: Send {
    /// The manager's `kind` tag.
    fn kind(&self) -> &'static str;

    /// Places the base model `shape` and `adapters` (in order) on `device` (the budget of one
    /// serving instance) and reports the instances and memory breakdown.
    fn plan(
        &mut self,
        shape: &MlaMoeShape,
        device: &DeviceMemory,
        adapters: &[EsftAdapter],
    ) -> Result<MemoryPlan, AdapterMemoryError>;
}

/// The registry of adapter-memory managers, as scenario files name them (`kind = "..."`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryConfig {
    /// One full model copy per adapter with the adapter merged in (vLLM-Ascend (Merged)).
    Merged {
        /// Put each copy on its own `n_devices` devices (the serving baseline) instead of all
        /// copies on the one budget (the memory experiment).
        #[serde(default)]
        separate_devices: bool,
        /// Per-instance memory utilization override (the paper gives each of two merged
        /// instances 45%).
        #[serde(default)]
        utilization: Option<f64>,
    },
    /// One tensor per layer sized base + A_max x e_max experts (ExpertWeave-Padding).
    Padding {
        /// Slots per adapter per layer; default the largest layer count of the loaded adapters.
        #[serde(default)]
        e_max: Option<u64>,
        /// Adapter slots; default the number of loaded adapters.
        #[serde(default)]
        a_max: Option<u64>,
    },
    /// ExpertWeave's virtual weight tensor: reserved virtual range per layer, physical pages
    /// mapped only for loaded experts, sub-page sharing between neighbours.
    VirtualWeightTensor {
        /// Physical page size in bytes (2 MiB by default).
        #[serde(default = "default_page_bytes")]
        page_bytes: u64,
        /// Slots per adapter per layer; default the largest layer count of the loaded adapters.
        #[serde(default)]
        e_max: Option<u64>,
        /// Adapter slots; default the number of loaded adapters.
        #[serde(default)]
        a_max: Option<u64>,
    },
    /// The base model alone; every request is answered by it (vLLM-Ascend (Base-Only)).
    BaseOnly,
}

/// 2 MiB, the page granularity the paper names.
pub fn default_page_bytes() -> u64 {
    2 * device::MIB
}

impl MemoryConfig {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            MemoryConfig::Merged { .. } => "merged",
            MemoryConfig::Padding { .. } => "padding",
            MemoryConfig::VirtualWeightTensor { .. } => "virtual_weight_tensor",
            MemoryConfig::BaseOnly => "base_only",
        }
    }
}

/// Slot geometry shared by padding and the virtual weight tensor: (a_max, e_max) from the
/// overrides or the loaded adapters, checked to hold every adapter.
pub fn slot_geometry(
    manager: &'static str,
    adapters: &[EsftAdapter],
    a_max: Option<u64>,
    e_max: Option<u64>,
) -> Result<(u64, u64), AdapterMemoryError> {
    let needed_e = adapters
        .iter()
        .map(EsftAdapter::max_experts)
        .max()
        .unwrap_or(0);
    let e_max = e_max.unwrap_or(needed_e);
    let a_max = a_max.unwrap_or(adapters.len() as u64);
    if e_max < needed_e {
        return Err(AdapterMemoryError::Config {
            manager,
            problem: format!("e_max = {e_max} is below the {needed_e} experts an adapter needs"),
        });
    }
    if a_max < adapters.len() as u64 {
        return Err(AdapterMemoryError::Config {
            manager,
            problem: format!("a_max = {a_max} is below the {} adapters", adapters.len()),
        });
    }
    Ok((a_max, e_max))
}

/// Checks the model, the device and every adapter; the common prologue of `plan`.
pub fn check_inputs(
    shape: &MlaMoeShape,
    device: &DeviceMemory,
    adapters: &[EsftAdapter],
) -> Result<(), AdapterMemoryError> {
    shape.validate().map_err(AdapterMemoryError::Model)?;
    device.validate().map_err(AdapterMemoryError::Device)?;
    for adapter in adapters {
        adapter.validate(shape)?;
    }
    Ok(())
}

/// Mean sparsity factor of `adapters` (0 for none).
pub fn mean_sparsity(adapters: &[EsftAdapter]) -> f64 {
    if adapters.is_empty() {
        return 0.0;
    }
    adapters
        .iter()
        .map(EsftAdapter::sparsity_factor)
        .sum::<f64>()
        / adapters.len() as f64
}

/// Needed bytes of the adapters' fine-tuned experts.
pub fn adapter_expert_bytes(shape: &MlaMoeShape, adapters: &[EsftAdapter]) -> u64 {
    adapters.iter().map(EsftAdapter::total_experts).sum::<u64>() * shape.expert_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_parses_snake_case_kinds_and_rejects_unknown_fields() {
        let config: MemoryConfig = toml::from_str("kind = \"virtual_weight_tensor\"").unwrap();
        assert_eq!(
            config,
            MemoryConfig::VirtualWeightTensor {
                page_bytes: 2 << 20,
                e_max: None,
                a_max: None
            }
        );
        assert_eq!(config.kind(), "virtual_weight_tensor");
        let config: MemoryConfig =
            toml::from_str("kind = \"merged\"\nseparate_devices = true").unwrap();
        assert_eq!(config.kind(), "merged");
        assert!(toml::from_str::<MemoryConfig>("kind = \"padding\"\nbogus = 1").is_err());
        assert!(toml::from_str::<MemoryConfig>("kind = \"lora\"").is_err());
    }
}
