//! The checks of a request before any memory type is looked at: its
//! `VkMemoryRequirements` (a non-zero size, a power-of-two alignment), its
//! `min_alignment`, and a dedicated target where the driver requires
//! dedicated memory, of the resource's kind; and those of an
//! [`AllocationDesc`] alone, which the create-and-bind helpers make before
//! they create the resource. None makes a Vulkan call. Apart from the walk
//! over memory types because aliasing, defragmentation and the `ash`
//! helpers make them too.

use ash::vk;

use crate::allocator::{AllocationDesc, Request};
use crate::device::DedicatedTarget;
use crate::memory::ResourceKind;
use crate::Error;

/// What every request's `VkMemoryRequirements` must be: a non-zero size
/// ([`Error::ZeroSize`]) and a power-of-two alignment
/// ([`Error::AlignmentNotPowerOfTwo`]), as Vulkan's always are.
#[inline]
pub(crate) fn check_requirements(requirements: &vk::MemoryRequirements) -> Result<(), Error> {
    if requirements.size == 0 {
        return Err(Error::ZeroSize);
    }
    if !requirements.alignment.is_power_of_two() {
        return Err(Error::AlignmentNotPowerOfTwo(requirements.alignment));
    }
    Ok(())
}

/// The checks of every request before any memory type is looked at:
/// [`check_requirements`], a power-of-two (or 0) `min_alignment`
/// ([`Error::AlignmentNotPowerOfTwo`]), then
/// [`Error::MissingDedicatedTarget`] when the driver requires dedicated
/// memory and the request names no resource, and
/// [`Error::DedicatedTargetMismatch`] when the resource it names is not of
/// its kind, or its requirements' size changed since the resource was
/// named (the size dedicated memory takes, which must be the resource's).
#[inline]
pub(super) fn check_request(request: &Request<'_>) -> Result<(), Error> {
    check_requirements(&request.requirements)?;
    check_min_alignment(request.desc.min_alignment)?;
    match (request.dedicated_target, request.kind) {
        (None, _) if request.driver_dedicated.required => Err(Error::MissingDedicatedTarget),
        (
            Some(DedicatedTarget::Buffer(_)),
            ResourceKind::LinearImage | ResourceKind::OptimalImage,
        )
        | (Some(DedicatedTarget::Image(_)), ResourceKind::Buffer) => {
            Err(Error::DedicatedTargetMismatch)
        }
        (Some(_), _) if request.target_size != request.requirements.size => {
            Err(Error::DedicatedTargetMismatch)
        }
        _ => Ok(()),
    }
}

/// [`Error::AlignmentNotPowerOfTwo`] for a `min_alignment` that is
/// neither 0 nor a power of two (an allocation's, or an upload ring's
/// chunks').
#[inline]
pub(in crate::allocator) fn check_min_alignment(min_alignment: u64) -> Result<(), Error> {
    if min_alignment & min_alignment.wrapping_sub(1) != 0 {
        return Err(Error::AlignmentNotPowerOfTwo(min_alignment));
    }
    Ok(())
}

/// The checks of [`Allocator::allocate`](crate::Allocator::allocate) that
/// look at `desc` alone, in its order: [`Error::ForeignPool`] for a pool
/// of another allocator than `allocator`, then a `min_alignment` that is
/// no power of two. The create-and-bind helpers make them before they
/// create the resource, so that a request refused for them creates
/// nothing, and `allocate` makes them again. Its only checks before them
/// are of the requirements (a zero size, an alignment no power of two),
/// which a resource's requirements from the driver always pass, so the
/// error is the one `allocate` would give.
pub(crate) fn check_desc(allocator: u32, desc: &AllocationDesc<'_>) -> Result<(), Error> {
    if desc.pool.is_some_and(|pool| pool.allocator != allocator) {
        return Err(Error::ForeignPool);
    }
    check_min_alignment(desc.min_alignment)
}
