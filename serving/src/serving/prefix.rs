//! Automatic prefix caching (vLLM V1's default, `enable_prefix_caching`): a prompt's full KV
//! blocks are identified by a hash chained over the blocks before them, a computed block stays
//! resident after its request finishes, and a later request whose prompt starts with the same
//! blocks reuses them instead of prefilling them. Free blocks, cached or not, are reused in the
//! order they were freed (vLLM's free block queue: the least recently freed first, a request's
//! blocks freed tail first), so a cached block lives until the blocks freed before it are taken.
//!
//! A prompt is described by its segments: a segment `(stream, tokens)` is the first `tokens`
//! tokens of a token stream named `stream`, so two prompts hold the same tokens where their
//! segments name the same streams at the same offsets (a shared system prompt, a workflow's
//! growing history). Tokens past the described segments are the request's own.
//!
//! The cache keeps its blocks by run: the full blocks whose last token lies in one segment of
//! a prompt form a run, named by a hash of the segments before it and of its own stream
//! (`BlockHash`). A block is still cached, hit, freed and evicted on its own, as vLLM does; what
//! the runs change is the bookkeeping: a run's blocks sit side by side, and a prompt's lookup or
//! a chunk's registration finds them with one map probe a run instead of one a block. Two
//! blocks have equal `BlockHash`es exactly when vLLM's chained hashes of them would be equal:
//! when the tokens up to their ends are the same.

use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry as MapEntry;

/// The first `tokens` tokens of the token stream `stream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixSegment {
    pub stream: u64,
    pub tokens: u32,
}

/// How many of a prompt's segments, from the first, other requests' prompts may hold
/// (`AdmitHook::prefix`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedSegments {
    /// Those a request submitted after this one or in flight beside it may hold: the blocks
    /// ending past them are read by this request alone (`SeqPrefix::deferred` keeps them out
    /// of the cache while nothing else could read them).
    pub later: usize,
    /// Those a request in flight beside this one may hold: the blocks ending past them are
    /// held by no other sequence while this one waits, so an admission is known not to fit
    /// when it would not even with every block before them hit and held by others
    /// (`Replica::fewest_blocks`).
    pub beside: usize,
}

impl SharedSegments {
    /// Every one of `segments` shared, later and beside (no claim about the prompt).
    pub fn all(segments: usize) -> Self {
        SharedSegments {
            later: segments,
            beside: segments,
        }
    }
}

/// SplitMix64's finalizer: a fixed, well-mixed 64-bit hash step (deterministic across runs).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A full prompt block's identity: the run it lies in and its place in the run. The run's hash
/// covers the segments before the run's own (their streams and lengths) and that segment's
/// stream, which fixes where the run starts; the place then fixes which of the segment's tokens
/// the block ends at. So two blocks are equal exactly when the tokens up to their ends are:
/// what vLLM's hash chained over a prompt's blocks identifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHash {
    pub run: u64,
    pub at: u32,
}

/// One run's blocks in a prompt: the run's hash (`BlockHash::run`), the place of the first of
/// them, how many there are (places `first`, `first + 1`, ...) and how many of the prompt's
/// blocks come before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockRun {
    hash: u64,
    first: u32,
    count: u32,
    start: u32,
}

/// A prompt's full blocks, in order, kept by run: the blocks of one run lie at consecutive
/// places, so a run is its hash, its first place and its length, and a prompt of a few
/// segments is a few runs, whatever its length. Block `k` of the prompt is the block
/// `BlockHash { run, at: first + k - start }` of the run holding it (`hashes` lists them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptBlocks {
    runs: Vec<BlockRun>,
    len: usize,
}

impl PromptBlocks {
    /// The full blocks of `block_size` tokens that `segments` cover (replacing what it held).
    /// A block partly past the segments holds tokens of the request's own and ends the chain;
    /// a run's places count from 0 at its segment's first full block.
    pub fn describe(&mut self, segments: &[PrefixSegment], block_size: u32) {
        self.runs.clear();
        let block_size = u64::from(block_size);
        // `before` hashes the segments before the current one; `start` is where it begins.
        let (mut before, mut start, mut blocks) = (0u64, 0u64, 0u32);
        for s in segments.iter().filter(|s| s.tokens > 0) {
            let run = mix(before.rotate_left(17) ^ mix(s.stream));
            let end = start + u64::from(s.tokens);
            // The blocks whose last token lies in [start, end): block k ends at (k + 1) x size - 1.
            let count = (end / block_size - start / block_size) as u32;
            if count > 0 {
                self.runs.push(BlockRun {
                    hash: run,
                    first: 0,
                    count,
                    start: blocks,
                });
                blocks += count;
            }
            before = mix(run ^ u64::from(s.tokens));
            start = end;
        }
        self.len = blocks as usize;
    }

    /// The blocks `hashes`, in order: each stretch of consecutive places of one run is a run.
    #[cfg(test)]
    pub fn from_hashes(hashes: &[BlockHash]) -> Self {
        let mut runs: Vec<BlockRun> = Vec::new();
        for (k, hash) in hashes.iter().enumerate() {
            match runs.last_mut() {
                Some(last) if last.hash == hash.run && last.first + last.count == hash.at => {
                    last.count += 1;
                }
                _ => runs.push(BlockRun {
                    hash: hash.run,
                    first: hash.at,
                    count: 1,
                    start: k as u32,
                }),
            }
        }
        PromptBlocks {
            runs,
            len: hashes.len(),
        }
    }

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each block's identity, in order.
    #[cfg(test)]
    pub fn hashes(&self) -> impl Iterator<Item = BlockHash> + '_ {
        self.runs
            .iter()
            .flat_map(|r| (r.first..r.first + r.count).map(move |at| BlockHash { run: r.hash, at }))
    }

    /// The part of each run among the blocks `from..to` (within the prompt), in order: the
    /// run's hash, the place of the first of those blocks and how many.
    fn runs_in(&self, from: usize, to: usize) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        let to = to.min(self.len);
        self.runs.iter().filter_map(move |r| {
            let (start, end) = (r.start as usize, r.start as usize + r.count as usize);
            let (a, b) = (start.max(from), end.min(to));
            (a < b).then(|| (r.hash, r.first + (a - start) as u32, (b - a) as u32))
        })
    }
}

/// The identities of the full blocks of `block_size` tokens that `segments` cover, in order,
/// into `out` (cleared first): `PromptBlocks::describe`'s blocks one by one.
#[cfg(test)]
pub fn block_hashes(segments: &[PrefixSegment], block_size: u32, out: &mut Vec<BlockHash>) {
    let mut blocks = PromptBlocks::default();
    blocks.describe(segments, block_size);
    out.clear();
    out.extend(blocks.hashes());
}

/// Where a cached block's entry sits in `PrefixCache`'s entries: a sequence holds the slots of
/// the blocks it references, so dropping or taking a reference reads the entry directly, without
/// a map probe.
pub type Slot = u32;

/// A place in a run that names no entry.
const NO_SLOT: Slot = Slot::MAX;

/// One cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// Which free-queue entry stands for it while it is free: the entries pushed onto the queue
    /// before it (so it sits at `stamp - popped`).
    stamp: u64,
    /// Running sequences that hold it (0: free, evictable).
    refs: u32,
    /// Where its run names it (`Run::slots`): the run's index in `PrefixCache::run_list` and
    /// the block's place in it, so that its eviction clears its place without a map probe.
    run: u32,
    at: u32,
}

/// The cached blocks of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Run {
    /// The run's hash (`BlockHash::run`), its key in `PrefixCache::runs`.
    hash: u64,
    /// The slot of each of its resident blocks, by place (`NO_SLOT` where none is); empty for
    /// a run out of the map, and otherwise ending with a slot.
    slots: Vec<Slot>,
    /// Blocks registered into it or evicted from it so far, under every hash its index has had
    /// (never reset): while it is unchanged, so are `slots` (`LookupReads`).
    changes: u64,
}

/// What a `PrefixCache::lookup` read, so that a later lookup of the same blocks can tell
/// whether its hits still hold without reading the blocks again (`PrefixCache::lookup_again`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LookupReads {
    /// Each run it read: its index in `PrefixCache::run_list` and its `Run::changes` then.
    runs: Vec<(u32, u64)>,
    /// The run whose absence from the map ended it, if one did.
    absent: Option<u64>,
    /// The blocks it could read: its `max`, at most the prompt's blocks.
    len: usize,
}

