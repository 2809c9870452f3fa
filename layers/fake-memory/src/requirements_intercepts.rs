//! Memory requirements queries (`vkGet*MemoryRequirements*`): the driver's
//! answer rewritten into the fake profile's terms, its memory type bits
//! mapped onto fake type indices, its alignment and buffer sizes raised to the
//! profile's, and (with `dedicated=`) its `VkMemoryDedicatedRequirements` set.
//! An image's bits depend on whether it was created as a transient
//! attachment and whether it is linear, its alignment on its size, tiling
//! and whether its format is depth/stencil (`image_kinds.rs`).

use ash::vk;

use crate::c_interop::pnext_chain;
use crate::config::DedicatedOverride;
use crate::dispatch_registry::{device_state, DeviceState};
use crate::ffi_guard::guard;
use crate::image_kinds::is_depth_stencil;
use crate::memory_type_map::ResourceKind;

/// Rewrites requirements the driver just returned, if the device is faked.
///
/// # Safety
/// `requirements` is null or valid for writes.
unsafe fn patch(state: &DeviceState, requirements: *mut vk::MemoryRequirements, class: Class) {
    if let (Some(fake), false) = (&state.fake, requirements.is_null()) {
        let (kind, depth_stencil) = class;
        // SAFETY: non-null and valid by the contract.
        fake.physical.type_map.patch_requirements(
            unsafe { &mut *requirements },
            kind,
            depth_stencil,
        );
    }
}

/// A resource's kind and whether it is an image of a depth/stencil format.
type Class = (ResourceKind, bool);

/// Runs a requirements query on the next layer, then [`patch`]es its result.
///
/// # Safety
/// `device` is live; `query` calls the next layer with the caller's valid
/// arguments and returns where the requirements were written (or null) and
/// the kind of resource they are for.
unsafe fn requirements_query(
    entry_point: &str,
    device: vk::Device,
    query: impl FnOnce(&DeviceState) -> (*mut vk::MemoryRequirements, Class),
) {
    guard(entry_point, (), || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return;
        };
        let (written, kind) = query(&state);
        // SAFETY: `written` is null or the caller's output structure.
        unsafe { patch(&state, written, kind) };
    });
}

/// The kind of `image`, a live image of `state`'s device: transient if it was
/// created with `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`, linear if with
/// `VK_IMAGE_TILING_LINEAR`; and whether its format is depth/stencil.
fn image_kind(state: &DeviceState, image: vk::Image) -> Class {
    state
        .fake
        .as_ref()
        .map_or(PLAIN_IMAGE, |fake| fake.image_kinds.class(image))
}

/// A buffer's class.
const BUFFER: Class = (ResourceKind::Buffer, false);

/// The class of an optimal colour image (or of one the layer cannot see).
const PLAIN_IMAGE: Class = (ResourceKind::Image, false);

/// Null requirements: nothing to patch.
const NOTHING: (*mut vk::MemoryRequirements, Class) = (std::ptr::null_mut(), BUFFER);

/// `vkGetBufferMemoryRequirements`, in fake terms.
pub(crate) unsafe extern "system" fn get_buffer_memory_requirements(
    device: vk::Device,
    buffer: vk::Buffer,
    requirements: *mut vk::MemoryRequirements,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged.
    unsafe {
        requirements_query("vkGetBufferMemoryRequirements", device, |state| {
            let Some(next) = state.next.get_buffer_memory_requirements else {
                return NOTHING;
            };
            next(device, buffer, requirements);
            (requirements, BUFFER)
        });
    }
}

/// `vkGetImageMemoryRequirements`, in fake terms.
pub(crate) unsafe extern "system" fn get_image_memory_requirements(
    device: vk::Device,
    image: vk::Image,
    requirements: *mut vk::MemoryRequirements,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged.
    unsafe {
        requirements_query("vkGetImageMemoryRequirements", device, |state| {
            let Some(next) = state.next.get_image_memory_requirements else {
                return NOTHING;
            };
            next(device, image, requirements);
            (requirements, image_kind(state, image))
        });
    }
}

/// The `VkMemoryRequirements` inside a `VkMemoryRequirements2`; null for null.
///
/// # Safety
/// `requirements` is null or points at a `VkMemoryRequirements2`.
unsafe fn inner(requirements: *mut vk::MemoryRequirements2<'_>) -> *mut vk::MemoryRequirements {
    if requirements.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a field of the structure `requirements` points at; no reference
    // is created.
    unsafe { std::ptr::addr_of_mut!((*requirements).memory_requirements) }
}

/// Applies the `dedicated=` option to the `VkMemoryDedicatedRequirements`
/// in `requirements`' output chain, if the caller chained one.
///
/// # Safety
/// `requirements` is null or points at a valid `VkMemoryRequirements2`
/// whose chain the driver just filled.
unsafe fn override_dedicated(state: &DeviceState, requirements: *mut vk::MemoryRequirements2<'_>) {
    let Some(choice) = state.fake.as_ref().and_then(|fake| fake.config.dedicated) else {
        return;
    };
    // SAFETY: the contract.
    unsafe { apply_dedicated(choice, requirements) };
}

