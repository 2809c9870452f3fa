//! A tiny generational slab: stable keys for blocks and dedicated allocations.

/// Names one entry of a [`Slab`]; stale once the entry is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SlabKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// `repr(C)`: the generation first, next to the start of the value, so a
/// lookup reads one cache line where the value's hot fields come first
/// (runs.rs).
#[derive(Debug)]
#[repr(C)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Values addressed by generational keys. Removing frees the slot for reuse
/// with a new generation, so an old key never reaches a new value.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    vacant: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Self {
        Self {
            entries: Vec::new(),
            vacant: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> SlabKey {
        self.len += 1;
        if let Some(index) = self.vacant.pop() {
            let entry = &mut self.entries[index as usize];
            entry.value = Some(value);
            return SlabKey {
                index,
                generation: entry.generation,
            };
        }
        self.entries.push(Entry {
            generation: 0,
            value: Some(value),
        });
        SlabKey {
            index: (self.entries.len() - 1) as u32,
            generation: 0,
        }
    }

    pub(crate) fn get(&self, key: SlabKey) -> Option<&T> {
        let entry = self.entries.get(key.index as usize)?;
        (entry.generation == key.generation)
            .then_some(entry.value.as_ref())
            .flatten()
    }

    pub(crate) fn get_mut(&mut self, key: SlabKey) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.generation == key.generation {
            entry.value.as_mut()
        } else {
            None
        }
    }

    pub(crate) fn remove(&mut self, key: SlabKey) -> Option<T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.generation != key.generation {
            return None;
        }
        let value = entry.value.take()?;
        entry.generation = entry.generation.wrapping_add(1);
        self.vacant.push(key.index);
        self.len -= 1;
        Some(value)
    }

    /// One past the largest key index handed out: a `Vec` this long can be
    /// indexed by [`SlabKey::index`].
    pub(crate) fn index_bound(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Live entries with their keys, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlabKey, &T)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                entry.value.as_ref().map(|value| {
                    (
                        SlabKey {
                            index: index as u32,
                            generation: entry.generation,
                        },
                        value,
                    )
                })
            })
    }

    /// Live entries with their keys, mutably, in slot order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (SlabKey, &mut T)> + '_ {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(index, entry)| {
                let generation = entry.generation;
                entry.value.as_mut().map(|value| {
                    (
                        SlabKey {
                            index: index as u32,
                            generation,
                        },
                        value,
                    )
                })
            })
    }

    /// Live values, mutably, in slot order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.entries
            .iter_mut()
            .filter_map(|entry| entry.value.as_mut())
    }

    /// Removes and returns every value. Each slot stays, vacant, with its
    /// generation bumped as [`remove`](Self::remove) bumps it: a key handed
    /// out before never reaches a value inserted after.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> {
        self.len = 0;
        self.vacant.clear();
        let mut values = Vec::new();
        for (index, entry) in self.entries.iter_mut().enumerate() {
            if let Some(value) = entry.value.take() {
                entry.generation = entry.generation.wrapping_add(1);
                values.push(value);
            }
            self.vacant.push(index as u32);
        }
        values.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a.index, b.index);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.drain().collect::<Vec<_>>(), vec!["b"]);
    }

    /// Draining (a pool releasing everything, `Runs::clear`) keeps keys
    /// generational: a key from before names nothing inserted after, as
    /// after `remove`.
    #[test]
    fn keys_from_before_a_drain_miss() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.drain().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(slab.len(), 0);
        let c = slab.insert("c");
        let d = slab.insert("d");
        for old in [a, b] {
            assert_eq!(slab.get(old), None);
            assert_eq!(slab.remove(old), None);
        }
        assert_eq!((slab.get(c), slab.get(d)), (Some(&"c"), Some(&"d")));
        // The slots are reused, not grown past.
        assert_eq!(slab.index_bound(), 2);
    }
}