/// A run of free blocks in the free queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Free {
    /// Blocks that hold no cached prefix (0: a cached block's entry left stale when a hit
    /// took the block).
    Plain(u64),
    /// A cached block, free and resident: its slot (its entry's stamp says where it is
    /// queued), and its run and place (`Entry::run`, `Entry::at`), read here when it is
    /// evicted rather than from its entry.
    Cached { slot: Slot, run: u32, at: u32 },
}

/// The free block queue: a vector read from `head` (the items before it were popped), moved
/// down once the popped items are half of it, so that a pop is one increment and an item's
/// place is a plain index.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FreeQueue {
    items: Vec<Free>,
    head: usize,
}

impl FreeQueue {
    #[inline]
    fn front_mut(&mut self) -> Option<&mut Free> {
        self.items.get_mut(self.head)
    }

    /// Drops the front item (there is one).
    #[inline]
    fn pop_front(&mut self) {
        self.head += 1;
        if self.head >= 64 && self.head * 2 >= self.items.len() {
            self.compact();
        }
    }

    #[inline(never)]
    fn compact(&mut self) {
        self.items.drain(..self.head);
        self.head = 0;
    }

    /// The item `at` places from the front.
    #[inline]
    fn get_mut(&mut self, at: usize) -> &mut Free {
        &mut self.items[self.head + at]
    }

    #[inline]
    fn back_mut(&mut self) -> Option<&mut Free> {
        self.items[self.head..].last_mut()
    }

    #[inline]
    fn push_back(&mut self, item: Free) {
        self.items.push(item);
    }
}

/// The cached blocks of one replica and its free block queue, kept beside the block counts of
/// `kv::BlockManager` (which calls it on every allocation and release).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixCache {
    /// The index in `run_list` of each run that names a slot, keyed by the run's hash (already
    /// mixed, so the map's own hash can be cheap).
    runs: FxHashMap<u64, u32>,
    /// The runs, by index; those out of `runs` (their slots empty, kept for reuse) are listed
    /// in `spare_runs`.
    run_list: Vec<Run>,
    spare_runs: Vec<u32>,
    /// The run `register` found last (its hash and index): a chunk registers its blocks in
    /// order, so consecutive registrations mostly fall in one run.
    last_run: Option<(u64, u32)>,
    /// The resident blocks' entries, by slot. An evicted block leaves its run at once (its
    /// place cleared, a run left without a slot out of the map) and its slot becomes spare,
    /// so every slot a run names is resident.
    entries: Vec<Entry>,
    /// Slots no run names, reused (the latest freed first) before `entries` grows.
    spare: Vec<Slot>,
    /// Slots the runs name: the resident blocks.
    resident: usize,
    free: FreeQueue,
    /// Entries ever pushed onto and popped off `free`.
    pushed: u64,
    popped: u64,
    /// Blocks allocated beyond the cache (an overcommitting admission rule): the next releases
    /// pay them back before any block rejoins the free queue.
    overdraft: u64,
    evicted: u64,
}

impl PrefixCache {
    /// An empty cache of `blocks` free blocks.
    pub fn new(blocks: u64) -> Self {
        PrefixCache {
            runs: FxHashMap::default(),
            run_list: Vec::new(),
            spare_runs: Vec::new(),
            last_run: None,
            entries: Vec::new(),
            spare: Vec::new(),
            resident: 0,
            free: FreeQueue {
                items: vec![Free::Plain(blocks)],
                head: 0,
            },
            pushed: 1,
            popped: 0,
            overdraft: 0,
            evicted: 0,
        }
    }

    /// Cached blocks evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Blocks resident in the cache (held or free).
    pub fn resident(&self) -> usize {
        self.resident
    }

