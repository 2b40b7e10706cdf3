"""TEMPORARY placeholder: the core helper replaces this with the tiled online-softmax version."""

from .reference import scaled_dot_product_attention as _ref


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, block_size=64):
    return _ref(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