/// Makes every `VkMemoryDedicatedRequirements` in `requirements`' output
/// chain prefer dedicated memory and, for `require`, require it; a driver
/// that requires it already keeps requiring it under `prefer`.
///
/// # Safety
/// As [`override_dedicated`].
unsafe fn apply_dedicated(
    choice: DedicatedOverride,
    requirements: *mut vk::MemoryRequirements2<'_>,
) {
    if requirements.is_null() {
        return;
    }
    // SAFETY: a valid structure (contract); its chain is made of valid
    // output structures, each starting with sType and pNext.
    let chain = unsafe { pnext_chain((*requirements).p_next.cast_const()) };
    for (s_type, structure) in chain {
        if s_type == vk::StructureType::MEMORY_DEDICATED_REQUIREMENTS {
            let dedicated = structure
                .cast_mut()
                .cast::<vk::MemoryDedicatedRequirements<'_>>();
            // SAFETY: the sType says what the structure is, an output
            // structure the caller lets the driver (and layers) write.
            // Raised, never lowered: what the driver requires stays
            // required under `prefer`.
            unsafe {
                (*dedicated).prefers_dedicated_allocation = vk::TRUE;
                if choice == DedicatedOverride::Require {
                    (*dedicated).requires_dedicated_allocation = vk::TRUE;
                }
            }
        }
    }
}

/// `vkGetBufferMemoryRequirements2[KHR]`, in fake terms.
pub(crate) unsafe extern "system" fn get_buffer_memory_requirements2(
    device: vk::Device,
    info: *const vk::BufferMemoryRequirementsInfo2<'_>,
    requirements: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged.
    unsafe {
        requirements_query("vkGetBufferMemoryRequirements2", device, |state| {
            let Some(next) = state.next.get_buffer_memory_requirements2 else {
                return NOTHING;
            };
            next(device, info, requirements);
            override_dedicated(state, requirements);
            (inner(requirements), BUFFER)
        });
    }
}

/// `vkGetImageMemoryRequirements2[KHR]`, in fake terms.
pub(crate) unsafe extern "system" fn get_image_memory_requirements2(
    device: vk::Device,
    info: *const vk::ImageMemoryRequirementsInfo2<'_>,
    requirements: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged; `info`
    // (and the create info it points at) is read only when non-null.
    unsafe {
        requirements_query("vkGetImageMemoryRequirements2", device, |state| {
            let Some(next) = state.next.get_image_memory_requirements2 else {
                return NOTHING;
            };
            next(device, info, requirements);
            override_dedicated(state, requirements);
            let kind = if info.is_null() {
                PLAIN_IMAGE
            } else {
                image_kind(state, (*info).image)
            };
            (inner(requirements), kind)
        });
    }
}

/// `vkGetDeviceBufferMemoryRequirements[KHR]` (maintenance4), in fake terms.
pub(crate) unsafe extern "system" fn get_device_buffer_memory_requirements(
    device: vk::Device,
    info: *const vk::DeviceBufferMemoryRequirements<'_>,
    requirements: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged.
    unsafe {
        requirements_query("vkGetDeviceBufferMemoryRequirements", device, |state| {
            let Some(next) = state.next.get_device_buffer_memory_requirements else {
                return NOTHING;
            };
            next(device, info, requirements);
            override_dedicated(state, requirements);
            (inner(requirements), BUFFER)
        });
    }
}

/// `vkGetDeviceImageMemoryRequirements[KHR]` (maintenance4), in fake terms.
pub(crate) unsafe extern "system" fn get_device_image_memory_requirements(
    device: vk::Device,
    info: *const vk::DeviceImageMemoryRequirements<'_>,
    requirements: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: the caller's valid arguments are forwarded unchanged; `info`
    // (and the create info it points at) is read only when non-null.
    unsafe {
        requirements_query("vkGetDeviceImageMemoryRequirements", device, |state| {
            let Some(next) = state.next.get_device_image_memory_requirements else {
                return NOTHING;
            };
            next(device, info, requirements);
            override_dedicated(state, requirements);
            // The image does not exist: its create info says its kind.
            let create_info = if info.is_null() {
                std::ptr::null()
            } else {
                (*info).p_create_info
            };
            let kind = if create_info.is_null() {
                PLAIN_IMAGE
            } else {
                let info = &*create_info;
                (
                    ResourceKind::of_image(info.usage, info.tiling),
                    is_depth_stencil(info.format),
                )
            };
            (inner(requirements), kind)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's answer, then the option applied to it.
    fn applied(choice: DedicatedOverride, prefers: bool, requires: bool) -> (bool, bool) {
        let mut dedicated = vk::MemoryDedicatedRequirements::default()
            .prefers_dedicated_allocation(prefers)
            .requires_dedicated_allocation(requires);
        let mut requirements = vk::MemoryRequirements2 {
            p_next: std::ptr::from_mut(&mut dedicated).cast(),
            ..Default::default()
        };
        // SAFETY: a valid output structure and chain on the stack.
        unsafe { apply_dedicated(choice, &mut requirements) };
        (
            dedicated.prefers_dedicated_allocation == vk::TRUE,
            dedicated.requires_dedicated_allocation == vk::TRUE,
        )
    }

    /// `dedicated=prefer` and `require` raise what the driver says, never
    /// lower it: a resource the driver requires dedicated memory for (an
    /// external-memory image on a GPU, say) stays required under `prefer`,
    /// or the validation layer and the bind checks would let an allocator
    /// suballocate it.
    #[test]
    fn the_dedicated_option_never_drops_what_the_driver_requires() {
        use DedicatedOverride::{Prefer, Require};
        assert_eq!(applied(Prefer, false, false), (true, false));
        assert_eq!(applied(Require, false, false), (true, true));
        assert_eq!(applied(Require, true, true), (true, true));
        assert_eq!(
            applied(Prefer, true, true),
            (true, true),
            "dedicated=prefer dropped the driver's requiresDedicatedAllocation"
        );
    }
}
