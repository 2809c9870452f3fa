//! `AllocationDesc::existing_memory_only`: buffers made with it bind into
//! the block an ordinary buffer made, and are refused with a typed error
//! when no memory exists or the blocks are full, without a memory object
//! made or a validation message.

use vk_suballoc::{AllocationDesc, Error, Usage};

use super::super::allocator_setup::{allocator_for, buffer_info};
use crate::support::{test_each_profile, VulkanContext};

use super::{buffer, MIB};

test_each_profile!(
    /// Buffers made with `existing_memory_only` bind into the block an
    /// ordinary buffer made, and fail with `NoRoomInExistingMemory` (the
    /// helper destroying the buffer it made) when nothing exists or the
    /// blocks are full: no memory object made, no validation message.
    fn existing_memory_only_binds_into_existing_blocks(profile) {
        let context = VulkanContext::new(profile);
        let allocator = allocator_for(&context);
        let only = AllocationDesc::new(Usage::DEVICE_LOCAL).existing_memory_only();
        let objects = || allocator.stats().memory_types.iter().map(|t| t.blocks + t.dedicated_allocations).sum::<u64>();
        // SAFETY: a valid create info.
        let refused = unsafe { allocator.create_buffer(&buffer_info(MIB), &only) };
        assert_eq!(refused.unwrap_err(), Error::NoRoomInExistingMemory, "{profile}");
        assert_eq!(objects(), 0, "{profile}");
        let (first, first_memory) = buffer(&allocator, MIB, AllocationDesc::new(Usage::DEVICE_LOCAL));
        let mut live = Vec::new();
        let error = loop {
            // SAFETY: a valid create info.
            match unsafe { allocator.create_buffer(&buffer_info(MIB), &only) } {
                Ok((handle, memory)) => {
                    assert_eq!(memory.memory(), first_memory.memory(), "{profile}");
                    live.push((handle, memory));
                }
                Err(error) => break error,
            }
        };
        assert_eq!(error, Error::NoRoomInExistingMemory, "{profile}");
        assert!(!live.is_empty(), "{profile}: the first block took nothing more");
        assert_eq!(objects(), 1, "{profile}");
        // SAFETY: the buffers were never used by the GPU.
        unsafe {
            allocator.destroy_buffer(first, first_memory).unwrap();
            for (handle, memory) in live {
                allocator.destroy_buffer(handle, memory).unwrap();
            }
        }
    }
);
