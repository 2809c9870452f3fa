//! [`Block`]: one `VkDeviceMemory` shared by many allocations, and
//! [`DedicatedMemory`]: one `VkDeviceMemory` for a single resource.

use std::collections::HashMap;

use ash::vk;

use super::mapping::MappedPtr;
use crate::memory::usage::ResourceKind;
use crate::offset::OffsetAllocator;

/// A `VkDeviceMemory` governed by an [`OffsetAllocator`].
#[derive(Debug)]
pub(crate) struct Block<M> {
    pub(crate) memory: M,
    pub(crate) raw: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) ranges: OffsetAllocator,
    /// Base pointer of the persistent mapping of host-visible blocks.
    pub(crate) mapped: Option<MappedPtr>,
    /// Granularity class: 0 linear resources, 1 optimal images.
    pub(crate) class: usize,
    /// Names of named allocations, by offset-allocator slot: kept only for
    /// allocations that have one, for leak reports and dumps.
    pub(crate) names: HashMap<u32, Box<str>>,
    /// The resource kind of each allocation, for memory dumps (optimal
    /// images and buffers share blocks).
    pub(crate) kinds: SlotKinds,
    /// The `n` of its debug name `vk-suballoc block <type>/<n>`.
    pub(crate) serial: u32,
    /// The smallest request known not to fit; forgotten by a free that
    /// leaves a free range at least that large.
    pub(crate) miss: Miss,
    /// Set while a defragmentation plan empties it: it takes no other
    /// plan's moves until it is empty.
    pub(crate) retiring: bool,
    /// The frame in which it was made or last emptied: how long an empty
    /// block has been kept (`Config::empty_block_frames`).
    pub(crate) emptied_in_frame: u64,
}

/// The resource kind of each allocation of a block, by offset-allocator
/// slot: two bits a slot, 32 slots a word. A freed slot keeps a stale kind
/// until reused.
///
/// Blocks that only ever held buffers skip the stores: the table stays
/// empty until the first other kind, and a slot past its end reads as a
/// buffer. Two bits a slot rather than a byte: the table is written at
/// random slots, and a quarter of the size stays in cache better
/// (callgrind on lavapipe's `mixed` trace: 9 % fewer D1 write misses in
/// the replay for 1 % more instructions; wall time within the noise). The
/// whole table costs 2–3 ns per allocation there: the random slot.
#[derive(Debug, Default)]
pub(crate) struct SlotKinds {
    words: Vec<u64>,
}

impl SlotKinds {
    /// Records that the allocation in `slot` is a `kind` resource.
    #[inline]
    pub(crate) fn record(&mut self, slot: u32, kind: ResourceKind) {
        if kind == ResourceKind::Buffer && self.words.is_empty() {
            return;
        }
        let (word, shift) = Self::position(slot);
        let code = match kind {
            ResourceKind::Buffer => 0,
            ResourceKind::LinearImage => 1,
            ResourceKind::OptimalImage => 2,
            ResourceKind::Unknown => 3,
        };
        let bits = match self.words.get_mut(word) {
            Some(bits) => bits,
            None => self.grow_to(word),
        };
        *bits = (*bits & !(3 << shift)) | (code << shift);
    }

    /// The table grown to hold word `word`, and that word: once per 32
    /// slot indices (`Vec` doubling keeps it amortised). Out of line, so
    /// that the common store indexes the table once, with one bounds check.
    #[cold]
    #[inline(never)]
    fn grow_to(&mut self, word: usize) -> &mut u64 {
        self.words.resize(word + 1, 0);
        &mut self.words[word]
    }

    /// The kind of the live allocation in `slot`.
    pub(crate) fn get(&self, slot: u32) -> ResourceKind {
        let (word, shift) = Self::position(slot);
        match self.words.get(word).map_or(0, |bits| (bits >> shift) & 3) {
            1 => ResourceKind::LinearImage,
            2 => ResourceKind::OptimalImage,
            3 => ResourceKind::Unknown,
            _ => ResourceKind::Buffer,
        }
    }

    /// Forgets every kind: the block holds only buffers again.
    pub(crate) fn clear(&mut self) {
        self.words.clear();
    }

    /// Where `slot`'s two bits lie: word and shift.
    #[inline]
    fn position(slot: u32) -> (usize, u32) {
        (slot as usize / 32, (slot % 32) * 2)
    }
}

/// A `VkDeviceMemory` that holds exactly one allocation.
#[derive(Debug)]
pub(crate) struct DedicatedMemory<M> {
    pub(crate) memory: M,
    pub(crate) raw: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) mapped: Option<MappedPtr>,
    pub(crate) name: Option<Box<str>>,
    /// The `n` of its debug name `vk-suballoc dedicated <type>/<n>` (in a
    /// custom pool, `vk-suballoc pool "<pool>" dedicated <type>/<n>` or
    /// `vk-suballoc custom pool dedicated <type>/<n>`), which it has while
    /// the allocation has no name of its own.
    pub(crate) serial: u32,
    /// The kind of resource the memory was allocated for.
    pub(crate) kind: ResourceKind,
    /// Whether it was allocated for one resource
    /// (`VkMemoryDedicatedAllocateInfo`): no other may be bound to it.
    pub(crate) targeted: bool,
}

