//! ExpertWeave adapter-memory managers: how the base model and ESFT adapters share device
//! memory. One file per manager, each an `AdapterMemory` built from its `MemoryConfig` variant.

use expertsim_serving::policies::memory::{AdapterMemory, MemoryConfig};

use crate::batch::PolicyInfo;

pub mod base_only;
pub mod merged;
pub mod padding;
pub mod virtual_weight_tensor;

/// The manager a scenario's `[memory]` table asks for.
pub fn build(config: &MemoryConfig) -> Box<dyn AdapterMemory> {
    match config {
        MemoryConfig::Merged {
            separate_devices,
            utilization,
        } => Box::new(merged::Merged {
            separate_devices: *separate_devices,
            utilization: *utilization,
        }),
        MemoryConfig::Padding { e_max, a_max } => Box::new(padding::Padding {
            e_max: *e_max,
            a_max: *a_max,
        }),
        MemoryConfig::VirtualWeightTensor {
            page_bytes,
            e_max,
            a_max,
        } => Box::new(virtual_weight_tensor::VirtualWeightTensorMemory {
            page_bytes: *page_bytes,
            e_max: *e_max,
            a_max: *a_max,
        }),
        MemoryConfig::BaseOnly => Box::new(base_only::BaseOnly),
    }
}

const fn memory(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "memory",
        kind,
        description,
    }
}

/// Every adapter-memory manager.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        memory(
            "merged",
            "one full model copy per adapter, merged offline (vLLM-Ascend (Merged) baseline)",
        ),
        memory(
            "padding",
            "one tensor per layer of base + A_max x e_max experts (ExpertWeave-Padding)",
        ),
        memory(
            "virtual_weight_tensor",
            "reserved virtual range per layer, 2 MiB pages mapped only under loaded experts",
        ),
        memory(
            "base_only",
            "the base model alone answers every request (vLLM-Ascend (Base-Only) baseline)",
        ),
    ]
}

#[cfg(test)]
mod tests;
