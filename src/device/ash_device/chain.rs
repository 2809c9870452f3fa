//! The structures of a Vulkan `pNext` chain, walked once for every reader
//! of a caller's create info: the buffer usage of
//! `VkBufferUsageFlags2CreateInfoKHR`, the image handle types the helpers
//! refuse, and the structures maintenance4's image query may not take.

use std::ffi::c_void;

use ash::vk;

/// Each structure of the chain that starts at `p_next`, in order, as its
/// `sType` and its address (cast it to the structure its `sType` names).
/// The addresses are the chain's own pointers, so a cast reaches the whole
/// structure, not only its header.
///
/// # Safety
/// `p_next` is null or the start of a valid chain (each structure begins
/// with `sType` and `pNext`, the last `pNext` is null) that stays alive
/// and unchanged while the iterator is used.
pub(crate) unsafe fn chain_structures(
    p_next: *const c_void,
) -> impl Iterator<Item = (vk::StructureType, *const c_void)> {
    let mut next = p_next.cast::<vk::BaseInStructure<'static>>();
    std::iter::from_fn(move || {
        if next.is_null() {
            return None;
        }
        let here = next;
        // SAFETY: a structure of the chain, which starts with `sType` and
        // `pNext` (the function's contract).
        let (s_type, p_next) = unsafe { ((*here).s_type, (*here).p_next) };
        next = p_next;
        Some((s_type, here.cast()))
    })
}
