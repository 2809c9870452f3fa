//! Binds into dedicated memory, checked as a driver that requires dedicated
//! allocations relies on them.
//!
//! A `VkMemoryDedicatedAllocateInfo` in `vkAllocateMemory`'s chain names the
//! one buffer or image the memory is made for: it is "the sole buffer or
//! image resource that the memory can be bound to", at offset 0
//! (VUID-vkBindBufferMemory-memory-01508, VUID-vkBindImageMemory-memory-01509).
//! A driver that reports `requiresDedicatedAllocation` for a resource needs
//! it bound to memory dedicated to it (VUID-vkBindBufferMemory-buffer-01444,
//! VUID-vkBindImageMemory-image-01445): it may lay the resource out, or
//! place the memory, knowing which resource it is for. Lavapipe never
//! requires dedicated memory and accepts every such bind, and the
//! validation layer the tests run under (1.3.239) checks the second rule
//! only against the requirements lavapipe reports (never
//! `requiresDedicatedAllocation`), and the first only when memory was made
//! with a `VkMemoryDedicatedAllocateInfo` (a bind of another resource
//! there, or at a non-zero offset, is reported as 01508 or 01509). So an
//! allocator that left `VkMemoryDedicatedAllocateInfo` out where a driver
//! requires it would pass every test.
//!
//! So the layer records, with each allocation (`memory_accounting.rs`), the
//! resource its memory is dedicated to, and checks every
//! `vkBindBufferMemory`, `vkBindImageMemory` and `vkBind{Buffer,Image}Memory2`
//! (and KHR) against it: memory dedicated to another resource, or bound at a
//! non-zero offset, is refused, and with the `dedicated=require` option
//! (which makes every requirements query report
//! `requiresDedicatedAllocation`) so is any bind into memory not dedicated
//! to the resource. A refused call returns `VK_ERROR_VALIDATION_FAILED_EXT`
//! ("invalid usage was detected by the implementation or a validation
//! layer") without reaching the driver, and says why on standard error
//! (unless the configuration has `refusals=quiet`). The
//! error is one no driver returns for a bind and not an out-of-memory
//! error, which an allocator may answer by retrying elsewhere, hiding the
//! refusal.
//!
//! Not modelled: `dedicatedAllocationImageAliasing`
//! (`VK_NV_dedicated_allocation_image_aliasing`, which lets a compatible
//! image take memory dedicated to another; the tests never enable it), and
//! a resource handle reused after the resource the memory was dedicated to
//! was destroyed (the new resource is taken for the old one).

use std::io::Write;

use ash::vk;
use ash::vk::Handle;

use crate::c_interop::pnext_chain;
use crate::call_failures::{chosen_failure, ResourceCall};
use crate::config::DedicatedOverride;
use crate::dispatch_registry::{device_state, DeviceState};
use crate::ffi_guard::guard;

/// A buffer or an image: what memory is dedicated to, or what a bind binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// A `VkBuffer`.
    Buffer(vk::Buffer),
    /// A `VkImage`.
    Image(vk::Image),
}

impl Resource {
    /// `buffer 0x…` or `image 0x…`, for messages.
    fn describe(self) -> String {
        match self {
            Self::Buffer(buffer) => format!("buffer {:#x}", buffer.as_raw()),
            Self::Image(image) => format!("image {:#x}", image.as_raw()),
        }
    }
}

/// The resource a `VkMemoryDedicatedAllocateInfo` in `info`'s chain names;
/// `None` without one, or with one that names neither a buffer nor an image
/// (which dedicates the memory to nothing). One that names both is invalid
/// (VUID-VkMemoryDedicatedAllocateInfo-image-01432, which the validation
/// layer reports): the image is taken.
///
/// # Safety
/// `info`'s chain is null or made of valid input structures, each starting
/// with `sType` and `pNext`.
pub unsafe fn dedicated_target(info: &vk::MemoryAllocateInfo<'_>) -> Option<Resource> {
    // SAFETY: a chain of valid structures (contract).
    let (_, found) = unsafe { pnext_chain(info.p_next) }
        .find(|&(s_type, _)| s_type == vk::StructureType::MEMORY_DEDICATED_ALLOCATE_INFO)?;
    // SAFETY: the sType says what the structure is.
    let dedicated = unsafe { &*found.cast::<vk::MemoryDedicatedAllocateInfo<'_>>() };
    if dedicated.image != vk::Image::null() {
        Some(Resource::Image(dedicated.image))
    } else if dedicated.buffer != vk::Buffer::null() {
        Some(Resource::Buffer(dedicated.buffer))
    } else {
        None
    }
}

/// Why the layer refuses a bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindRefusal {
    /// The memory is dedicated to another resource.
    DedicatedToAnother(Resource),
    /// The memory is dedicated to the resource, which is bound at this
    /// offset instead of 0.
    NonZeroOffset(u64),
    /// The driver requires dedicated memory for the resource
    /// (`dedicated=require`) and the memory is not dedicated to anything.
    NotDedicated,
}

