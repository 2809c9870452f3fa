//! Read-only views of a [`TypePool`] for statistics, dumps and handle
//! checks.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Location, PoolPolicy, TypePool};
use crate::memory::block::Block;
use crate::memory::runs::Run;
use crate::memory::slab::SlabKey;
use crate::memory::ResourceKind;
use crate::offset::AllocationId;

impl<M> TypePool<M> {
    /// The memory object, its size and mapping behind `location`.
    pub(crate) fn memory_at(&self, location: Location) -> Option<(&M, u64)> {
        match location {
            Location::Dedicated(key) => self.dedicated.get(key).map(|d| (&d.memory, d.size)),
            _ => {
                let (block, _, _) = self.held_in_block(location)?;
                Some((&block.memory, block.size))
            }
        }
    }

    /// The block the live allocation at `location` lies in, where it
    /// starts there and the bytes it holds (its offset allocator's range,
    /// or its run's slot); `None` for dedicated memory and anything not
    /// live.
    pub(crate) fn held_in_block(&self, location: Location) -> Option<(&Block<M>, u64, u64)> {
        match location {
            Location::Block { block, range } => {
                let block = self.blocks.get(block)?;
                let held = block.ranges.get(range)?;
                Some((block, held.offset, held.size))
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                let run = self.runs.live(run, slot, generation)?;
                let block = self.blocks.get(run.block)?;
                Some((block, run.slot_offset(slot), run.slot_size))
            }
            Location::Dedicated(_) => None,
        }
    }

    /// The name of the live allocation at `location`, if it has one.
    pub(crate) fn name_at(&self, location: Location) -> Option<&str> {
        match location {
            Location::Dedicated(key) => self.dedicated.get(key)?.name.as_deref(),
            Location::Block { block, range } => self
                .blocks
                .get(block)?
                .names
                .get(&range.slot())
                .map(|name| &**name),
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                self.runs.live(run, slot, generation)?;
                self.runs.name(run, slot)
            }
        }
    }

    /// The kind of resource the live allocation at `location` was made
    /// for, and whether its memory is dedicated to that one resource
    /// (`VkMemoryDedicatedAllocateInfo`); `None` when nothing is live there.
    pub(crate) fn kind_at(&self, location: Location) -> Option<(ResourceKind, bool)> {
        match location {
            Location::Dedicated(key) => {
                let dedicated = self.dedicated.get(key)?;
                Some((dedicated.kind, dedicated.targeted))
            }
            Location::Block { block, range } => {
                let block = self.blocks.get(block)?;
                block.ranges.get(range)?;
                Some((block.kinds.get(range.slot()), false))
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                self.runs.live(run, slot, generation)?;
                Some((ResourceKind::Buffer, false))
            }
        }
    }

    /// A custom pool's name; `None` for a default pool or an unnamed one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// What the pool fixes about its blocks ([`PoolPolicy::DEFAULT`] for a
    /// default pool).
    pub(crate) fn policy(&self) -> PoolPolicy {
        self.policy
    }

    /// Whether `location` names a live allocation.
    pub(crate) fn is_live(&self, location: Location) -> bool {
        self.memory_at(location).is_some()
    }

    /// Blocks with their keys, for reports.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (SlabKey, &Block<M>)> + '_ {
        self.blocks.iter()
    }

    /// The runs of each block with their keys, by the block's key and the
    /// run's range, for reports.
    pub(crate) fn runs_by_range(&self) -> HashMap<(SlabKey, AllocationId), (SlabKey, &Run)> {
        self.runs
            .iter()
            .map(|(key, run)| ((run.block, run.range), (key, run)))
            .collect()
    }

    /// The name of slot `slot` of run `run`, if it has one.
    pub(crate) fn slot_name(&self, run: SlabKey, slot: u32) -> Option<&str> {
        self.runs.name(run, slot)
    }

    /// Every memory object of the pool, its blocks then its dedicated
    /// memory: the object, its size, and its debug name
    /// (`VK_EXT_debug_utils`) as the device has it now (the one it was made
    /// with, or for dedicated memory renamed since, its new one). For the
    /// replay of the memory that exists to a memory callback
    /// (`Allocator::set_memory_callback`).
    pub(crate) fn memory_objects(&self) -> impl Iterator<Item = (&M, u64, Cow<'_, str>)> + '_ {
        let blocks = self.blocks.iter().map(|(_, block)| {
            let name = self.memory_debug_name("block", block.serial);
            (&block.memory, block.size, Cow::Owned(name))
        });
        let dedicated = self.dedicated.iter().map(|(_, dedicated)| {
            let name = self.dedicated_debug_name(dedicated.serial, dedicated.name.as_deref());
            (&dedicated.memory, dedicated.size, name)
        });
        blocks.chain(dedicated)
    }
}
