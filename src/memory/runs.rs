//! Runs: small buffers in equal slots, many to one offset-allocator range.
//!
//! A run is one range of a block, taken from the block's
//! [`OffsetAllocator`](crate::offset::OffsetAllocator) like any allocation,
//! and cut into up to 64 slots of one size class. A small buffer request
//! takes the lowest free slot of a run of its class: a bit mask and
//! `trailing_zeros`, instead of a search of the block's bins, a node and the
//! neighbours' merge on free. Small buffers are most of an engine's
//! allocations by count (uniform, staging and per-draw buffers) and few of
//! its bytes, which is what makes the trade below a good one.
//!
//! - **Size classes** are quarter octaves, `k * 2^e` for `k` in 4..=7, from
//!   16 bytes up. A request takes the smallest class at least its placed size
//!   (its size rounded up to its alignment), which wastes under a quarter of
//!   it, about a tenth on average. Buffers aligned to more than 4 KiB, whose
//!   placed sizes are not rounded that far, take ranges of their own.
//! - **Alignment**: the placed size is a multiple of the alignment, and so is
//!   the class it rounds up to (the classes between `a` and `4a` include `a`,
//!   `2a` and `3a`; from `4a` on, every class is a multiple of `a`). A run
//!   starts at a multiple of the largest power of two dividing its slot size,
//!   so every slot offset is a multiple of every alignment its class serves,
//!   including `nonCoherentAtomSize`, which the caller folds into the
//!   alignment.
//! - **Size of a run**: up to 64 slots and at most [`RUN_BYTES`], so a run
//!   that holds a single live buffer holds at most 64 KiB.
//! - **Stale and double frees**: each slot has a generation, bumped when it
//!   is freed; a handle whose generation does not match is refused, as the
//!   offset allocator refuses stale ids.
//! - **Names** of named slots are kept in a map beside the runs, so a named
//!   small buffer takes a slot too and dumps and leak lines show its name.
//! - **Lifetime**: a run whose slots are all free goes back to its block at
//!   once, so blocks empty out and are released as without runs. Runs are
//!   carved from existing blocks only: a request that finds no room for a
//!   run takes a range of its own (in a gap too small for a run, or in a new
//!   block), so a run never makes a block itself.
//! - **Small blocks**: a run takes at most a sixteenth of its block
//!   ([`run_fits_block`]). A run holds all its bytes for the buffers of one
//!   class, so in a block not much larger (a custom pool's fixed 64 KiB
//!   blocks, say) one small buffer's run filled the block, and the next
//!   request of another size took a new block where without runs both fit
//!   in one.

use std::collections::HashMap;

use super::mapping::MappedPtr;
use super::slab::{Slab, SlabKey};
use crate::offset::AllocationId;
use ash::vk;

/// The most bytes one run takes from its block.
pub(crate) const RUN_BYTES: u64 = 64 << 10;

/// The largest slot size served by runs, whatever
/// [`Config::small_buffer_limit`](crate::Config::small_buffer_limit) says:
/// a larger class's run would hold one slot (runs hold at most
/// [`RUN_BYTES`]), a range that shares nothing and is aligned to its slot
/// size's largest power of two, up to 64 KiB.
pub(crate) const MAX_RUN_SLOT: u64 = RUN_BYTES / 2;

/// Slots of a run: the bits of its free mask.
const MAX_SLOTS: u32 = 64;

/// The smallest slot size: `4 << MIN_EXPONENT`.
const MIN_EXPONENT: u32 = 2;

/// Size classes up to [`RUN_BYTES`]: four per octave from 16 bytes.
pub(crate) const CLASSES: usize =
    (4 * (RUN_BYTES.trailing_zeros() - 2 - MIN_EXPONENT) + 1) as usize;

/// The size class of a request that takes `placed` bytes (`1..=RUN_BYTES`):
/// the smallest `k * 2^e`, `k` in 4..=7, at least `placed`.
#[inline]
pub(crate) fn class_of(placed: u64) -> usize {
    let placed = placed.max(4 << MIN_EXPONENT);
    // `placed` lies in [4 * 2^e, 8 * 2^e).
    let e = 63 - placed.leading_zeros() - 2;
    // ceil(placed / 2^e), in 4..=8; 8 is the next octave's k = 4, which the
    // index arithmetic below gives without a branch.
    let k = (placed + (1 << e) - 1) >> e;
    (4 * (e - MIN_EXPONENT) as usize) + (k as usize - 4)
}