/// The smallest request known not to fit a block: a request at least this
/// large and at least this aligned cannot fit either, until something in the
/// block is freed.
///
/// Sound because the offset allocator's failures are exact (it never reports
/// a false "out of space"), and a placement of `size' >= size` bytes at an
/// `align' >= align` (powers of two) boundary would contain a placement of
/// the smaller request. First fit over blocks then skips full blocks in O(1)
/// instead of searching their bins again on every request. A free keeps the
/// miss unless it leaves a free range at least as large
/// ([`Miss::after_free`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Miss {
    size: u64,
    align: u64,
}

impl Miss {
    /// Nothing known: never skips (no request has this size and alignment).
    pub(crate) const NONE: Self = Self {
        size: u64::MAX,
        align: u64::MAX,
    };

    #[inline]
    pub(crate) fn rules_out(self, size: u64, align: u64) -> bool {
        size >= self.size && align >= self.align
    }

    /// Updates the miss after a free that left a free range of `merged`
    /// bytes (the freed range with its free neighbours). Every other free
    /// range is as it was, so the miss still holds when `merged` is smaller
    /// than its size: no placement of at least that many bytes fits in it.
    /// Else it is forgotten.
    #[inline]
    pub(crate) fn after_free(&mut self, merged: u64) {
        if merged >= self.size {
            *self = Self::NONE;
        }
    }

    /// Keeps the more useful of the two known misses (the smaller size).
    #[inline]
    pub(crate) fn record(&mut self, size: u64, align: u64) {
        if size < self.size || (size == self.size && align < self.align) {
            *self = Self { size, align };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Miss, SlotKinds};
    use crate::memory::usage::ResourceKind;

    const MIB: u64 = 1 << 20;

    /// A free that leaves a free range smaller than the miss cannot make
    /// room for it: the miss stays. One that leaves a range at least that
    /// large forgets it.
    #[test]
    fn a_miss_outlives_frees_that_leave_smaller_ranges() {
        let mut miss = Miss::NONE;
        miss.record(2 * MIB, 256);
        miss.after_free(MIB);
        assert!(miss.rules_out(2 * MIB, 256));
        assert!(miss.rules_out(3 * MIB, 4096));
        assert!(!miss.rules_out(MIB, 256));
        miss.after_free(2 * MIB);
        assert_eq!(miss, Miss::NONE);
        assert!(!miss.rules_out(2 * MIB, 256));
    }

    /// Of two misses, the one with the smaller size is kept, and of two the
    /// same size, the one with the smaller alignment: it rules out more.
    #[test]
    fn the_smaller_miss_is_kept() {
        let known = |size, align| Miss { size, align };
        let mut miss = Miss::NONE;
        miss.record(2 * MIB, 256);
        assert_eq!(miss, known(2 * MIB, 256));
        // Smaller size, larger alignment: kept.
        miss.record(MIB, 4096);
        assert_eq!(miss, known(MIB, 4096));
        // Same size, smaller alignment: kept.
        miss.record(MIB, 256);
        assert_eq!(miss, known(MIB, 256));
        // Same size, larger alignment: ignored.
        miss.record(MIB, 1024);
        assert_eq!(miss, known(MIB, 256));
        // Larger size, even with a smaller alignment: ignored.
        miss.record(4 * MIB, 16);
        assert_eq!(miss, known(MIB, 256));
        assert!(miss.rules_out(MIB, 256));
        assert!(!miss.rules_out(4 * MIB, 16));
    }

    /// Each slot reads back the kind last recorded for it, across word
    /// boundaries; buffers alone store nothing, and unrecorded slots read
    /// as buffers.
    #[test]
    fn slot_kinds_read_back_what_was_recorded() {
        let kinds = [
            ResourceKind::Buffer,
            ResourceKind::LinearImage,
            ResourceKind::OptimalImage,
            ResourceKind::Unknown,
        ];
        let mut table = SlotKinds::default();
        for slot in 0..100 {
            table.record(slot, ResourceKind::Buffer);
        }
        assert!(table.words.is_empty());
        let kind_of = |slot: u32, round: u32| kinds[((slot * 7 + round) % 4) as usize];
        for round in 0..4 {
            for slot in (0..100).rev() {
                table.record(slot, kind_of(slot, round));
            }
            for slot in 0..100 {
                assert_eq!(table.get(slot), kind_of(slot, round), "slot {slot}");
            }
        }
        // 100 slots in four words.
        assert_eq!(table.words.len(), 4);
        assert_eq!(table.get(10_000), ResourceKind::Buffer);
        assert_eq!(table.get(2), ResourceKind::LinearImage);
        table.clear();
        assert_eq!(table.get(2), ResourceKind::Buffer);
    }
}
