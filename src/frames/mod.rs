//! Frames in flight: frees and per-frame memory that wait for the GPU.
//!
//! The GPU runs a frame or two behind the CPU. Memory the CPU is done with
//! may still be read by submitted work, so it must not be reused until the
//! fence (or timeline semaphore value) of every frame that may read it has
//! signalled. No other Vulkan allocator tracks this; engines build it
//! themselves. Here it is part of the allocator:
//!
//! - [`Allocator::free_after_frame`](crate::Allocator::free_after_frame) and
//!   the `destroy_*_after_frame` helpers queue a free in the current frame
//!   ([`DeferredQueue`]);
//! - [`Allocator::end_frame`](crate::Allocator::end_frame) seals the frame
//!   with the fence its submission signals;
//! - [`Allocator::collect`](crate::Allocator::collect) releases, without
//!   waiting for the GPU, the frames whose fence has signalled, oldest first, up to
//!   the first that has not;
//! - upload rings ([`UploadRingDesc`]) give O(1) per-frame transient memory,
//!   reclaimed by the same fences.
//!
//! Where it sits among the layers: [`DeferredQueue`] is pure (keyed on a
//! `u64` frame index, generic over what it holds) and so is the ring's
//! bump allocator (`offset::LinearAllocator`); the entries the allocator
//! queues and the rings' chunks hold [`Allocation`]s,
//! the facade's handles, so this module is part of the facade's layer,
//! beside `allocator`, not below it: `offset`, `device` and `memory`
//! import nothing from either.

mod deferred_queue;
pub(crate) mod upload_ring;

pub use deferred_queue::DeferredQueue;
pub use upload_ring::{RingAllocation, UploadRing, UploadRingDesc};

use ash::vk;

use crate::Allocation;
use upload_ring::RetiredChunk;

/// A free waiting for its frame.
#[derive(Debug)]
pub(crate) enum Deferred {
    /// Free the allocation.
    Free(Allocation),
    /// Destroy the buffer, then free its allocation.
    Buffer(vk::Buffer, Allocation),
    /// Destroy the image, then free its allocation.
    Image(vk::Image, Allocation),
    /// Destroy a buffer bound to another allocation's memory (an alias).
    AliasBuffer(vk::Buffer),
    /// Destroy an image bound to another allocation's memory (an alias).
    AliasImage(vk::Image),
    /// Destroy a destroyed upload ring's chunk (its buffer, then its
    /// allocation) once no write copies into it. Boxed: it is rare, and
    /// the other items stay as small as they were.
    RingChunk(Box<RetiredChunk>),
}

impl Deferred {
    /// The allocation it frees, if any.
    pub(crate) fn allocation(&self) -> Option<&Allocation> {
        match self {
            Self::Free(allocation) | Self::Buffer(_, allocation) | Self::Image(_, allocation) => {
                Some(allocation)
            }
            Self::RingChunk(chunk) => Some(&chunk.allocation),
            Self::AliasBuffer(_) | Self::AliasImage(_) => None,
        }
    }
}

/// What a call to [`Allocator::collect`](crate::Allocator::collect) (or
/// `wait_and_collect`, or `collect_idle`) released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Frames whose signal had completed; for
    /// [`collect_idle`](crate::Allocator::collect_idle), every sealed frame
    /// and the current one.
    pub frames: usize,
    /// Frees (and resource destructions) carried out.
    pub frees: usize,
}