/// The slot size of size class `class`.
#[inline]
pub(crate) fn class_size(class: usize) -> u64 {
    let k = 4 + (class % 4) as u64;
    let e = MIN_EXPONENT + (class / 4) as u32;
    k << e
}

/// The slots of a run of `slot_size`-byte slots.
pub(crate) fn slots_per_run(slot_size: u64) -> u32 {
    (RUN_BYTES / slot_size).clamp(1, u64::from(MAX_SLOTS)) as u32
}

/// Blocks are at least this many times a run's bytes to hold the run.
const MIN_RUNS_PER_BLOCK: u64 = 16;

/// Whether a block of `block_size` bytes may hold a run of `run_bytes`:
/// the run takes at most a sixteenth of it (module docs, small blocks).
#[inline]
pub(crate) fn run_fits_block(run_bytes: u64, block_size: u64) -> bool {
    run_bytes.saturating_mul(MIN_RUNS_PER_BLOCK) <= block_size
}

/// One range of a block cut into equal slots.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Run {
    // Fields in this order (`repr(C)`): what every take and free reads comes
    // first, so that with the slab entry's generation before it, it lies in
    // one cache line; the slot generations follow. In the compiler's order a
    // free touched three lines of its run, in this one two (callgrind's
    // cache simulation at a million live allocations: 29% fewer first-level
    // data misses in free; wall time within the 2-core VM's noise).
    /// Bit `i` set: slot `i` is free.
    free: u64,
    class: u8,
    slots: u8,
    /// Set when a defragmentation plan empties the run's block: the run
    /// hands out no more slots, and a free does not list it again.
    retired: bool,
    /// Where the run is in its class's list of runs with a free slot;
    /// [`Run::UNLISTED`] while it is full.
    listed_at: u32,
    pub(crate) slot_size: u64,
    /// Offset of slot 0 in the block.
    pub(crate) offset: u64,
    /// The block's memory and the mapping of slot 0, cached so that taking
    /// a slot does not visit the block.
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) mapped: Option<MappedPtr>,
    /// The block and its offset-allocator range the run occupies.
    pub(crate) block: SlabKey,
    pub(crate) range: AllocationId,
    /// Each slot's generation, bumped when the slot is freed.
    generations: [u32; MAX_SLOTS as usize],
}

impl Run {
    const UNLISTED: u32 = u32::MAX;

    fn all_free(slots: u8) -> u64 {
        u64::MAX >> (64 - u32::from(slots))
    }

    /// Each slot, whether it is live and its offset in the block, in
    /// address order.
    pub(crate) fn slots(&self) -> impl Iterator<Item = (u32, bool, u64)> + '_ {
        (0..u32::from(self.slots)).map(|slot| {
            let live = self.free & (1 << slot) == 0;
            (slot, live, self.slot_offset(slot))
        })
    }

    /// Where `slot` starts in the run's block.
    pub(crate) fn slot_offset(&self, slot: u32) -> u64 {
        self.offset + u64::from(slot) * self.slot_size
    }

    /// The generation of `slot`: a live slot's handle carries it.
    pub(crate) fn generation(&self, slot: u32) -> u32 {
        self.generations[slot as usize]
    }

    /// How many of its slots are live.
    pub(crate) fn live_slots(&self) -> u32 {
        u32::from(self.slots) - self.free.count_ones()
    }

    /// The bytes of its free slots.
    pub(crate) fn free_slot_bytes(&self) -> u64 {
        u64::from(self.free.count_ones()) * self.slot_size
    }

    /// Whether `slot` is live with `generation`.
    fn is_live(&self, slot: u32, generation: u32) -> bool {
        slot < u32::from(self.slots)
            && self.free & (1 << slot) == 0
            && self.generations[slot as usize] == generation
    }
}

