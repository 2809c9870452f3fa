//! A context's validation messages: advice a test allows (for the whole
//! context or during one call), and taking, asserting none of, or
//! expecting by id the messages the validation layer recorded.

use std::sync::PoisonError;

use super::super::validation_messages::{self, Advice};
use super::VulkanContext;

impl VulkanContext {
    /// Lets this context's messages of `advice` through: a test that
    /// disregards that best practice on purpose (see [`Advice`]).
    pub fn allow(&self, advice: Advice) {
        let mut allowed = self.allowed.lock().unwrap_or_else(PoisonError::into_inner);
        for id in advice.ids() {
            if !allowed.contains(id) {
                allowed.push(id);
            }
        }
    }

    /// Runs `call` and drops the messages of `advice` recorded during it,
    /// and only those: for a test's own Vulkan call that disregards that
    /// advice on purpose (a raw `vkAllocateMemory` without a priority) in a
    /// test where the allocator's calls must still heed it, which a
    /// context-wide [`allow`](Self::allow) would let pass too (it drops
    /// the advice from every message taken after it, earlier ones
    /// included). Messages recorded before `call` stay, in order, as do
    /// those of other ids recorded during it. For a call on the test's own
    /// thread: another thread's messages recorded meanwhile are filtered
    /// alike.
    pub fn allowing<R>(&self, advice: &[Advice], call: impl FnOnce() -> R) -> R {
        let before = validation_messages::take(&self.messages);
        let result = call();
        let mut during = validation_messages::take(&self.messages);
        let ids: Vec<&str> = advice
            .iter()
            .flat_map(|advice| advice.ids())
            .copied()
            .collect();
        validation_messages::drop_ids(&mut during, &ids);
        let mut log = self.messages.lock().unwrap_or_else(PoisonError::into_inner);
        let after = std::mem::take(&mut *log);
        log.extend(before);
        log.extend(during);
        log.extend(after);
        result
    }

    /// For a test that calls `vkAllocateMemory` itself and makes no
    /// allocator: allows, for the whole context, the NVIDIA advice the
    /// allocator heeds and such a test need not (a priority on every
    /// allocation, [`Advice::NoMemoryPriority`]; memory just freed reused,
    /// [`Advice::ReusedMemory`]). Where an allocator allocates too, wrap
    /// the test's own calls in [`allowing`](Self::allowing) instead, so
    /// that the allocator's still draw the advice.
    pub fn allow_own_allocations(&self) {
        self.allow(Advice::NoMemoryPriority);
        self.allow(Advice::ReusedMemory);
    }

    /// Takes every validation message recorded so far, less the allowed
    /// advice ([`VulkanContext::allow`]).
    pub fn take_messages(&self) -> Vec<String> {
        let allowed = self.allowed.lock().unwrap_or_else(PoisonError::into_inner);
        let mut messages = validation_messages::take(&self.messages);
        validation_messages::drop_ids(&mut messages, &allowed);
        messages
    }

    /// Panics, listing them, if any validation message was recorded.
    pub fn assert_no_validation_messages(&self) {
        let messages = self.take_messages();
        assert!(
            messages.is_empty(),
            "{} validation message(s) on {}:\n{}",
            messages.len(),
            self.profile,
            messages.join("\n")
        );
    }

    /// Takes the recorded messages and checks them against `expected` ids
    /// (VUIDs, whole): each must be the id of some message, and every
    /// message must have one of them as its id (a message of another id
    /// whose text names one, as an object's debug name may, is unexpected).
    /// Returns the messages.
    pub fn expect_validation_messages(&self, expected: &[&str]) -> Vec<String> {
        let messages = self.take_messages();
        let has_id = validation_messages::has_id;
        for id in expected {
            assert!(
                messages.iter().any(|message| has_id(message, id)),
                "expected {id} on {}, got:\n{}",
                self.profile,
                messages.join("\n")
            );
        }
        let unexpected: Vec<&String> = messages
            .iter()
            .filter(|message| !expected.iter().any(|id| has_id(message, id)))
            .collect();
        assert!(
            unexpected.is_empty(),
            "unexpected validation message(s) on {}:\n{}",
            self.profile,
            unexpected
                .iter()
                .map(|message| message.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        messages
    }
}
