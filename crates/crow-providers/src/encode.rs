//! Request bodies that reuse the bytes of the conversation so far.
//!
//! A conversation only grows between two calls of a turn, and by design its messages encode
//! to the same bytes every time (that is what prompt caches need). So instead of
//! re-serialising the whole history per call, [`PrefixCache`] keeps each conversation's
//! encoded `messages` array and serialises only the messages after the longest unchanged
//! prefix. A message is recognised by a 64-bit hash of its wire form (with a per-process
//! random seed, so no text can be crafted to collide); hashing is an order of magnitude
//! cheaper than JSON serialisation with its escaping and allocates nothing. The only
//! allocation proportional to the history is the body itself: the bytes actually sent.
//!
//! The body is its other fields followed by `"messages"` as the last key, so the fields of
//! one call and the next are byte-identical and the array is a byte prefix of the next
//! one's (the order of an object's keys means nothing to the APIs).
//!
//! Each provider keeps the encodings of its last two conversations. `encode_proptests.rs` checks
//! that the bytes equal a fresh encoding over arbitrary edits. The hasher is `foldhash`, already in
//! the tree through hashbrown.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use crow_core::{ProviderError, ProviderErrorKind};
use serde::Serialize;

/// Conversations remembered at once: a builder and its reviewer (or a subagent) sharing one
/// provider alternate without evicting each other. A conversation that finds no slot is
/// encoded whole, as it would be without the cache.
const SLOTS: usize = 2;

/// The encoded messages of the last few conversations this provider sent.
pub(crate) struct PrefixCache {
    hasher: foldhash::fast::RandomState,
    slots: Mutex<Vec<Slot>>,
}

/// One conversation: the key of each wire message, where its bytes end, and the bytes
/// (the array's elements joined by commas, without brackets).
#[derive(Default)]
struct Slot {
    keys: Vec<u64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
    /// When the slot was last used, for eviction.
    used: u64,
}

impl Slot {
    /// How many leading messages `keys` shares with this slot.
    fn common(&self, keys: &[u64]) -> usize {
        self.keys
            .iter()
            .zip(keys)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the conversation's bytes: they may hold anything the user pasted.
        let slots = self.slots.lock().map_or(0, |s| s.len());
        f.debug_struct("PrefixCache")
            .field("slots", &slots)
            .finish()
    }
}

impl Default for PrefixCache {
    fn default() -> Self {
        Self {
            hasher: foldhash::fast::RandomState::default(),
            slots: Mutex::new(Vec::with_capacity(SLOTS)),
        }
    }
}

impl PrefixCache {
    /// The body: `fields` (a JSON object without `messages`) with `"messages":[…]` appended
    /// as its last key. Messages after the longest prefix this cache already holds are
    /// serialised; the prefix is copied.
    pub(crate) fn encode<M: Serialize + Hash>(
        &self,
        fields: &impl Serialize,
        messages: &[M],
    ) -> Result<Bytes, ProviderError> {
        self.encode_as("messages", fields, messages)
    }

    /// [`Self::encode`] with the array under another key (the Responses API's `input`).
    pub(crate) fn encode_as<M: Serialize + Hash>(
        &self,
        key: &str,
        fields: &impl Serialize,
        messages: &[M],
    ) -> Result<Bytes, ProviderError> {
        let keys: Vec<u64> = messages.iter().map(|m| self.hasher.hash_one(m)).collect();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let tick = slots.iter().map(|s| s.used).max().unwrap_or(0) + 1;
        let index = choose(&mut slots, &keys);
        let Some(slot) = slots.get_mut(index) else {
            return Err(encode_error("no cache slot"));
        };
        let common = slot.common(&keys);
        let Some(slot) = slots.get_mut(index) else {
            return Err(encode_error("no cache slot"));
        };
        slot.used = tick;
        slot.keys.truncate(common);
        slot.ends.truncate(common);
        slot.bytes.truncate(slot.ends.last().copied().unwrap_or(0));
        for (message, key) in messages.iter().zip(&keys).skip(common) {
            if !slot.bytes.is_empty() {
                slot.bytes.push(b',');
            }
            if let Err(e) = serde_json::to_writer(&mut slot.bytes, message) {
                // Leave the slot consistent: drop what this message half-wrote.
                slot.bytes.truncate(slot.ends.last().copied().unwrap_or(0));
                return Err(encode_error(e));
            }
            slot.keys.push(*key);
            slot.ends.push(slot.bytes.len());
        }

        let mut body = serde_json::to_vec(fields).map_err(encode_error)?;
        if body.pop() != Some(b'}') {
            return Err(encode_error("the body's fields are not a JSON object"));
        }
        body.reserve_exact(slot.bytes.len() + 16);
        if body.len() > 1 {
            body.push(b',');
        }
        body.push(b'"');
        body.extend_from_slice(key.as_bytes());
        body.extend_from_slice(b"\":[");
        body.extend_from_slice(&slot.bytes);
        body.extend_from_slice(b"]}");
        Ok(Bytes::from(body))
    }
}