impl BindRefusal {
    /// The rule broken, as `vkBind*Memory` (`two` false) or
    /// `VkBind*MemoryInfo` (`two` true) names it for `resource`.
    fn rule(self, resource: Resource, two: bool) -> String {
        let (command, number) = match (self, resource, two) {
            (Self::DedicatedToAnother(target), _, _)
                if std::mem::discriminant(&target) != std::mem::discriminant(&resource) =>
            {
                // No VUID of the bind names this case: the allocate info's
                // own description says the memory takes only its resource.
                return "VkMemoryDedicatedAllocateInfo: the sole resource the memory can be bound to"
                    .to_owned();
            }
            (Self::NotDedicated, Resource::Buffer(_), false) => {
                ("vkBindBufferMemory", "buffer-01444")
            }
            (Self::NotDedicated, Resource::Buffer(_), true) => {
                ("VkBindBufferMemoryInfo", "buffer-01444")
            }
            (Self::NotDedicated, Resource::Image(_), false) => ("vkBindImageMemory", "image-01445"),
            (Self::NotDedicated, Resource::Image(_), true) => {
                ("VkBindImageMemoryInfo", "image-01445")
            }
            (_, Resource::Buffer(_), false) => ("vkBindBufferMemory", "memory-01508"),
            (_, Resource::Buffer(_), true) => ("VkBindBufferMemoryInfo", "memory-01508"),
            (_, Resource::Image(_), false) => ("vkBindImageMemory", "memory-01509"),
            (_, Resource::Image(_), true) => ("VkBindImageMemoryInfo", "memory-01509"),
        };
        format!("VUID-{command}-{number}")
    }

    /// What is wrong, in words.
    fn explain(self) -> String {
        match self {
            Self::DedicatedToAnother(target) => {
                format!("the memory is dedicated to {}", target.describe())
            }
            Self::NonZeroOffset(offset) => {
                format!("the memory is dedicated to it, but it is bound at offset {offset}, not 0")
            }
            Self::NotDedicated => {
                "the driver requires dedicated memory for it (dedicated=require), \
                 and the memory is not dedicated to it"
                    .to_owned()
            }
        }
    }
}

/// Checks a bind of `resource` at `offset` into memory dedicated to
/// `dedicated_to` (`None`: to nothing), where the driver requires dedicated
/// memory for every resource if `required`.
///
/// # Errors
/// The [`BindRefusal`] for a bind that breaks a rule.
pub fn check_bind(
    dedicated_to: Option<Resource>,
    resource: Resource,
    offset: u64,
    required: bool,
) -> Result<(), BindRefusal> {
    match dedicated_to {
        Some(target) if target != resource => Err(BindRefusal::DedicatedToAnother(target)),
        Some(_) if offset != 0 => Err(BindRefusal::NonZeroOffset(offset)),
        Some(_) => Ok(()),
        None if required => Err(BindRefusal::NotDedicated),
        None => Ok(()),
    }
}

/// The result of a refused bind.
pub const REFUSED: vk::Result = vk::Result::ERROR_VALIDATION_FAILED_EXT;

/// Checks a bind of `resource` into `memory` at `offset` on a faked device;
/// on a refusal, says why on standard error (unless `refusals=quiet`) and
/// returns [`REFUSED`]. Memory
/// the layer has no record of (a swapchain image's null memory) passes.
fn admit(
    state: &DeviceState,
    entry_point: &str,
    two: bool,
    resource: Resource,
    memory: vk::DeviceMemory,
    offset: u64,
) -> Result<(), vk::Result> {
    let Some(fake) = &state.fake else {
        return Ok(());
    };
    let Some(record) = fake.book.get(memory) else {
        return Ok(());
    };
    let required = fake.config.dedicated == Some(DedicatedOverride::Require);
    check_bind(record.dedicated_to, resource, offset, required).map_err(|refusal| {
        if fake.config.quiet_refusals {
            return REFUSED;
        }
        // Best effort: a failed write to stderr must not panic.
        let _ = writeln!(
            std::io::stderr(),
            "vk-fake-memory-layer: {entry_point} refused ({REFUSED:?}): {} into memory {:#x}: {} ({})",
            resource.describe(),
            memory.as_raw(),
            refusal.explain(),
            refusal.rule(resource, two),
        );
        REFUSED
    })
}

