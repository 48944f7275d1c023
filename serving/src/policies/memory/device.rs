//! The device-memory accounting of an ExpertWeave instance: the budget of its devices and the KV
//! capacity in tokens that what is left of it holds once the weights are placed (the base
//! model's shape, `MlaMoeShape`, is in the cost model's shape catalogue).

use serde::{Deserialize, Serialize};

/// One gibibyte (2^30 bytes); the paper's "GB" figures are GiB (two copies of the 15.7 B
/// parameter bf16 model are 58.5 GiB, its "58.6GB").
pub const GIB: u64 = 1 << 30;

/// One mebibyte (2^20 bytes).
pub const MIB: u64 = 1 << 20;

/// The memory a serving instance may use: `n_devices` accelerators of `capacity_bytes`, of which
/// the engine claims `utilization` (vLLM's `gpu_memory_utilization`), minus a per-device
/// `runtime_reserve_bytes` for what is neither weights nor KV cache (activations of the
/// profiling pass, workspaces, communication buffers, the runtime itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// Bytes of one device.
    pub capacity_bytes: u64,
    /// Fraction of the device the engine may use, in (0, 1].
    pub utilization: f64,
    /// Bytes per device that are neither weights nor KV cache.
    pub runtime_reserve_bytes: u64,
    /// Devices of the instance (weights are sharded across them, tensor + expert parallel).
    pub n_devices: u64,
    /// Tokens per KV block (vLLM allocates whole blocks; 128 on Ascend).
    pub kv_block_tokens: u64,
    /// How many devices hold a copy of each token's KV: MLA's latent cache is not split by
    /// heads, so under tensor parallelism every rank stores all of it (= the TP degree).
    pub kv_replication: u64,
}

/// How a budget's bytes are spent after the weights are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCapacity {
    /// Bytes left for the KV cache (0 when the weights do not fit).
    pub kv_bytes: u64,
    /// Whole KV blocks' worth of tokens those bytes hold.
    pub kv_tokens: u64,
    /// The weights (plus reserve) exceed the budget, or not one KV block is left: the engine
    /// would fail at start-up.
    pub out_of_memory: bool,
}

impl DeviceMemory {
    /// One device of `capacity_bytes` at `utilization`, with `runtime_reserve_bytes`, 128-token
    /// blocks and no KV replication.
    pub fn single(capacity_bytes: u64, utilization: f64, runtime_reserve_bytes: u64) -> Self {
        DeviceMemory {
            capacity_bytes,
            utilization,
            runtime_reserve_bytes,
            n_devices: 1,
            kv_block_tokens: 128,
            kv_replication: 1,
        }
    }

    /// Checks the fields; the message names the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.utilization.is_finite() && self.utilization > 0.0 && self.utilization <= 1.0) {
            return Err(format!(
                "utilization must be in (0, 1], got {}",
                self.utilization
            ));
        }
        for (field, value) in [
            ("capacity_bytes", self.capacity_bytes),
            ("n_devices", self.n_devices),
            ("kv_block_tokens", self.kv_block_tokens),
            ("kv_replication", self.kv_replication),
        ] {
            if value == 0 {
                return Err(format!("{field} must be at least 1, got 0"));
            }
        }
        if self.kv_replication > self.n_devices {
            return Err(format!(
                "kv_replication ({}) exceeds n_devices ({})",
                self.kv_replication, self.n_devices
            ));
        }
        Ok(())
    }

    /// Bytes the engine may place weights and KV cache in: floor(capacity x utilization) minus
    /// the reserve, per device, summed over devices (0 when the reserve exceeds the share).
    pub fn usable_bytes(&self) -> u64 {
        let per_device = (self.capacity_bytes as f64 * self.utilization).floor() as u64;
        per_device
            .saturating_sub(self.runtime_reserve_bytes)
            .saturating_mul(self.n_devices)
    }

    /// What is left for KV cache once `weight_bytes` are placed.
    pub fn kv_capacity(&self, weight_bytes: u64, kv_bytes_per_token: u64) -> KvCapacity {
        let usable = self.usable_bytes();
        let block_bytes = kv_bytes_per_token * self.kv_block_tokens * self.kv_replication;
        match usable.checked_sub(weight_bytes) {
            Some(kv_bytes) if block_bytes > 0 && kv_bytes >= block_bytes => KvCapacity {
                kv_bytes,
                kv_tokens: kv_bytes / block_bytes * self.kv_block_tokens,
                out_of_memory: false,
            },
            Some(kv_bytes) => KvCapacity {
                kv_bytes,
                kv_tokens: 0,
                out_of_memory: true,
            },
            None => KvCapacity {
                kv_bytes: 0,
                kv_tokens: 0,
                out_of_memory: true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::shape::MlaMoeShape;

    /// A capacity at the top of the integers (the fuzz test's extreme value) over several
    /// devices saturates instead of overflowing.
    #[test]
    fn an_extreme_capacity_saturates_the_usable_bytes() {
        let mut memory = DeviceMemory::single(u64::MAX, 1.0, 0);
        memory.n_devices = 4;
        assert_eq!(memory.usable_bytes(), u64::MAX);
    }

    #[test]
    fn two_base_copies_are_the_papers_58_6_gb() {
        let shape = MlaMoeShape::esft_vanilla_16b();
        assert_eq!(shape.expert_bytes(), 33 * MIB / 2);
        // two copies: the paper's 58.6 GB (GiB)
        let two = 2.0 * shape.weight_bytes() as f64 / GIB as f64;
        assert!((two - 58.6).abs() < 0.2, "{two}");
    }

    #[test]
    fn kv_capacity_blocks_and_out_of_memory() {
        let device = DeviceMemory::single(1000 * 128 * 10 + 500, 1.0, 0);
        let cap = device.kv_capacity(0, 10);
        assert_eq!(cap.kv_tokens, 128 * 1000);
        assert!(!cap.out_of_memory);
        let cap = device.kv_capacity(1000 * 128 * 10, 10);
        assert!(cap.out_of_memory, "500 bytes hold no 1280-byte block");
        let cap = device.kv_capacity(u64::MAX, 10);
        assert!(cap.out_of_memory);
        assert_eq!(cap.kv_bytes, 0);
        let mut bad = device.clone();
        bad.utilization = 1.5;
        assert!(bad.validate().is_err());
    }
}