/// A slot handed out: the run, the slot and its generation (the handle),
/// and where it lies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TakenSlot {
    pub(crate) run: SlabKey,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) mapped: Option<MappedPtr>,
}

/// The runs of one memory type.
#[derive(Debug)]
pub(crate) struct Runs {
    runs: Slab<Run>,
    /// Per size class, the runs with a free slot. The last one is used
    /// first: the run a free just gave room to.
    with_room: [Vec<SlabKey>; CLASSES],
    /// Names of named slots, by run and slot, for leak reports and dumps.
    names: HashMap<(SlabKey, u32), Box<str>>,
}

impl Default for Runs {
    fn default() -> Self {
        Self {
            runs: Slab::new(),
            with_room: std::array::from_fn(|_| Vec::new()),
            names: HashMap::new(),
        }
    }
}

impl Runs {
    /// Takes a free slot of a run of `class`, if one has room.
    #[inline]
    pub(crate) fn take(&mut self, class: usize) -> Option<TakenSlot> {
        let key = *self.with_room[class].last()?;
        let run = self.runs.get_mut(key)?;
        let slot = run.free.trailing_zeros();
        run.free &= run.free - 1;
        if run.free == 0 {
            run.listed_at = Run::UNLISTED;
            self.with_room[class].pop();
        }
        Some(Self::taken(key, run, slot))
    }

    /// The run of `class` with a free slot in the block `rank` puts first
    /// (lowest; `u32::MAX` is a block to avoid), and that rank: a search of
    /// the class's runs, for defragmentation only. Of runs in one block,
    /// the one a free gave room to last.
    pub(crate) fn best_with_room(
        &self,
        class: usize,
        rank: impl Fn(SlabKey) -> u32,
    ) -> Option<(u32, SlabKey)> {
        self.with_room[class]
            .iter()
            .rev()
            .filter_map(|&key| Some((rank(self.runs.get(key)?.block), key)))
            .filter(|&(rank, _)| rank != u32::MAX)
            .min_by_key(|&(rank, _)| rank)
    }

    /// Takes a free slot of run `key`, listed with room (from
    /// [`best_with_room`](Self::best_with_room)).
    pub(crate) fn take_in(&mut self, key: SlabKey) -> Option<TakenSlot> {
        let run = self.runs.get_mut(key)?;
        if run.free == 0 || run.listed_at == Run::UNLISTED {
            return None;
        }
        let slot = run.free.trailing_zeros();
        run.free &= run.free - 1;
        if run.free == 0 {
            self.unlist(key);
        }
        Some(Self::taken(key, self.runs.get(key)?, slot))
    }

    /// The handle and place of free slot `slot` of run `key`, just taken.
    #[inline(always)]
    fn taken(key: SlabKey, run: &Run, slot: u32) -> TakenSlot {
        let within = u64::from(slot) * run.slot_size;
        TakenSlot {
            run: key,
            slot,
            generation: run.generations[slot as usize],
            memory: run.memory,
            offset: run.offset + within,
            mapped: run.mapped.map(|base| base.add(within)),
        }
    }