/// The slot a conversation with `keys` uses (pushing a new one when there is room): the one
/// it continues (all of the slot's messages are its prefix), else a free one, else the one
/// sharing the longest prefix with it, else the least recently used. Two conversations that
/// share only a system prompt thus keep a slot each.
fn choose(slots: &mut Vec<Slot>, keys: &[u64]) -> usize {
    let continued = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.keys.is_empty() && s.common(keys) == s.keys.len())
        .max_by_key(|(_, s)| s.keys.len())
        .map(|(i, _)| i);
    if let Some(i) = continued {
        return i;
    }
    if slots.len() < SLOTS {
        slots.push(Slot::default());
        return slots.len() - 1;
    }
    let shared = slots
        .iter()
        .enumerate()
        .map(|(i, s)| (s.common(keys), i))
        .max()
        .filter(|(common, _)| *common > 0)
        .map(|(_, i)| i);
    shared.unwrap_or_else(|| {
        slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.used)
            .map_or(0, |(i, _)| i)
    })
}

fn encode_error(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::BadRequest,
        format!("could not encode the request: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[derive(Serialize, Hash)]
    struct Msg<'a> {
        role: &'a str,
        content: &'a str,
    }

    #[derive(Serialize)]
    struct Fields<'a> {
        model: &'a str,
        stream: bool,
    }

    fn msgs<'a>(texts: &[&'a str]) -> Vec<Msg<'a>> {
        texts
            .iter()
            .map(|t| Msg {
                role: "user",
                content: t,
            })
            .collect()
    }

    /// What a cache-free encoder would send for the same request.
    fn whole(messages: &[Msg<'_>]) -> Value {
        json!({"model": "m", "stream": true, "messages": messages})
    }

    fn encode(cache: &PrefixCache, messages: &[Msg<'_>]) -> Bytes {
        let fields = Fields {
            model: "m",
            stream: true,
        };
        cache.encode(&fields, messages).unwrap()
    }

    #[test]
    fn a_growing_conversation_is_a_byte_prefix_and_equals_a_whole_encoding() {
        let cache = PrefixCache::default();
        let texts = ["a \"quoted\" line\n", "b", "c", "ünïcode ✓"];
        let mut previous: Option<Bytes> = None;
        for n in 0..=texts.len() {
            let messages = msgs(&texts[..n]);
            let body = encode(&cache, &messages);
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(parsed, whole(&messages));
            if let Some(prev) = previous {
                // Everything but the closing `]}` of the earlier body is reused verbatim.
                assert!(body.starts_with(&prev[..prev.len() - 2]), "{n}");
            }
            previous = Some(body);
        }
    }

    #[test]
    fn a_changed_message_is_encoded_anew_and_nothing_after_it_is_reused() {
        let cache = PrefixCache::default();
        encode(&cache, &msgs(&["one", "two", "three"]));
        // A compaction rewrote the middle: the result must carry the new text only.
        let changed = msgs(&["one", "summary", "three", "four"]);
        let body = encode(&cache, &changed);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            whole(&changed)
        );
        // Shrinking (the tail dropped) works too.
        let shorter = msgs(&["one"]);
        let body = encode(&cache, &shorter);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            whole(&shorter)
        );
    }

    #[test]
    fn two_conversations_alternate_without_mixing_and_a_third_evicts_the_oldest() {
        let cache = PrefixCache::default();
        let a = msgs(&["builder task", "a1"]);
        let b = msgs(&["review this", "b1", "b2"]);
        let c = msgs(&["subagent"]);
        for _ in 0..3 {
            for conversation in [&a, &b, &c, &a] {
                let body = encode(&cache, conversation);
                assert_eq!(
                    serde_json::from_slice::<Value>(&body).unwrap(),
                    whole(conversation)
                );
            }
        }
        assert!(cache.slots.lock().unwrap().len() <= SLOTS);
    }

    #[test]
    fn no_messages_and_no_other_fields_still_make_valid_json() {
        #[derive(Serialize)]
        struct Empty {}
        let cache = PrefixCache::default();
        let body = cache.encode(&Empty {}, &msgs(&[])).unwrap();
        assert_eq!(&body[..], br#"{"messages":[]}"#);
    }
}
