//! The paged KV-cache block manager: fixed-size blocks, a count of those in use, and the
//! watermark an admission must leave free (vLLM `BlockSpaceManager`, counting blocks rather than
//! tracking block tables, which the timing model never reads), with automatic prefix caching's
//! cached blocks and free block queue when the replica runs it (`prefix::PrefixCache`).

use super::config::KvConfig;
use super::prefix::{PrefixCache, PromptBlocks, Slot};

/// Blocks of one replica's KV cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockManager {
    config: KvConfig,
    /// log2 of the block size when it is a power of two (a shift instead of a division).
    shift: Option<u32>,
    used: u64,
    /// Most blocks ever in use (above `blocks` when the admission rule overcommits).
    peak: u64,
    /// With prefix caching: the cached blocks (held ones counted in `used`, free ones not) and
    /// the order free blocks are reused in.
    cache: Option<PrefixCache>,
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
            cache: None,
        }
    }

    /// The same blocks, keeping computed prompt blocks for reuse (automatic prefix caching).
    pub fn with_prefix_cache(mut self) -> Self {
        self.cache = Some(PrefixCache::new(self.config.blocks));
        self
    }

    pub fn block_size(&self) -> u32 {
        self.config.block_size
    }

    /// The prefix cache, when the replica runs one.
    pub fn prefix_cache(&self) -> Option<&PrefixCache> {
        self.cache.as_ref()
    }

    /// A sequence takes a reference on each resident cached block at `slots` (prefix hits,
    /// from `PrefixCache::lookup`); the free ones come into use.
    pub fn acquire_cached(&mut self, slots: &[Slot]) {
        let cache = self.cache.as_mut().expect("a prefix cache");
        self.used += cache.acquire_all(slots);
        self.peak = self.peak.max(self.used);
    }

    /// A sequence's prompt blocks `from..to` of `blocks` (in use, counted in `used`) are
    /// computed: each is cached with the sequence's reference, its slot pushed onto `held`,
    /// unless an equal block is already resident.
    pub fn register_cached(
        &mut self,
        blocks: &PromptBlocks,
        from: usize,
        to: usize,
        held: &mut Vec<Slot>,
    ) {
        let cache = self.cache.as_mut().expect("a prefix cache");
        cache.register_all(blocks, from, to, held);
    }

    /// Reads the cached blocks at `slots` before they are released (`PrefixCache::warm_slots`).
    pub fn warm_slots(&self, slots: &[Slot]) {
        if let Some(cache) = &self.cache {
            cache.warm_slots(slots);
        }
    }

    /// A sequence drops its references on the cached blocks at `slots`, the last one first
    /// (as vLLM frees a request's blocks tail first); a last reference frees its block (it
    /// stays cached until its free block is taken).
    pub fn release_cached(&mut self, slots: &[Slot]) {
        let cache = self.cache.as_mut().expect("a prefix cache");
        let freed = cache.unref_all(slots);
        debug_assert!(freed <= self.used, "released more blocks than in use");
        self.used -= freed;
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
        if let Some(cache) = &mut self.cache {
            cache.take(blocks);
        }
    }

    pub fn release(&mut self, blocks: u64) {
        debug_assert!(blocks <= self.used, "released more blocks than in use");
        self.used -= blocks;
        if let Some(cache) = &mut self.cache {
            cache.give(blocks);
        }
    }
}