/// [`admit`] for each bind of a `vkBind*Memory2` call, as (resource,
/// memory, offset): the first refusal refuses the whole call.
fn admit_all(
    state: &DeviceState,
    entry_point: &str,
    mut binds: impl Iterator<Item = (Resource, vk::DeviceMemory, u64)>,
) -> Result<(), vk::Result> {
    binds.try_for_each(|(resource, memory, offset)| {
        admit(state, entry_point, true, resource, memory, offset)
    })
}

/// The caller's `count` structures at `infos` as a slice (empty for null).
///
/// # Safety
/// `infos` is null or points to `count` valid structures.
unsafe fn infos<'a, T>(infos: *const T, count: u32) -> &'a [T] {
    if infos.is_null() || count == 0 {
        return &[];
    }
    // SAFETY: the contract.
    unsafe { std::slice::from_raw_parts(infos, count as usize) }
}

/// `vkBindBufferMemory`: refuses a bind that breaks the dedicated-memory
/// rules, fails one the configuration chose (`call_failures.rs`), else
/// binds.
pub(crate) unsafe extern "system" fn bind_buffer_memory(
    device: vk::Device,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    offset: vk::DeviceSize,
) -> vk::Result {
    const NAME: &str = "vkBindBufferMemory";
    guard(NAME, vk::Result::ERROR_OUT_OF_HOST_MEMORY, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        let failure = chosen_failure(&state, ResourceCall::BindBuffer);
        if let Err(refused) = admit(
            &state,
            NAME,
            false,
            Resource::Buffer(buffer),
            memory,
            offset,
        ) {
            return refused;
        }
        if let Some(result) = failure {
            return result;
        }
        let Some(next) = state.next.bind_buffer_memory else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, buffer, memory, offset) }
    })
}

/// `vkBindImageMemory`: as [`bind_buffer_memory`].
pub(crate) unsafe extern "system" fn bind_image_memory(
    device: vk::Device,
    image: vk::Image,
    memory: vk::DeviceMemory,
    offset: vk::DeviceSize,
) -> vk::Result {
    const NAME: &str = "vkBindImageMemory";
    guard(NAME, vk::Result::ERROR_OUT_OF_HOST_MEMORY, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        let failure = chosen_failure(&state, ResourceCall::BindImage);
        if let Err(refused) = admit(&state, NAME, false, Resource::Image(image), memory, offset) {
            return refused;
        }
        if let Some(result) = failure {
            return result;
        }
        let Some(next) = state.next.bind_image_memory else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, image, memory, offset) }
    })
}

/// `vkBindBufferMemory2[KHR]`: refuses the whole call, binding nothing, if
/// one of its binds breaks the dedicated-memory rules, fails it if the
/// configuration chose it (`call_failures.rs`; one buffer bind, however
/// many binds it holds), else binds.
pub(crate) unsafe extern "system" fn bind_buffer_memory2(
    device: vk::Device,
    count: u32,
    bind_infos: *const vk::BindBufferMemoryInfo<'_>,
) -> vk::Result {
    const NAME: &str = "vkBindBufferMemory2";
    guard(NAME, vk::Result::ERROR_OUT_OF_HOST_MEMORY, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: the caller's `count` valid bind infos.
        let binds = unsafe { infos(bind_infos, count) }.iter().map(|info| {
            (
                Resource::Buffer(info.buffer),
                info.memory,
                info.memory_offset,
            )
        });
        let failure = chosen_failure(&state, ResourceCall::BindBuffer);
        if let Err(refused) = admit_all(&state, NAME, binds) {
            return refused;
        }
        if let Some(result) = failure {
            return result;
        }
        let Some(next) = state.next.bind_buffer_memory2 else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, count, bind_infos) }
    })
}

