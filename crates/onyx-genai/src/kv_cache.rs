//! Which form the KV cache takes, and how much it holds.
//!
//! | form | past and present | the attention mask | a decode step |
//! | --- | --- | --- | --- |
//! | growing | `[B, Hkv, P, D]` then `[B, Hkv, P + S, D]` | `[B, P + S]`, ones | new shapes: a new plan, the cache copied |
//! | shared buffer | one buffer `[B, Hkv, C, D]` | `[B, C]`, ones then zeros | same shapes until the capacity `C` grows |
//!
//! The shared-buffer form is GroupQueryAttention's (onnxruntime-genai's
//! `past_present_share_buffer`): each layer's past and present are one buffer of `C` positions,
//! the node writes the new tokens' rows into it and attends over the first
//! `seqlens_k + 1` (the ones of the mask). Generation uses it when every cache input feeds a
//! GroupQueryAttention node directly and the mask only gives those nodes their lengths
//! (`ReduceSum` for seqlens_k, `Shape` for total_sequence_length): then zeros past the valid
//! length change nothing. `C` starts at a power of two above the prompt and doubles when the
//! sequence reaches it, capped at max_length: a short chat on a long-context model holds a short
//! cache, and a decode step reuses the plan and the buffers of the step before it.

use std::collections::HashMap;

use onyx_runtime::ir::{Graph, Node};

use crate::config::Config;

/// The least capacity of a shared buffer, in positions.
const MIN_CAPACITY: usize = 64;

/// Whether the decoder graph's cache inputs and mask allow the shared-buffer form (see the module
/// docs), for the names `config` gives them. The caller also checks that no layer is windowed
/// and that the mask is there.
pub(crate) fn shares_buffer(graph: &Graph, config: &Config) -> bool {
    let decoder = &config.model.decoder;
    let mut readers: HashMap<&str, Vec<(&Node, usize)>> = HashMap::new();
    for node in &graph.nodes {
        for (i, input) in node.inputs.iter().enumerate() {
            readers.entry(input.as_str()).or_default().push((node, i));
        }
    }
    let reads = |name: &str| readers.get(name).map_or(&[][..], Vec::as_slice);
    let lengths_only = reads(&decoder.inputs.attention_mask)
        .iter()
        .all(|(n, _)| n.domain.is_empty() && matches!(n.op_type.as_str(), "ReduceSum" | "Shape"));
    let is_gqa = |n: &Node| {
        n.op_type == "GroupQueryAttention"
            && n.domain == "com.microsoft"
            && n.get_int("sliding_window_cache").ok().flatten().unwrap_or(0) == 0
    };
    let layer_fits = |layer: usize| {
        let name = |template: &str| template.replace("%d", &layer.to_string());
        let (present_key, present_value) =
            (name(&decoder.outputs.present_key_names), name(&decoder.outputs.present_value_names));
        match (reads(&name(&decoder.inputs.past_key_names)), reads(&name(&decoder.inputs.past_value_names))) {
            ([(k, 3)], [(v, 4)]) => {
                std::ptr::eq(*k, *v)
                    && is_gqa(k)
                    && k.outputs.get(1) == Some(&present_key)
                    && k.outputs.get(2) == Some(&present_value)
            }
            _ => false,
        }
    };
    lengths_only && decoder.num_hidden_layers > 0 && (0..decoder.num_hidden_layers).all(layer_fits)
}

/// The capacity a shared buffer needs to hold `needed` positions when it holds `current`:
/// `current` while it suffices; else a power of two above `needed` and at least double
/// `current`, within `limit` (max_length).
pub(crate) fn capacity(needed: usize, current: usize, limit: usize) -> usize {
    if needed <= current {
        return current;
    }
    (needed + 1).next_power_of_two().max(MIN_CAPACITY).max(current.saturating_mul(2)).min(limit).max(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_doubles_within_the_limit() {
        assert_eq!(capacity(5, 0, 1000), 64);
        assert_eq!(capacity(5, 0, 40), 40);
        assert_eq!(capacity(128, 0, 4096), 256);
        assert_eq!(capacity(64, 64, 4096), 64);
        assert_eq!(capacity(65, 64, 4096), 128);
        assert_eq!(capacity(300, 64, 4096), 512);
        assert_eq!(capacity(257, 256, 300), 300);
        // A limit below what is needed never truncates.
        assert_eq!(capacity(301, 256, 300), 301);
    }
}