    /// How many of `blocks` (a prompt's), from the first and at most `max`, are resident, and
    /// how many of those are free (a hit on them takes them out of the free blocks); their
    /// slots go to `hits` (cleared first), and what it read to `reads`. The map of runs is
    /// probed once a run.
    pub fn lookup(
        &self,
        blocks: &PromptBlocks,
        max: usize,
        hits: &mut Vec<Slot>,
        reads: &mut LookupReads,
    ) -> (usize, u64) {
        hits.clear();
        reads.runs.clear();
        reads.absent = None;
        let len = max.min(blocks.len());
        reads.len = len;
        let mut free = 0;
        'runs: for (hash, first, count) in blocks.runs_in(0, len) {
            let Some(&index) = self.runs.get(&hash) else {
                reads.absent = Some(hash);
                break;
            };
            let read = &self.run_list[index as usize];
            reads.runs.push((index, read.changes));
            let places = read.slots.get(first as usize..).unwrap_or(&[]);
            for k in 0..count as usize {
                match places.get(k) {
                    Some(&slot) if slot != NO_SLOT => {
                        free += u64::from(self.entries[slot as usize].refs == 0);
                        hits.push(slot);
                    }
                    _ => break 'runs,
                }
            }
        }
        (hits.len(), free)
    }

    /// What `lookup` would answer now for the blocks it answered `kept` for with `reads`, at
    /// most `len` of them (its `max` bounded by the prompt's blocks), when that can be told
    /// without reading them: when no run it read has had a block registered or evicted since,
    /// the run whose absence ended it is still absent and `len` is the same, the same blocks
    /// are resident in the same slots and the first one missing is still missing, so the hits
    /// are `kept` (into `hits`), and only the free ones among them are counted again
    /// (references taken or dropped since move no block). `None` otherwise.
    pub fn lookup_again(
        &self,
        len: usize,
        reads: &LookupReads,
        kept: &[Slot],
        hits: &mut Vec<Slot>,
    ) -> Option<(usize, u64)> {
        if reads.len != len
            || reads
                .runs
                .iter()
                .any(|&(index, changes)| self.run_list[index as usize].changes != changes)
            || reads.absent.is_some_and(|run| self.runs.contains_key(&run))
        {
            return None;
        }
        hits.clear();
        hits.extend_from_slice(kept);
        let free = kept
            .iter()
            .map(|&slot| u64::from(self.entries[slot as usize].refs == 0))
            .sum();
        Some((kept.len(), free))
    }

    /// Whether the cache holds none of `blocks` from the block `from` on: one map probe a run
    /// (a run's slots end with one, so any named at the run's first place here or past it
    /// lengthens them). (It answers no, conservatively, where a run names a block past one of
    /// them but none of them.)
    pub fn names_none(&self, blocks: &PromptBlocks, from: usize) -> bool {
        blocks.runs_in(from, blocks.len()).all(|(hash, first, _)| {
            self.runs
                .get(&hash)
                .is_none_or(|&index| self.run_list[index as usize].slots.len() <= first as usize)
        })
    }

    /// Reads the entries at `slots` (a finishing sequence's held blocks) before they are
    /// released: these reads do not depend on each other, so their cache misses overlap, where
    /// each release would wait for its own before the next one begins. Changes nothing.
    pub fn warm_slots(&self, slots: &[Slot]) {
        for &slot in slots {
            std::hint::black_box(self.entries[slot as usize].refs);
        }
    }

    /// A sequence takes a reference on each resident block at `slots` (`acquire`): how many
    /// of them were free.
    pub fn acquire_all(&mut self, slots: &[Slot]) -> u64 {
        let mut taken = 0;
        for &slot in slots {
            taken += u64::from(self.acquire(slot));
        }
        taken
    }

    /// A sequence has computed the blocks `from..to` of `blocks`, in order (`register`): the
    /// slots of those cached with its reference are pushed onto `held`. Each run is found once
    /// (no block is evicted meanwhile, so its index holds for all its blocks) and its slots
    /// made room for once.
    pub fn register_all(
        &mut self,
        blocks: &PromptBlocks,
        from: usize,
        to: usize,
        held: &mut Vec<Slot>,
    ) {
        held.reserve(to.saturating_sub(from));
        for (hash, first, count) in blocks.runs_in(from, to) {
            let run = self.run_index(hash);
            let slots = &mut self.run_list[run].slots;
            let end = (first + count) as usize;
            slots.reserve(end.saturating_sub(slots.len()));
            for at in first..first + count {
                if let Some(slot) = self.register_in(run, at) {
                    held.push(slot);
                }
            }
        }
    }

    /// A sequence drops its references on the blocks at `slots`, the last first (`unref`): how
    /// many of them became free.
    pub fn unref_all(&mut self, slots: &[Slot]) -> u64 {
        let mut freed = 0;
        if self.overdraft > 0 {
            for &slot in slots.iter().rev() {
                freed += u64::from(self.unref(slot));
            }
            return freed;
        }
        // No overdraft, and releases make none: every block freed joins the queue's tail, as
        // `unref` does it, with the queue's room made once.
        self.free.items.reserve(slots.len());
        let mut pushed = self.pushed;
        for &slot in slots.iter().rev() {
            let entry = &mut self.entries[slot as usize];
            entry.refs -= 1;
            if entry.refs == 0 {
                entry.stamp = pushed;
                pushed += 1;
                let (run, at) = (entry.run, entry.at);
                self.free.push_back(Free::Cached { slot, run, at });
            }
        }
        freed = pushed - self.pushed;
        self.pushed = pushed;
        freed
    }

    /// A sequence takes a reference on the resident block at `slot` (from `lookup`); true when
    /// the block was free (it leaves the free blocks; its queue entry becomes an empty plain
    /// run, which `take` passes over without looking the block up).
    #[inline]
    pub fn acquire(&mut self, slot: Slot) -> bool {
        let entry = &mut self.entries[slot as usize];
        debug_assert_eq!(
            self.run_list[entry.run as usize]
                .slots
                .get(entry.at as usize),
            Some(&slot),
            "acquired block is resident"
        );
        entry.refs += 1;
        if entry.refs > 1 {
            return false;
        }
        let at = (entry.stamp - self.popped) as usize;
        let queued = self.free.get_mut(at);
        debug_assert!(
            matches!(*queued, Free::Cached { slot: s, .. } if s == slot),
            "a free cached block is queued where its stamp says"
        );
        *queued = Free::Plain(0);
        true
    }

    /// The index in `run_list` of the run `hash`, added to the map if it is not there.
    #[inline]
    fn run_index(&mut self, hash: u64) -> usize {
        match self.last_run {
            Some((last, index)) if last == hash => index as usize,
            _ => self.find_run(hash),
        }
    }

    /// `run_index` past the run found last.
    #[inline(never)]
    fn find_run(&mut self, hash: u64) -> usize {
        let index = match self.runs.entry(hash) {
            MapEntry::Occupied(occupied) => *occupied.get(),
            MapEntry::Vacant(vacant) => {
                let index = match self.spare_runs.pop() {
                    Some(index) => {
                        self.run_list[index as usize].hash = hash;
                        index
                    }
                    None => {
                        self.run_list.push(Run {
                            hash,
                            slots: Vec::new(),
                            changes: 0,
                        });
                        u32::try_from(self.run_list.len() - 1).expect("under 2^32 runs")
                    }
                };
                *vacant.insert(index)
            }
        };
        self.last_run = Some((hash, index));
        index as usize
    }

    /// A sequence has computed the block `hash`: it becomes cached with the sequence's
    /// reference, at the slot returned; `None` (and nothing changes) when an equal block is
    /// already resident.
    #[cfg(test)]
    pub fn register(&mut self, hash: BlockHash) -> Option<Slot> {
        let run = self.run_index(hash.run);
        self.register_in(run, hash.at)
    }

    /// `register` of the block at place `at` of the run at index `run` (in the map).
    #[inline]
    fn register_in(&mut self, run: usize, place: u32) -> Option<Slot> {
        let at = place as usize;
        if self.run_list[run]
            .slots
            .get(at)
            .is_some_and(|&slot| slot != NO_SLOT)
        {
            return None;
        }
        let held = Entry {
            stamp: 0,
            refs: 1,
            run: run as u32,
            at: place,
        };
        let slot = match self.spare.pop() {
            Some(slot) => {
                self.entries[slot as usize] = held;
                slot
            }
            None => {
                self.entries.push(held);
                Slot::try_from(self.entries.len() - 1).expect("under 2^32 cached blocks")
            }
        };
        let written = &mut self.run_list[run];
        written.changes += 1;
        let slots = &mut written.slots;
        if at < slots.len() {
            slots[at] = slot;
        } else {
            if at > slots.len() {
                slots.resize(at, NO_SLOT);
            }
            slots.push(slot);
        }
        self.resident += 1;
        Some(slot)
    }

    /// A sequence drops its reference on the block at `slot`; true when the block became free
    /// (it joins the free queue's tail, or is evicted at once to pay back an overdraft).
    #[inline]
    pub fn unref(&mut self, slot: Slot) -> bool {
        let entry = &mut self.entries[slot as usize];
        entry.refs -= 1;
        if entry.refs > 0 {
            return false;
        }
        let (run, at) = (entry.run, entry.at);
        if self.overdraft > 0 {
            self.overdraft -= 1;
            self.evict(slot, run, at);
        } else {
            entry.stamp = self.pushed;
            self.free.push_back(Free::Cached { slot, run, at });
            self.pushed += 1;
        }
        true
    }

    /// The free block at `slot` (place `at` of the run at index `run`) is evicted: its place
    /// is cleared, its run leaves the map if it names no slot any more, and the slot becomes
    /// spare.
    #[inline]
    fn evict(&mut self, slot: Slot, run: u32, at: u32) {
        let evicted = &mut self.run_list[run as usize];
        evicted.changes += 1;
        let slots = &mut evicted.slots;
        slots[at as usize] = NO_SLOT;
        if at as usize + 1 == slots.len() {
            while slots.last() == Some(&NO_SLOT) {
                slots.pop();
            }
            if slots.is_empty() {
                self.drop_run(run);
            }
        }
        self.spare.push(slot);
        self.resident -= 1;
        self.evicted += 1;
    }

    /// The run at index `run`, left without a slot, leaves the map (its index kept for reuse).
    #[inline(never)]
    fn drop_run(&mut self, run: u32) {
        let hash = self.run_list[run as usize].hash;
        self.runs.remove(&hash);
        self.spare_runs.push(run);
        if self.last_run.is_some_and(|(_, index)| index == run) {
            self.last_run = None;
        }
    }

    /// `n` blocks are allocated: taken from the free queue's head, evicting the cached blocks
    /// among them.
    pub fn take(&mut self, mut n: u64) {
        while n > 0 {
            let Some(front) = self.free.front_mut() else {
                self.overdraft += n;
                return;
            };
            match *front {
                Free::Plain(k) => {
                    let used = k.min(n);
                    n -= used;
                    if used == k {
                        self.free.pop_front();
                        self.popped += 1;
                    } else {
                        *front = Free::Plain(k - used);
                    }
                }
                Free::Cached { slot, run, at } => {
                    self.free.pop_front();
                    self.popped += 1;
                    self.evict(slot, run, at);
                    n -= 1;
                }
            }
        }
    }

    /// `n` plain blocks are freed (the overdraft paid back first).
    pub fn give(&mut self, n: u64) {
        let paid = n.min(self.overdraft);
        self.overdraft -= paid;
        let n = n - paid;
        if n == 0 {
            return;
        }
        match self.free.back_mut() {
            Some(Free::Plain(k)) => *k += n,
            _ => {
                self.free.push_back(Free::Plain(n));
                self.pushed += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn seg(stream: u64, tokens: u32) -> PrefixSegment {
        PrefixSegment { stream, tokens }
    }

    /// A block named by a number: three places to a run, so a chain of numbers crosses runs.
    fn h(n: u64) -> BlockHash {
        BlockHash {
            run: n / 3,
            at: (n % 3) as u32,
        }
    }

    fn chain(numbers: impl IntoIterator<Item = u64>) -> Vec<BlockHash> {
        numbers.into_iter().map(h).collect()
    }

    /// `lookup`'s (hits, free hits) for `hashes`, at most `max`.
    fn hits(cache: &PrefixCache, hashes: &[BlockHash], max: usize) -> (usize, u64) {
        let blocks = PromptBlocks::from_hashes(hashes);
        cache.lookup(&blocks, max, &mut Vec::new(), &mut LookupReads::default())
    }

    /// The slot of the resident block `hash`.
    fn slot(cache: &PrefixCache, hash: BlockHash) -> Slot {
        let mut slots = Vec::new();
        let blocks = PromptBlocks::from_hashes(&[hash]);
        cache.lookup(&blocks, 1, &mut slots, &mut LookupReads::default());
        slots[0]
    }

    /// `count` random prompts of one to three segments, each of one of `lengths` tokens from one
    /// of `streams` streams: each prompt's block identities (ours) and chained hashes (vLLM's).
    fn random_prompts(
        rng: &mut impl rand::RngExt,
        count: usize,
        lengths: &[u32],
        streams: u64,
        block_size: u32,
    ) -> Vec<(Vec<BlockHash>, Vec<u64>)> {
        (0..count)
            .map(|_| {
                let segments: Vec<PrefixSegment> = (0..rng.random_range(1..4))
                    .map(|_| {
                        let tokens = lengths[rng.random_range(0..lengths.len())];
                        seg(rng.random_range(0..streams), tokens)
                    })
                    .collect();
                let mut ours = Vec::new();
                block_hashes(&segments, block_size, &mut ours);
                (ours, chained_hashes(&segments, block_size))
            })
            .collect()
    }

    /// vLLM's identity of a prompt's full blocks written out as it defines it: a hash chained
    /// block by block over what each block holds (for each segment it touches: the stream, the
    /// offset and the tokens taken), the reference `block_hashes` must agree with.
    fn chained_hashes(segments: &[PrefixSegment], block_size: u32) -> Vec<u64> {
        let mut tokens: Vec<(u64, u32)> = Vec::new();
        for s in segments {
            tokens.extend((0..s.tokens).map(|offset| (s.stream, offset)));
        }
        let mut out = Vec::new();
        let mut hash = 0u64;
        for block in tokens.chunks_exact(block_size as usize) {
            let mut pieces: Vec<(u64, u32, u32)> = Vec::new();
            for &(stream, offset) in block {
                match pieces.last_mut() {
                    Some((s, start, n)) if *s == stream && *start + *n == offset => *n += 1,
                    _ => pieces.push((stream, offset, 1)),
                }
            }
            for (stream, offset, n) in pieces {
                hash = mix(hash.rotate_left(17) ^ mix(stream));
                hash = mix(hash ^ (u64::from(offset) << 32 | u64::from(n)));
            }
            out.push(hash);
        }
        out
    }

    #[test]
    fn equal_streams_give_equal_chains_and_a_different_token_ends_the_match() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        // 40 tokens of stream 7 then 30 of stream 9: 4 full blocks of 16 (64 tokens).
        block_hashes(&[seg(7, 40), seg(9, 30)], 16, &mut a);
        assert_eq!(a.len(), 4);
        // The same stream 7, then a longer stream 9: its first 4 blocks are the same.
        block_hashes(&[seg(7, 40), seg(9, 100)], 16, &mut b);
        assert_eq!(b.len(), 8);
        assert_eq!(a[..], b[..4]);
        // Stream 7 shorter by one token: blocks 0 and 1 (tokens 0-31) match, block 2 does not,
        // nor does any block after it (the chain).
        block_hashes(&[seg(7, 39), seg(9, 31)], 16, &mut b);
        assert_eq!(a[..2], b[..2]);
        assert!(a[2..].iter().zip(&b[2..]).all(|(x, y)| x != y));
    }

    #[test]
    fn blocks_are_equal_exactly_where_the_chained_hashes_are() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(3, "prefix-block-identity");
        // Few streams and lengths, so that prompts often share segments, offsets and runs.
        let lengths = [0, 3, 8, 13, 16, 21, 40];
        let prompts: Vec<Vec<PrefixSegment>> = (0..300)
            .map(|_| {
                (0..rng.random_range(0..5))
                    .map(|_| {
                        let tokens = lengths[rng.random_range(0..lengths.len())];
                        seg(rng.random_range(0..3), tokens)
                    })
                    .collect()
            })
            .collect();
        let mut shared = 0;
        for block_size in [1, 4, 8] {
            let blocks: Vec<(Vec<BlockHash>, Vec<u64>)> = prompts
                .iter()
                .map(|segments| {
                    let mut ours = Vec::new();
                    block_hashes(segments, block_size, &mut ours);
                    (ours, chained_hashes(segments, block_size))
                })
                .collect();
            for (ours, reference) in &blocks {
                assert_eq!(ours.len(), reference.len());
            }
            for (i, (a, ra)) in blocks.iter().enumerate() {
                for (b, rb) in &blocks[i + 1..] {
                    for k in 0..a.len().min(b.len()) {
                        assert_eq!(a[k] == b[k], ra[k] == rb[k]);
                        shared += usize::from(k > 0 && ra[k] == rb[k]);
                    }
                }
            }
        }
        assert!(shared > 10_000, "{shared} shared blocks");
    }

    #[test]
    fn the_least_recently_freed_cached_block_is_evicted_first() {
        let mut cache = PrefixCache::new(4);
        cache.take(4);
        let (one, two) = (cache.register(h(1)).unwrap(), cache.register(h(2)).unwrap());
        cache.give(2);
        // Block 2 freed before block 1: 2 is the older.
        assert!(cache.unref(two) && cache.unref(one));
        assert_eq!(cache.register(h(1)), None, "1 is still resident");
        // Two plain blocks were freed before both: they go first, then block 2.
        cache.take(3);
        assert_eq!(hits(&cache, &[h(2)], 1), (0, 0));
        assert_eq!(hits(&cache, &[h(1)], 1), (1, 1));
        assert_eq!(cache.evicted(), 1);
    }

    #[test]
    fn warming_the_entries_changes_nothing() {
        let mut cache = PrefixCache::new(8);
        cache.take(6);
        let slots: Vec<Slot> = (1..=4).map(|n| cache.register(h(n)).unwrap()).collect();
        cache.unref(slots[1]);
        let before = cache.clone();
        cache.warm_slots(&slots);
        assert_eq!(cache, before);
        assert!(cache.register(h(5)).is_some());
        assert_eq!(hits(&cache, &chain(1..=5), 5), (5, 1));
    }

    #[test]
    fn an_evicted_block_s_slot_is_reused_and_an_emptied_run_leaves_the_map() {
        let mut cache = PrefixCache::new(8);
        cache.take(8);
        let slots: Vec<Slot> = (1..=8).map(|n| cache.register(h(n)).unwrap()).collect();
        assert_eq!(slots, (0..8).collect::<Vec<Slot>>());
        for i in [5, 2, 7, 0, 3, 6, 1, 4] {
            cache.unref(slots[i]);
        }
        // All eight evicted, in the order they were freed: their runs leave the map at once.
        cache.take(8);
        assert_eq!(cache.resident(), 0);
        assert!(cache.runs.is_empty());
        assert!(cache.run_list.iter().all(|run| run.slots.is_empty()));
        // The slots are reused, the latest evicted first.
        let reused: Vec<Slot> = (11..=14).map(|n| cache.register(h(n)).unwrap()).collect();
        assert_eq!(reused, [slots[4], slots[1], slots[6], slots[3]]);
        assert_eq!(hits(&cache, &chain([11, 12, 13, 14, 1]), 5), (4, 0));
        // The runs 3 and 4 (blocks 11 to 14) took the indices the removed runs left.
        assert_eq!(cache.run_list.len(), 3);
    }

    #[test]
    fn a_lookup_stops_at_the_first_miss() {
        let mut cache = PrefixCache::new(24);
        cache.take(24);
        for n in 1..=20 {
            cache.register(h(n)).unwrap();
        }
        let blocks = chain(1..=20);
        assert_eq!(hits(&cache, &blocks, 20), (20, 0));
        assert_eq!(hits(&cache, &blocks, 17), (17, 0));
        // A miss (block 99 never computed, in a run that does not exist) ends the match there.
        let broken = chain((1..=11).chain([99]).chain(12..=20));
        let mut slots = Vec::new();
        let mut reads = LookupReads::default();
        let broken = PromptBlocks::from_hashes(&broken);
        assert_eq!(cache.lookup(&broken, 21, &mut slots, &mut reads), (11, 0));
        assert_eq!(slots, (0..11).collect::<Vec<Slot>>());
        // So does a place never computed in a run that has others: block 21 is run 7's place
        // 0, where only place 2 (block 23) is cached.
        cache.register(h(23)).unwrap();
        assert_eq!(hits(&cache, &chain(18..=23), 6), (3, 0));
        assert_eq!(hits(&cache, &[h(23)], 1), (1, 0));
    }

    #[test]
    fn a_prompt_s_runs_hold_its_blocks_and_names_none_reads_every_run() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(5, "run-len");
        let lengths = [0, 3, 4, 9, 16, 22, 40];
        let mut parts = 0;
        for _ in 0..200 {
            let segments: Vec<PrefixSegment> = (0..rng.random_range(0..5))
                .map(|_| seg(rng.random_range(0..5), lengths[rng.random_range(0..7)]))
                .collect();
            let mut described = PromptBlocks::default();
            described.describe(&segments, 4);
            // Block by block, the blocks of the chained-hash reference; as runs, the stretches
            // of consecutive places of one run.
            let ours: Vec<BlockHash> = described.hashes().collect();
            assert_eq!(ours.len(), chained_hashes(&segments, 4).len());
            assert_eq!(described.len(), ours.len());
            assert_eq!(PromptBlocks::from_hashes(&ours), described);
            // Every range's parts of runs are its blocks, and no part is empty.
            for from in 0..=ours.len() {
                for to in from..=ours.len() {
                    let mut blocks = Vec::new();
                    for (run, first, count) in described.runs_in(from, to) {
                        assert!(count > 0);
                        blocks.extend((first..first + count).map(|at| BlockHash { run, at }));
                        parts += 1;
                    }
                    assert_eq!(blocks, ours[from..to]);
                }
            }
        }
        assert!(parts > 10_000, "{parts} parts of runs");
        // Run 7 (blocks 21 to 23) named, run 6 (18 to 20) not: the second run is read too.
        let mut cache = PrefixCache::new(8);
        cache.take(3);
        for n in 21..=23 {
            cache.register(h(n)).unwrap();
        }
        let named = |numbers: std::ops::RangeInclusive<u64>| {
            !cache.names_none(&PromptBlocks::from_hashes(&chain(numbers)), 0)
        };
        assert!(named(18..=23));
        assert!(named(19..=22));
        assert!(!named(18..=20));
        // From a block past the first: the runs' parts from there.
        let blocks = PromptBlocks::from_hashes(&chain(15..=23));
        assert!(!cache.names_none(&blocks, 4));
        assert!(cache.names_none(&blocks, 9));
        let blocks = PromptBlocks::from_hashes(&chain(15..=20));
        assert!(cache.names_none(&blocks, 2));
    }

    #[test]
    fn a_run_keeps_the_blocks_after_an_evicted_one() {
        // Run 0's places 0 to 2 (blocks 0, 1, 2): place 1 is freed and evicted alone.
        let mut cache = PrefixCache::new(3);
        cache.take(3);
        let slots: Vec<Slot> = (0..3).map(|n| cache.register(h(n)).unwrap()).collect();
        cache.unref(slots[1]);
        cache.take(1);
        assert_eq!(cache.evicted(), 1);
        // Place 1 is cleared at once; a lookup stops there. The block is then computed again,
        // into the slot its eviction left.
        assert_eq!(cache.run_list[0].slots, [slots[0], NO_SLOT, slots[2]]);
        assert_eq!(hits(&cache, &chain(0..3), 3), (1, 0));
        assert_eq!(hits(&cache, &[h(2)], 1), (1, 0));
        cache.give(1);
        assert_eq!(
            cache.register(h(1)),
            Some(slots[1]),
            "the spare slot is reused"
        );
        assert_eq!(hits(&cache, &chain(0..3), 3), (3, 0));
        // Places 0 and 2 evicted: run 0 keeps place 1 (a gap before it, the place after it
        // cut off).
        cache.unref(slots[0]);
        cache.unref(slots[2]);
        cache.take(3);
        assert_eq!(cache.resident(), 1);
        assert_eq!(cache.run_list[0].slots, [NO_SLOT, slots[1]]);
        assert!(!cache.names_none(&PromptBlocks::from_hashes(&[h(1)]), 0));
        assert!(cache.names_none(&PromptBlocks::from_hashes(&[h(2)]), 0));
        // Run 1's three blocks computed and evicted: it leaves the map.
        cache.give(3);
        cache.take(3);
        let run1: Vec<Slot> = (3..6).map(|n| cache.register(h(n)).unwrap()).collect();
        for &slot in run1.iter().rev() {
            cache.unref(slot);
        }
        cache.take(3);
        assert_eq!(cache.resident(), 1);
        assert_eq!(cache.run_list.len(), 2);
        assert!(!cache.runs.contains_key(&1) && cache.run_list[1].slots.is_empty());
        assert_eq!(hits(&cache, &chain(0..3), 3), (0, 0));
        assert_eq!(hits(&cache, &[h(1)], 1), (1, 0));
    }

    #[test]
    fn a_hit_on_a_free_block_keeps_it_from_eviction() {
        let mut cache = PrefixCache::new(2);
        cache.take(2);
        let (five, six) = (cache.register(h(5)).unwrap(), cache.register(h(6)).unwrap());
        cache.unref(five);
        cache.unref(six);
        assert!(cache.acquire(slot(&cache, h(5))), "5 was free");
        // One block is free (6): taking it evicts 6; the stale queue entry of 5 is skipped.
        cache.take(1);
        assert_eq!(hits(&cache, &chain([5, 6]), 2), (1, 0));
        assert_eq!(cache.evicted(), 1);
    }

    /// The cache written out block by block, as the module doc states it: blocks keyed by
    /// their chained hashes (`chained_hashes`), free blocks in the order they were freed
    /// (`None` plain, `Some(hash)` cached), a hit taking its block out wherever it is, an
    /// allocation taking the oldest and evicting it if cached.
    #[derive(Default)]
    struct BlockByBlock {
        refs: BTreeMap<u64, u32>,
        free: VecDeque<Option<u64>>,
        overdraft: u64,
        evicted: u64,
    }

    impl BlockByBlock {
        /// Every prompt's leading resident blocks, and how many of them are free, are the same
        /// in `cache` as in the model.
        fn assert_hits_alike(&self, cache: &PrefixCache, prompts: &[(Vec<BlockHash>, Vec<u64>)]) {
            for (ours, reference) in prompts {
                let expected = reference
                    .iter()
                    .take_while(|h| self.refs.contains_key(h))
                    .fold((0, 0), |(n, free), h| {
                        (n + 1, free + u64::from(self.refs[h] == 0))
                    });
                assert_eq!(hits(cache, ours, ours.len()), expected);
            }
        }

        fn acquire(&mut self, hash: u64) -> bool {
            let refs = self.refs.get_mut(&hash).expect("resident");
            *refs += 1;
            if *refs == 1 {
                let at = self.free.iter().position(|b| *b == Some(hash));
                self.free.remove(at.expect("a free block is queued"));
            }
            *refs == 1
        }
        fn register(&mut self, hash: u64) -> bool {
            if self.refs.contains_key(&hash) {
                return false;
            }
            self.refs.insert(hash, 1);
            true
        }
        fn unref(&mut self, hash: u64) -> bool {
            let refs = self.refs.get_mut(&hash).expect("held");
            *refs -= 1;
            if *refs > 0 {
                return false;
            }
            if self.overdraft > 0 {
                self.overdraft -= 1;
                self.refs.remove(&hash);
                self.evicted += 1;
            } else {
                self.free.push_back(Some(hash));
            }
            true
        }
        fn take(&mut self, n: u64) {
            for _ in 0..n {
                match self.free.pop_front() {
                    Some(Some(hash)) => {
                        self.refs.remove(&hash);
                        self.evicted += 1;
                    }
                    Some(None) => {}
                    None => self.overdraft += 1,
                }
            }
        }
        fn give(&mut self, n: u64) {
            let paid = n.min(self.overdraft);
            self.overdraft -= paid;
            self.free.extend((paid..n).map(|_| None));
        }
    }

    #[test]
    fn the_run_cache_caches_hits_and_evicts_as_the_block_by_block_cache_does() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(7, "prefix-cache-model");
        // Prompts of blocks of 8 tokens: a shared first segment or not, then a few more.
        let prompts = random_prompts(&mut rng, 16, &[5, 8, 12, 16, 29, 40], 4, 8);
        // Every prompt block: (its identity, its chained hash).
        let pool: Vec<(BlockHash, u64)> = prompts
            .iter()
            .flat_map(|(ours, reference)| ours.iter().copied().zip(reference.iter().copied()))
            .collect();
        let blocks = 24;
        let mut cache = PrefixCache::new(blocks);
        let mut model = BlockByBlock::default();
        model.free.extend((0..blocks).map(|_| None));
        // What the simulated sequences hold: plain blocks, and references on cached ones.
        let (mut plain, mut held) = (0u64, Vec::new());
        let (mut acquired, mut evictions_seen) = (0, 0);
        for _ in 0..20_000 {
            let (block, hash) = pool[rng.random_range(0..pool.len())];
            match rng.random_range(0..6) {
                // A hit on a resident block (free or held).
                0 if model.refs.contains_key(&hash) => {
                    let was_free = model.acquire(hash);
                    let at = slot(&cache, block);
                    assert_eq!(cache.acquire(at), was_free);
                    acquired += u32::from(was_free);
                    held.push((hash, at));
                }
                1 | 2 => {
                    let n = rng.random_range(1..4);
                    cache.take(n);
                    model.take(n);
                    plain += n;
                }
                3 if plain > 0 => {
                    // A computed block is offered to the cache.
                    let fresh = model.register(hash);
                    let registered = cache.register(block);
                    assert_eq!(registered.is_some(), fresh);
                    if let Some(at) = registered {
                        plain -= 1;
                        held.push((hash, at));
                    }
                }
                4 if !held.is_empty() => {
                    let (hash, at) = held.swap_remove(rng.random_range(0..held.len()));
                    assert_eq!(cache.unref(at), model.unref(hash));
                }
                _ if plain > 0 => {
                    let n = rng.random_range(1..=plain);
                    cache.give(n);
                    model.give(n);
                    plain -= n;
                }
                _ => {}
            }
            assert_eq!(cache.evicted(), model.evicted);
            assert_eq!(cache.resident(), model.refs.len());
            model.assert_hits_alike(&cache, &prompts);
            evictions_seen = model.evicted;
        }
        assert!(
            acquired > 30 && evictions_seen > 100,
            "{acquired} hits, {evictions_seen} evictions"
        );
    }

    /// The free blocks the queue holds, and checks that every place a run names is a
    /// resident entry that names it back, that the map lists exactly the runs with a slot,
    /// and that `resident` counts the named slots.
    fn free_and_check(cache: &PrefixCache) -> u64 {
        let mut named = 0;
        for (index, run) in cache.run_list.iter().enumerate() {
            assert_eq!(
                cache.runs.get(&run.hash) == Some(&(index as u32)),
                !run.slots.is_empty()
            );
            assert!(run.slots.last() != Some(&NO_SLOT), "a run ends with a slot");
            for (at, &slot) in run.slots.iter().enumerate() {
                if slot != NO_SLOT {
                    let entry = cache.entries[slot as usize];
                    assert_eq!((entry.run as usize, entry.at as usize), (index, at));
                    named += 1;
                }
            }
        }
        assert_eq!(named, cache.resident());
        assert_eq!(
            cache.runs.len(),
            cache.run_list.len() - cache.spare_runs.len()
        );
        cache.free.items[cache.free.head..]
            .iter()
            .map(|item| match *item {
                Free::Plain(k) => k,
                Free::Cached { .. } => 1,
            })
            .sum()
    }

    #[test]
    fn sequences_that_compute_release_and_resume_see_the_block_by_block_cache() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(11, "prefix-cache-sequences");
        // Prompts of blocks of 4 tokens, a shared first segment or not, as in the test above.
        let prompts = random_prompts(&mut rng, 12, &[3, 4, 9, 16, 22, 40], 3, 4);
        let described: Vec<PromptBlocks> = prompts
            .iter()
            .map(|(ours, _)| PromptBlocks::from_hashes(ours))
            .collect();
        let blocks = 40;
        let mut cache = PrefixCache::new(blocks);
        let mut model = BlockByBlock::default();
        model.free.extend((0..blocks).map(|_| None));
        // A sequence: its prompt, the blocks it has gone through (hit or computed), its plain
        // blocks and its references (hash, slot), in prompt order.
        struct Sequence {
            prompt: usize,
            done: usize,
            plain: u64,
            held: Vec<(u64, Slot)>,
        }
        let mut running: Vec<Sequence> = Vec::new();
        let mut preempted: Vec<usize> = Vec::new();
        let (mut tail_hits, mut overdrafts, mut overdrawn_releases) = (0, 0, 0);
        // Whether a departure releases one by one or all at once: its own stream, so that the
        // operations drawn are those of the test without it.
        let mut coin = crate::rng::stream(12, "prefix-cache-releases");
        // Each prompt's lookup, kept (what it read and its hits) until it no longer holds.
        let mut kept: Vec<(LookupReads, Vec<Slot>)> = vec![Default::default(); prompts.len()];
        let (mut held_again, mut looked_anew, mut names_checked) = (0, 0, 0);
        for _ in 0..6_000 {
            match rng.random_range(0..8) {
                // Admission (new or resumed): its prompt's resident blocks hit, in order.
                0 | 1 if running.len() < 6 => {
                    let prompt = match preempted.pop() {
                        Some(prompt) if rng.random_bool(0.7) => prompt,
                        _ => rng.random_range(0..prompts.len()),
                    };
                    let (ours, reference) = &prompts[prompt];
                    let mut slots = Vec::new();
                    let reads = &mut LookupReads::default();
                    let (hit, _) = cache.lookup(&described[prompt], ours.len(), &mut slots, reads);
                    let mut held = Vec::new();
                    for (k, &slot) in slots.iter().enumerate() {
                        let at_back = cache.free.items.len() > cache.free.head
                            && cache.free.items.last()
                                == Some(&Free::Cached {
                                    slot,
                                    run: cache.entries[slot as usize].run,
                                    at: cache.entries[slot as usize].at,
                                });
                        tail_hits += u32::from(at_back);
                        assert_eq!(cache.acquire(slot), model.acquire(reference[k]));
                        held.push((reference[k], slot));
                    }
                    running.push(Sequence {
                        prompt,
                        done: hit,
                        plain: 0,
                        held,
                    });
                }
                // A step: a sequence computes its next prompt blocks (a block each, taken
                // from the free queue, possibly past the free blocks), registered in order.
                2..=4 if !running.is_empty() => {
                    let i = rng.random_range(0..running.len());
                    let s = &mut running[i];
                    let (ours, reference) = &prompts[s.prompt];
                    let n = rng.random_range(1..4).min(ours.len() - s.done) as u64;
                    overdrafts += u32::from(n > model.free.len() as u64);
                    cache.take(n);
                    model.take(n);
                    // Registered by the range, as a replica's step does: the new slots are
                    // those of the blocks the model finds new, in order.
                    let mut slots = Vec::new();
                    let to = s.done + n as usize;
                    cache.register_all(&described[s.prompt], s.done, to, &mut slots);
                    let mut slots = slots.into_iter();
                    for &hash in &reference[s.done..to] {
                        if model.register(hash) {
                            s.held
                                .push((hash, slots.next().expect("a new block's slot")));
                        } else {
                            s.plain += 1;
                        }
                    }
                    assert_eq!(slots.next(), None, "as many new slots as new blocks");
                    s.done = to;
                }
                // A sequence leaves (finished or preempted): plain blocks first, then its
                // references, the last first.
                5 | 6 if !running.is_empty() => {
                    let s = running.swap_remove(rng.random_range(0..running.len()));
                    cache.give(s.plain);
                    model.give(s.plain);
                    if coin.random_bool(0.5) {
                        for &(hash, slot) in s.held.iter().rev() {
                            assert_eq!(cache.unref(slot), model.unref(hash));
                        }
                    } else {
                        // All at once, as a replica releases them (`unref_all`).
                        let freed = s.held.iter().rev().map(|&(hash, _)| model.unref(hash));
                        let freed = freed.filter(|&freed| freed).count() as u64;
                        overdrawn_releases += u32::from(cache.overdraft > 0);
                        let slots: Vec<Slot> = s.held.iter().map(|&(_, slot)| slot).collect();
                        assert_eq!(cache.unref_all(&slots), freed);
                    }
                    preempted.push(s.prompt);
                }
                _ => {}
            }
            assert_eq!(cache.evicted(), model.evicted);
            assert_eq!(cache.resident(), model.refs.len());
            let queued = model.free.len() as u64;
            assert_eq!(free_and_check(&cache), queued);
            model.assert_hits_alike(&cache, &prompts);
            // `names_none` on every suffix of every prompt, as defined block by block.
            for ((ours, _), blocks) in prompts.iter().zip(&described) {
                for from in 0..ours.len() {
                    let named = ours[from..].iter().any(|hash| {
                        cache.runs.get(&hash.run).is_some_and(|&index| {
                            cache.run_list[index as usize].slots.len() > hash.at as usize
                        })
                    });
                    assert_eq!(cache.names_none(blocks, from), !named);
                    names_checked += usize::from(named);
                }
            }
            // A kept lookup that still holds answers as a fresh one does; one that does not is
            // looked up anew and kept.
            for (((reads, slots), (ours, _)), blocks) in
                kept.iter_mut().zip(&prompts).zip(&described)
            {
                let (mut fresh, mut fresh_reads) = (Vec::new(), LookupReads::default());
                let answer = cache.lookup(blocks, ours.len(), &mut fresh, &mut fresh_reads);
                let mut again = Vec::new();
                match cache.lookup_again(ours.len(), reads, slots, &mut again) {
                    Some(kept_answer) => {
                        assert_eq!((kept_answer, &again), (answer, &fresh));
                        held_again += 1;
                    }
                    None => {
                        (*reads, *slots) = (fresh_reads, fresh);
                        looked_anew += 1;
                    }
                }
            }
        }
        assert!(
            tail_hits > 50 && overdrafts > 5 && overdrawn_releases > 0 && model.evicted > 200,
            "{tail_hits} hits at the back, {overdrafts} overdrafts, {overdrawn_releases} \
             releases while overdrawn, {} evictions",
            model.evicted
        );
        assert!(
            held_again > 10_000 && looked_anew > 1_000 && names_checked > 10_000,
            "{held_again} kept lookups held, {looked_anew} looked up anew, {names_checked} \
             suffixes named"
        );
    }

    use crate::serving::tests::{Fifo, request};
    use crate::serving::{
        Admission, AdmitHook, Batching, KvConfig, QueuePolicy, QueuedRequest, Replica,
        ReplicaConfig,
    };
    use crate::time::{SimDuration, SimTime};
    use std::collections::BTreeMap;

    /// Output length and prompt segments by request id, and how many of them other requests
    /// may share where that is not all of them.
    #[derive(Default)]
    struct Prompts(
        BTreeMap<u64, (u32, Vec<PrefixSegment>)>,
        BTreeMap<u64, SharedSegments>,
    );
    impl AdmitHook for Prompts {
        fn output_tokens(&mut self, r: &QueuedRequest) -> u32 {
            self.0[&r.id].0
        }
        fn admitted(&mut self, _: SimTime, _: &QueuedRequest, _: u32) {}
        fn prefix(
            &mut self,
            r: &QueuedRequest,
            segments: &mut Vec<PrefixSegment>,
        ) -> SharedSegments {
            segments.extend_from_slice(&self.0[&r.id].1);
            self.1
                .get(&r.id)
                .copied()
                .unwrap_or(SharedSegments::all(segments.len()))
        }
    }

    /// A replica of `blocks` blocks of 16 tokens, no token budget, caching prefixes or not.
    struct Bench {
        replica: Replica,
        policy: Fifo,
        hook: Prompts,
        now: SimTime,
    }

    impl Bench {
        fn new(blocks: u64, caching: bool) -> Bench {
            Bench::with(
                ReplicaConfig {
                    max_num_seqs: 8,
                    max_num_batched_tokens: None,
                    chunked_prefill: false,
                    kv: KvConfig {
                        block_size: 16,
                        blocks,
                        watermark_blocks: 0,
                    },
                    admission: Admission::PromptOnly,
                    batching: Batching::Continuous,
                },
                caching,
            )
        }

        fn with(config: ReplicaConfig, caching: bool) -> Bench {
            let replica = Replica::new(config);
            let mut policy = Fifo::default();
            policy.reset(1);
            Bench {
                replica: if caching {
                    replica.with_prefix_caching()
                } else {
                    replica
                },
                policy,
                hook: Prompts::default(),
                now: SimTime::ZERO,
            }
        }

        /// Queues request `id`: `prompt` tokens beginning with `segments`, `output` tokens.
        fn submit(&mut self, id: u64, prompt: u32, output: u32, segments: &[PrefixSegment]) {
            self.hook.0.insert(id, (output, segments.to_vec()));
            let request = request(id, prompt, self.now);
            self.replica.submit(self.now, request, &mut self.policy, 0);
        }

        /// Runs one step: its (prefill tokens, the rows and the prefill square the cost model
        /// prices), or `None` when idle.
        fn step(&mut self) -> Option<(u64, u64, f64)> {
            let work = self
                .replica
                .schedule(self.now, &mut self.policy, 0, &mut self.hook)?;
            let priced = work.dense_tokens();
            let step = (work.prefill_tokens, priced.rows, priced.prefill_square);
            self.replica.begin_step(SimDuration(10));
            self.now += SimDuration(10);
            self.replica.complete_step(self.now, &mut Vec::new());
            Some(step)
        }

        /// Runs steps until the replica idles; returns them.
        fn drain(&mut self) -> Vec<(u64, u64, f64)> {
            std::iter::from_fn(|| self.step()).collect()
        }
    }

    /// A 100-token shared prefix (a system prompt): 6 full blocks of 16 (96 tokens).
    const SYSTEM: [PrefixSegment; 1] = [PrefixSegment {
        stream: 7,
        tokens: 100,
    }];

    #[test]
    fn a_resident_prefix_is_not_prefilled_again_and_the_priced_prefill_shrinks() {
        let mut bench = Bench::new(1000, true);
        bench.submit(1, 120, 2, &SYSTEM);
        // Prefill 120 (emits 1), a decode: done.
        assert_eq!(bench.drain(), [(120, 120, 14_400.0), (0, 1, 0.0)]);
        bench.submit(2, 120, 1, &SYSTEM);
        // 96 tokens found cached: 24 prefilled, priced as 24 rows of a 24-token causal prefill.
        assert_eq!(bench.drain(), [(24, 24, 576.0)]);
        let stats = bench.replica.stats();
        assert_eq!(stats.prefix_hit_tokens, 96);
        assert_eq!(stats.prefix_lookup_tokens, 240);
        assert_eq!(stats.prefill_tokens, 144);

        // A prompt cached whole still computes its last token (vLLM recomputes it).
        let mut bench = Bench::new(1000, true);
        let exact = [PrefixSegment {
            stream: 7,
            tokens: 32,
        }];
        bench.submit(1, 32, 1, &exact);
        bench.drain();
        bench.submit(2, 32, 1, &exact);
        // Blocks 0-1 are cached, but only block 0 is used: 16 tokens prefilled.
        assert_eq!(bench.drain(), [(16, 16, 256.0)]);
    }

    #[test]
    fn a_prefix_shared_with_a_running_sequence_takes_its_blocks_once() {
        let mut bench = Bench::new(1000, true);
        bench.submit(1, 120, 50, &SYSTEM);
        bench.step();
        // Request 1 holds 8 blocks (120 tokens); request 2 shares its 6 cached ones and takes
        // 2 of its own.
        bench.submit(2, 120, 50, &SYSTEM);
        assert_eq!(bench.step(), Some((24, 25, 576.0)));
        assert_eq!(bench.replica.kv().used(), 10);
        bench.drain();
        // Both gone: nothing in use, the 6 shared blocks resident.
        assert_eq!(bench.replica.kv().used(), 0);
        let cache = bench.replica.kv().prefix_cache().unwrap();
        assert_eq!(cache.resident(), 6);
    }

    #[test]
    fn an_evicted_prefix_is_prefilled_in_full() {
        // 10 blocks: request 1 leaves 6 cached blocks and 4 plain free ones (freed before them);
        // request 3's 150 tokens need all 10, evicting the 6.
        let mut bench = Bench::new(10, true);
        bench.submit(1, 120, 1, &SYSTEM);
        bench.drain();
        let other = [PrefixSegment {
            stream: 9,
            tokens: 150,
        }];
        bench.submit(3, 150, 1, &other);
        bench.drain();
        assert_eq!(bench.replica.kv().prefix_cache().unwrap().evicted(), 6);
        bench.submit(2, 120, 1, &SYSTEM);
        assert_eq!(bench.drain(), [(120, 120, 14_400.0)]);
        assert_eq!(bench.replica.stats().prefix_hit_tokens, 0);
    }

    #[test]
    fn caching_with_no_shared_prefix_schedules_as_no_caching() {
        // Distinct streams: every prompt is its own. The schedule, step by step, is the one of
        // a replica without a cache (under KV pressure: 40 blocks for 12 requests).
        let run = |caching: bool| {
            let mut bench = Bench::new(40, caching);
            for id in 0..12 {
                let own = [PrefixSegment {
                    stream: 100 + id,
                    tokens: 60 + 7 * id as u32,
                }];
                bench.submit(id, 60 + 7 * id as u32, 3 + id as u32, &own);
            }
            let steps = bench.drain();
            (steps, bench.replica.kv().peak())
        };
        let (cached, peak) = run(true);
        assert_eq!(cached, run(false).0);
        assert!(
            cached.len() > 12 && peak >= 40,
            "{} steps, peak {peak}",
            cached.len()
        );
    }

    /// Workflows of one to four stages, each stage's prompt its role's system prompt (one of
    /// three), the workflow's user message and its history (the earlier stages' outputs), a
    /// stage submitted when the one before it finishes, as Chimera's are; a stage shares all
    /// three segments with later requests when a later stage has its role, else the system
    /// prompt alone, and with requests in flight beside it the system prompt alone. Returns
    /// every step's work, blocks in use and finished requests, and the statistics, with the
    /// stages' own blocks registered when computed (`later` false: every segment declared
    /// shared with later requests) or put off as `SeqPrefix::deferred` does (true), and the
    /// admissions that cannot fit found by a lookup (`beside` false: every segment declared
    /// shared beside) or by `Replica::fewest_blocks` where it can (true); the blocks evicted
    /// and the lookups made.
    fn staged_workflows(
        seed: u64,
        blocks: u64,
        preemption: crate::serving::Preemption,
        later: bool,
        beside: bool,
    ) -> (Vec<String>, u64, (u64, u64)) {
        use rand::RngExt;
        let mut rng = crate::rng::stream(seed, "prefix-deferred");
        let config = ReplicaConfig {
            max_num_seqs: 6,
            max_num_batched_tokens: Some(96),
            chunked_prefill: true,
            kv: KvConfig {
                block_size: 16,
                blocks,
                watermark_blocks: 0,
            },
            admission: Admission::Paged { preemption },
            batching: Batching::Continuous,
        };
        let mut bench = Bench::with(config, true);
        // Per workflow: roles, user tokens, outputs per stage, own tail per stage.
        type Workflow = (Vec<u64>, u32, Vec<u32>, Vec<u32>);
        let workflows: Vec<Workflow> = (0..40)
            .map(|_| {
                let n = rng.random_range(1..=4usize);
                let roles = (0..n).map(|_| rng.random_range(0..3u64)).collect();
                let user = rng.random_range(10..60u32);
                let outputs = (0..n).map(|_| rng.random_range(3..60u32)).collect();
                let tails = (0..n).map(|_| rng.random_range(0..20u32)).collect();
                (roles, user, outputs, tails)
            })
            .collect();
        let mut next_id = 0u64;
        // Request id -> (workflow, stage).
        let mut stage_of = BTreeMap::new();
        let submit = |bench: &mut Bench, w: usize, stage: usize, next_id: &mut u64| {
            let (roles, user, outputs, tails) = &workflows[w];
            let history: u32 = outputs[..stage].iter().sum();
            let segments = [
                seg(1000 + roles[stage], 40),
                seg(2 * w as u64, *user),
                seg(2 * w as u64 + 1, history),
            ];
            let prompt = 40 + user + history + tails[stage];
            let id = *next_id;
            *next_id += 1;
            let recurs = roles[stage + 1..].contains(&roles[stage]);
            let shared = SharedSegments {
                later: if later && !recurs { 1 } else { 3 },
                beside: if beside { 1 } else { 3 },
            };
            bench.hook.1.insert(id, shared);
            bench.submit(id, prompt, outputs[stage], &segments);
            (id, (w, stage))
        };
        for w in 0..workflows.len() {
            let (id, at) = submit(&mut bench, w, 0, &mut next_id);
            stage_of.insert(id, at);
        }
        let mut seen = Vec::new();
        let mut finished = Vec::new();
        while let Some(work) =
            bench
                .replica
                .schedule(bench.now, &mut bench.policy, 0, &mut bench.hook)
        {
            let priced = work.dense_tokens();
            let line = format!(
                "{} {} {} {:?}",
                work.prefill_tokens, priced.rows, priced.prefill_square, bench.now
            );
            bench.replica.begin_step(SimDuration(10));
            bench.now += SimDuration(10);
            finished.clear();
            bench.replica.complete_step(bench.now, &mut finished);
            let done: Vec<u64> = finished.iter().map(|s| s.request.id).collect();
            seen.push(format!("{line} {} {done:?}", bench.replica.kv().used()));
            for id in done {
                let (w, stage) = stage_of[&id];
                if stage + 1 < workflows[w].0.len() {
                    let (id, at) = submit(&mut bench, w, stage + 1, &mut next_id);
                    stage_of.insert(id, at);
                }
            }
        }
        let stats = bench.replica.stats();
        seen.push(format!(
            "{} {} {} {} {} {} {} {}",
            stats.completed,
            stats.prefill_tokens,
            stats.prefix_hit_tokens,
            stats.prefix_rehit_tokens,
            stats.prefix_lookup_tokens,
            stats.recomputed_tokens,
            stats.preempted_recompute,
            stats.preempted_swap
        ));
        assert_eq!(stats.completed, next_id, "every stage ran");
        let evicted = bench.replica.kv().prefix_cache().unwrap().evicted();
        let lookups = (bench.replica.lookups(), bench.replica.lookups_kept());
        (seen, evicted, lookups)
    }

    #[test]
    fn putting_off_a_stage_s_own_blocks_changes_no_step() {
        use crate::serving::Preemption;
        let (mut put_off, mut rehit, mut preempted) = (0, 0, 0);
        for seed in 1..=6 {
            // From a cache that preempts often to one that keeps an earlier stage's blocks for
            // the later stage of its role.
            for blocks in [32, 48, 96] {
                for preemption in [Preemption::Recompute, Preemption::Swap] {
                    let (eager, eager_evicted, _) =
                        staged_workflows(seed, blocks, preemption, false, false);
                    let (deferred, deferred_evicted, _) =
                        staged_workflows(seed, blocks, preemption, true, false);
                    assert_eq!(
                        eager, deferred,
                        "seed {seed}, {blocks} blocks, {preemption:?}"
                    );
                    // The stats line: hits happened (a preempted sequence's own, too).
                    let stats: Vec<u64> = eager
                        .last()
                        .unwrap()
                        .split(' ')
                        .map(|n| n.parse().unwrap())
                        .collect();
                    assert!(stats[2] > 0, "{stats:?}");
                    rehit += stats[3];
                    preempted += stats[6] + stats[7];
                    // The blocks put off never entered the cache, so fewer were evicted.
                    assert!(deferred_evicted <= eager_evicted);
                    put_off += eager_evicted - deferred_evicted;
                }
            }
        }
        assert!(
            put_off > 0 && rehit > 0 && preempted > 0,
            "{put_off} {rehit} {preempted}"
        );
    }

    #[test]
    fn an_admission_that_cannot_fit_is_refused_without_a_lookup_as_with_one() {
        use crate::serving::Preemption;
        let (mut spared, mut made, mut kept) = (0, 0, 0);
        for seed in 1..=6 {
            for blocks in [32, 48, 96] {
                for preemption in [Preemption::Recompute, Preemption::Swap] {
                    // Lookups counted with those kept hits answered: the tries that asked.
                    let (looked, _, (made_anew, made_kept)) =
                        staged_workflows(seed, blocks, preemption, true, false);
                    let (bounded, _, (fewer_anew, held)) =
                        staged_workflows(seed, blocks, preemption, true, true);
                    assert_eq!(
                        looked, bounded,
                        "seed {seed}, {blocks} blocks, {preemption:?}"
                    );
                    let (lookups, fewer) = (made_anew + made_kept, fewer_anew + held);
                    assert!(fewer <= lookups);
                    spared += lookups - fewer;
                    made += lookups;
                    kept += held;
                }
            }
        }
        // The claim spares lookups: admissions the bound alone refused. Failed tries' hits
        // answered some later tries (each checked against a fresh lookup in a debug build).
        assert!(spared > 0, "{spared} of {made}");
        assert!(kept > 0, "{kept} lookups answered by kept hits");
    }
}