/// `vkBindImageMemory2[KHR]`: as [`bind_buffer_memory2`].
pub(crate) unsafe extern "system" fn bind_image_memory2(
    device: vk::Device,
    count: u32,
    bind_infos: *const vk::BindImageMemoryInfo<'_>,
) -> vk::Result {
    const NAME: &str = "vkBindImageMemory2";
    guard(NAME, vk::Result::ERROR_OUT_OF_HOST_MEMORY, || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: the caller's `count` valid bind infos.
        let binds = unsafe { infos(bind_infos, count) }
            .iter()
            .map(|info| (Resource::Image(info.image), info.memory, info.memory_offset));
        let failure = chosen_failure(&state, ResourceCall::BindImage);
        if let Err(refused) = admit_all(&state, NAME, binds) {
            return refused;
        }
        if let Some(result) = failure {
            return result;
        }
        let Some(next) = state.next.bind_image_memory2 else {
            return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        };
        // SAFETY: forwarding the caller's arguments.
        unsafe { next(device, count, bind_infos) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(raw: u64) -> Resource {
        Resource::Buffer(vk::Buffer::from_raw(raw))
    }

    fn image(raw: u64) -> Resource {
        Resource::Image(vk::Image::from_raw(raw))
    }

    /// Memory dedicated to a resource takes that resource at offset 0 and
    /// nothing else, whether or not the driver requires dedicated memory;
    /// memory dedicated to nothing takes anything unless it does.
    #[test]
    fn dedicated_memory_takes_only_its_resource_at_offset_zero() {
        let (one_buffer, other_buffer) = (buffer(0x10), buffer(0x20));
        let (one_image, other_image) = (image(0x10), image(0x30));
        for required in [false, true] {
            for resource in [one_buffer, one_image] {
                assert_eq!(check_bind(Some(resource), resource, 0, required), Ok(()));
                assert_eq!(
                    check_bind(Some(resource), resource, 256, required),
                    Err(BindRefusal::NonZeroOffset(256))
                );
            }
            for (target, resource) in [
                (one_buffer, other_buffer),
                (one_image, other_image),
                // Same raw handle, other kind: still another resource.
                (one_buffer, one_image),
                (one_image, one_buffer),
            ] {
                assert_eq!(
                    check_bind(Some(target), resource, 0, required),
                    Err(BindRefusal::DedicatedToAnother(target)),
                    "{target:?} {resource:?}"
                );
            }
            for resource in [one_buffer, one_image] {
                let want = if required {
                    Err(BindRefusal::NotDedicated)
                } else {
                    Ok(())
                };
                assert_eq!(check_bind(None, resource, 512, required), want);
            }
        }
    }

    /// The messages name the rule as the command that was refused does.
    #[test]
    fn refusals_name_their_rule() {
        let another = BindRefusal::DedicatedToAnother(buffer(0x20));
        assert_eq!(
            another.rule(buffer(0x10), false),
            "VUID-vkBindBufferMemory-memory-01508"
        );
        assert_eq!(
            BindRefusal::NonZeroOffset(64).rule(image(1), true),
            "VUID-VkBindImageMemoryInfo-memory-01509"
        );
        assert_eq!(
            BindRefusal::NotDedicated.rule(buffer(1), true),
            "VUID-VkBindBufferMemoryInfo-buffer-01444"
        );
        assert_eq!(
            BindRefusal::NotDedicated.rule(image(1), false),
            "VUID-vkBindImageMemory-image-01445"
        );
        assert!(another.rule(image(0x20), false).contains("sole resource"));
        assert!(another.explain().contains("buffer 0x20"));
    }

    /// The target is read from wherever the dedicated info sits in the
    /// chain; one naming nothing dedicates the memory to nothing.
    #[test]
    fn dedicated_target_is_read_from_the_chain() {
        let image = vk::Image::from_raw(7);
        let buffer = vk::Buffer::from_raw(9);
        let mut flags = vk::MemoryAllocateFlagsInfo::default();
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let info = vk::MemoryAllocateInfo::default()
            .push_next(&mut flags)
            .push_next(&mut dedicated);
        // SAFETY: a chain of valid structures on the stack.
        let target = unsafe { dedicated_target(&info) };
        assert_eq!(target, Some(Resource::Image(image)));
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut flags = vk::MemoryAllocateFlagsInfo::default();
        let info = vk::MemoryAllocateInfo::default()
            .push_next(&mut dedicated)
            .push_next(&mut flags);
        // SAFETY: as above.
        let target = unsafe { dedicated_target(&info) };
        assert_eq!(target, Some(Resource::Buffer(buffer)));
        let mut nothing = vk::MemoryDedicatedAllocateInfo::default();
        let info = vk::MemoryAllocateInfo::default().push_next(&mut nothing);
        // SAFETY: as above.
        let target = unsafe { dedicated_target(&info) };
        assert_eq!(target, None);
        // SAFETY: no chain.
        let target = unsafe { dedicated_target(&vk::MemoryAllocateInfo::default()) };
        assert_eq!(target, None);
    }
}
