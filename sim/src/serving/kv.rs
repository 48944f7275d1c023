//! The paged KV-cache block manager: fixed-size blocks, a count of those in use, and the
//! watermark an admission must leave free (vLLM `BlockSpaceManager`, counting blocks rather than
//! tracking block tables, which the timing model never reads).

use super::config::KvConfig;

/// Blocks of one replica's KV cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockManager {
    config: KvConfig,
    /// log2 of the block size when it is a power of two (a shift instead of a division).
    shift: Option<u32>,
    used: u64,
    /// Most blocks ever in use (above `blocks` when the admission rule overcommits).
    peak: u64,
}

impl BlockManager {
    pub fn new(config: KvConfig) -> Self {
        BlockManager {
            config,
            shift: config
                .block_size
                .is_power_of_two()
                .then(|| config.block_size.trailing_zeros()),
            used: 0,
            peak: 0,
        }
    }

    /// Blocks that hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        match self.shift {
            Some(shift) => (tokens + (1u64 << shift) - 1) >> shift,
            None => tokens.div_ceil(u64::from(self.config.block_size)),
        }
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Blocks not in use (0 when overcommitted).
    pub fn free(&self) -> u64 {
        self.config.blocks.saturating_sub(self.used)
    }

    /// Whether an admission of `blocks` more leaves the watermark free.
    pub fn can_admit(&self, blocks: u64) -> bool {
        self.used + blocks + self.config.watermark_blocks <= self.config.blocks
    }

    /// Whether `blocks` more fit at all (decode growth, swap-in ignores the watermark).
    pub fn can_grow(&self, blocks: u64) -> bool {
        self.used + blocks <= self.config.blocks
    }

    /// Takes `blocks` blocks, whether or not they fit (callers check first where it matters).
    pub fn allocate(&mut self, blocks: u64) {
        self.used += blocks;
        self.peak = self.peak.max(self.used);
    }

    pub fn release(&mut self, blocks: u64) {
        debug_assert!(blocks <= self.used, "released more blocks than in use");
        self.used -= blocks;
    }
}