    /// Retires every run in `block`: none hands out another slot, so the
    /// block can empty as their slots are freed.
    pub(crate) fn retire_in_block(&mut self, block: SlabKey) {
        let keys: Vec<SlabKey> = self
            .runs
            .iter()
            .filter(|(_, run)| run.block == block && !run.retired)
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.unlist(key);
            if let Some(run) = self.runs.get_mut(key) {
                run.retired = true;
            }
        }
    }

    /// Reopens the retired runs of `block` (its defragmentation was given
    /// up): those with a free slot are listed again.
    pub(crate) fn reopen_in_block(&mut self, block: SlabKey) {
        for (key, run) in self.runs.iter_mut() {
            if run.block != block || !run.retired {
                continue;
            }
            run.retired = false;
            if run.free != 0 {
                let class = usize::from(run.class);
                run.listed_at = self.with_room[class].len() as u32;
                self.with_room[class].push(key);
            }
        }
    }

    /// Adds a new run with every slot free; `mapped` is its slot 0's mapping.
    pub(crate) fn insert(
        &mut self,
        class: usize,
        block: SlabKey,
        range: AllocationId,
        offset: u64,
        memory: vk::DeviceMemory,
        mapped: Option<MappedPtr>,
    ) {
        let slot_size = class_size(class);
        let slots = slots_per_run(slot_size) as u8;
        let listed_at = self.with_room[class].len() as u32;
        let key = self.runs.insert(Run {
            block,
            range,
            offset,
            memory,
            mapped,
            slot_size,
            class: class as u8,
            slots,
            free: Run::all_free(slots),
            retired: false,
            listed_at,
            generations: [0; MAX_SLOTS as usize],
        });
        self.with_room[class].push(key);
    }

    /// Frees `slot` of `run` if it is live with `generation`. Returns
    /// `Err(())` for a stale or double free (nothing changes then), and the
    /// run itself, removed, when this was its last live slot: its range goes
    /// back to the block.
    #[inline]
    pub(crate) fn free(
        &mut self,
        key: SlabKey,
        slot: u32,
        generation: u32,
    ) -> Result<Option<Run>, ()> {
        let run = self.runs.get_mut(key).ok_or(())?;
        if !run.is_live(slot, generation) {
            return Err(());
        }
        // Most slots are unnamed: skip hashing then.
        if !self.names.is_empty() {
            self.names.remove(&(key, slot));
        }
        let was_full = run.free == 0;
        run.free |= 1 << slot;
        run.generations[slot as usize] = generation.wrapping_add(1);
        if run.free == Run::all_free(run.slots) {
            self.unlist(key);
            return Ok(self.runs.remove(key));
        }
        if was_full && !run.retired {
            let class = usize::from(run.class);
            run.listed_at = self.with_room[class].len() as u32;
            self.with_room[class].push(key);
        }
        Ok(None)
    }

    /// Takes `key` out of its class's list of runs with room.
    fn unlist(&mut self, key: SlabKey) {
        let Some(run) = self.runs.get_mut(key) else {
            return;
        };
        let at = std::mem::replace(&mut run.listed_at, Run::UNLISTED);
        if at == Run::UNLISTED {
            return;
        }
        let list = &mut self.with_room[usize::from(run.class)];
        list.swap_remove(at as usize);
        if let Some(&moved) = list.get(at as usize) {
            if let Some(moved) = self.runs.get_mut(moved) {
                moved.listed_at = at;
            }
        }
    }

    /// The run of a live slot: `None` when `run`, `slot` and `generation`
    /// name nothing live.
    pub(crate) fn live(&self, key: SlabKey, slot: u32, generation: u32) -> Option<&Run> {
        self.runs
            .get(key)
            .filter(|run| run.is_live(slot, generation))
    }

    /// Names the slot just taken.
    pub(crate) fn set_name(&mut self, taken: &TakenSlot, name: &str) {
        self.names.insert((taken.run, taken.slot), name.into());
    }

    /// Names live slot `slot` of run `key` anew; `None` drops its name.
    pub(crate) fn rename(&mut self, key: SlabKey, slot: u32, name: Option<&str>) {
        match name {
            Some(name) => {
                self.names.insert((key, slot), name.into());
            }
            None => {
                self.names.remove(&(key, slot));
            }
        }
    }

    /// The name of live slot `slot` of run `key`, if it has one.
    pub(crate) fn name(&self, key: SlabKey, slot: u32) -> Option<&str> {
        self.names.get(&(key, slot)).map(|name| &**name)
    }

    /// Every run, with its key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlabKey, &Run)> + '_ {
        self.runs.iter()
    }

    /// Forgets every run (their blocks are being released).
    pub(crate) fn clear(&mut self) {
        self.runs.drain().for_each(drop);
        self.with_room.iter_mut().for_each(Vec::clear);
        self.names.clear();
    }
}

#[cfg(test)]
mod tests;

/// The randomised tests' seeded generator (`VK_SUBALLOC_SEED`).
#[cfg(test)]
#[path = "../../tests/common/seeded_rng.rs"]
mod seeded_rng;

#[cfg(test)]
mod model_tests;
