"""Every argument torch's SDPA refuses, refused by all three implementations: torch's exception
type and torch's first reason (the first thing wrong, in torch's order), in the course's own
words naming the argument and the shapes. Table-driven against torch's math kernel (the control
column runs first: if torch changes its mind, the table says so).

Two faults at once pin the order (e.g. a dtype mismatch AND a 1-d query: torch names the dtype).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_lib import IMPLEMENTATIONS

NAMES = list(IMPLEMENTATIONS)


def T(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


Q = T(2, 4, 8, 16)

#: reason -> (torch's words, the course's words)
REASONS = {
    "types": (r"argument '(\w+)'.* must be", r"^(\w+) must be a (torch\.Tensor|float|bool)\b"),
    "causal bias": (r"CausalBias should not be used with causal=True", r"CausalBias"),
    "dtype": (r"same dtype", r"must share a dtype"),
    "dims": (r"at least 2 dimensional", r"at least 2 dims"),
    "mask dtype": (r"attn_mask dtype to be bool or float", r"attn_mask must be bool"),
    "causal and mask": (r"Explicit attn_mask should not be set when is_causal=True",
                        r"Explicit attn_mask should not be set when is_causal=True"),
    "gqa dims": (r"Dimension out of range", r"needs a head dim"),
    "gqa heads": (r"heads in key and value must divide", r"heads in key and value must divide"),
    "float": (r"expected m1 and m2 to have the same dtype", r"floating-point tensor"),
    "E": (r"batch2 tensor to be: \[\d+, (\d+)\] but got: \[\d+, (\d+)\]",
          r"last dim \(E\) of query and key"),
    "batch": (r"must match the size of tensor b", r"batch dims of query .* do not broadcast"),
    "mask shape": (r"must match the size of tensor b|doesn't match the broadcast shape",
                   r"attn_mask of shape .* not broadcastable"),
    "dropout": (r"dropout probability has to be between 0 and 1", r"dropout_p must be"),
    "S": (r"batch2 tensor to be: \[(\d+), \d+\] but got: \[(\d+), \d+\]",
          r"same length S"),
}

#: name -> ((query, key, value), kwargs, torch's first reason)
CASES = {
    "query not a tensor": (([1.0], Q, Q), {}, "types"),
    "mask a list": ((Q, Q, Q), {"attn_mask": [1.0]}, "types"),
    "dropout_p a string": ((Q, Q, Q), {"dropout_p": "x"}, "types"),
    "is_causal an int": ((Q, Q, Q), {"is_causal": 1}, "types"),
    "scale a string": ((Q, Q, Q), {"scale": "x"}, "types"),
    "enable_gqa an int": ((Q, Q, Q), {"enable_gqa": 1}, "types"),
    "scale a string and dtypes differ": ((Q, Q.double(), Q), {"scale": "x"}, "types"),
    "dtypes differ": ((Q, Q.double(), Q), {}, "dtype"),
    "dtypes differ and 1-d query": ((T(16), Q.double(), Q), {}, "dtype"),
    "1-d query": ((T(16), Q, Q), {}, "dims"),
    "1-d value": ((Q, Q, T(16)), {}, "dims"),
    "1-d key and int mask": ((Q, T(16), Q), {"attn_mask": T(8, 8, dtype=torch.long)}, "dims"),
    "int mask": ((Q, Q, Q), {"attn_mask": T(8, 8, dtype=torch.long)}, "mask dtype"),
    "float64 mask, float32 query": ((Q, Q, Q), {"attn_mask": T(8, 8, dtype=torch.float64)},
                                    "mask dtype"),
    "int mask with is_causal": ((Q, Q, Q), {"attn_mask": T(8, 8, dtype=torch.long),
                                            "is_causal": True}, "mask dtype"),
    "mask with is_causal (issue 41)": ((Q, Q, Q), {"attn_mask": T(8, 8), "is_causal": True},
                                       "causal and mask"),
    "bool mask with is_causal, 3-d": ((T(2, 8, 16), T(2, 8, 16), T(2, 8, 16)),
                                      {"attn_mask": T(8, 8, dtype=torch.bool),
                                       "is_causal": True}, "causal and mask"),
    "mask with is_causal and dropout 1.5": ((Q, Q, Q), {"attn_mask": T(8, 8), "is_causal": True,
                                                        "dropout_p": 1.5}, "causal and mask"),
    "mask with is_causal and bad E": ((Q, T(2, 4, 8, 8), Q), {"attn_mask": T(8, 8),
                                                              "is_causal": True},
                                      "causal and mask"),
    "gqa on 2-d inputs": ((T(8, 16), T(8, 16), T(8, 16)), {"enable_gqa": True}, "gqa dims"),
    "gqa heads do not divide": ((Q, T(2, 3, 8, 16), T(2, 3, 8, 16)), {"enable_gqa": True},
                                "gqa heads"),
    "gqa value heads do not divide": ((Q, T(2, 2, 8, 16), T(2, 3, 8, 16)),
                                      {"enable_gqa": True}, "gqa heads"),
    "gqa heads and E": ((Q, T(2, 3, 8, 8), T(2, 3, 8, 16)), {"enable_gqa": True}, "gqa heads"),
    "int inputs": ((Q.long(), Q.long(), Q.long()), {}, "float"),
    "E differs": ((Q, T(2, 4, 8, 8), Q), {}, "E"),
    "E differs and S differs": ((Q, T(2, 4, 8, 8), T(2, 4, 9, 16)), {}, "E"),
    "E differs and dropout 1.5": ((Q, T(2, 4, 8, 8), Q), {"dropout_p": 1.5}, "E"),
    "batch of key": ((Q, T(3, 4, 8, 16), T(3, 4, 8, 16)), {}, "batch"),
    "heads without enable_gqa": ((Q, T(2, 2, 8, 16), T(2, 2, 8, 16)), {}, "batch"),
    "mask shape": ((Q, Q, Q), {"attn_mask": T(8, 7)}, "mask shape"),
    "mask bigger than the scores": ((T(8, 16), T(8, 16), T(8, 16)), {"attn_mask": T(2, 8, 8)},
                                    "mask shape"),
    "mask shape and dropout 1.5": ((Q, Q, Q), {"attn_mask": T(8, 7), "dropout_p": 1.5},
                                   "mask shape"),
    "dropout 1.5": ((Q, Q, Q), {"dropout_p": 1.5}, "dropout"),
    "dropout 1.5 and S differs": ((Q, Q, T(2, 4, 9, 16)), {"dropout_p": 1.5}, "dropout"),
    "S of value differs": ((Q, Q, T(2, 4, 9, 16)), {}, "S"),
    "batch of value": ((Q, Q, T(3, 4, 8, 16)), {}, "batch"),
}


def torch_math(*args, **kwargs):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def _reason(message: str, column: int) -> list[str]:
    return [r for r, pats in REASONS.items() if re.search(pats[column], message)]


@pytest.mark.parametrize("case", list(CASES))
def test_torch_refuses_each_case_for_the_reason_in_the_table(case):
    args, kwargs, reason = CASES[case]
    with pytest.raises(Exception) as err:
        torch_math(*args, **kwargs)
    assert reason in _reason(str(err.value), 0), f"{case}: torch said {err.value}"


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_same_exception_type_and_first_reason_as_torch(name, case):
    args, kwargs, reason = CASES[case]
    with pytest.raises(Exception) as theirs:
        torch_math(*args, **kwargs)
    with pytest.raises(Exception) as ours:
        IMPLEMENTATIONS[name](*args, **kwargs)
    assert isinstance(ours.value, type(theirs.value)), \
        f"{case}: {type(ours.value).__name__} is not torch's {type(theirs.value).__name__}"
    assert _reason(str(ours.value), 1)[:1] == [reason], f"{case}: {ours.value}"
    if reason == "types":                                # the argument torch names
        named = re.search(REASONS["types"][0], str(theirs.value)).group(1)
        assert str(ours.value).startswith(named)
    if reason in ("E", "S"):                             # both sizes, in the shapes we name
        sizes = re.search(REASONS[reason][0], str(theirs.value)).groups()
        assert all(f"{reason}={n}" in str(ours.value) for n in sizes)


#: what torch accepts and an old check of ours refused: accepted here too, with torch's result
ACCEPTED = {
    "dropout_p below 0 is no dropout": ((Q[0], Q[0], Q[0]), {"dropout_p": -0.5}),
    "dropout_p NaN is no dropout": ((Q[0], Q[0], Q[0]), {"dropout_p": float("nan")}),
    "key and value heads differ, both divide": ((Q, T(2, 2, 8, 16), T(2, 1, 8, 16)),
                                                {"enable_gqa": True}),
    "negative scale": ((Q, Q, Q), {"scale": -1.0}),
    "int scale": ((Q, Q, Q), {"scale": 2}),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
@pytest.mark.parametrize("name", NAMES)
def test_what_torch_accepts_is_accepted(name, case):
    args, kwargs = ACCEPTED[case]
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(a.shape, generator=gen, dtype=torch.float64) for a in args]
    expected = torch_math(*args, **kwargs)
    assert torch.allclose(IMPLEMENTATIONS[name](*args, **kwargs), expected, atol=1e-12)


def test_the_table_covers_every_reason():
    assert {reason for _, _, reason in CASES.values()} == set(REASONS) - {"causal bias"}


#: torch 2.13 skips its later checks when an input is empty (it returns zeros); the course
#: refuses an invalid call whatever the sizes: the deliberate exception, pinned here
EMPTY_BUT_INVALID = {
    "empty batch, mask with is_causal": ((T(0, 4, 6), T(0, 3, 6), T(0, 3, 6)),
                                         {"attn_mask": T(4, 3, dtype=torch.bool),
                                          "is_causal": True}, "causal and mask"),
    "L = 0, E differs": ((T(2, 0, 6), T(2, 3, 5), T(2, 3, 6)), {}, "E"),
    "S = 0, dropout 1.5": ((T(2, 4, 6), T(2, 0, 6), T(2, 0, 6)), {"dropout_p": 1.5}, "dropout"),
}


@pytest.mark.parametrize("case", list(EMPTY_BUT_INVALID))
@pytest.mark.parametrize("name", NAMES)
def test_empty_but_invalid_calls_are_refused_where_torch_returns_zeros(name, case):
    args, kwargs, reason = EMPTY_BUT_INVALID[case]
    assert torch_math(*args, **kwargs).abs().sum() == 0     # torch: no error
    with pytest.raises(RuntimeError) as ours:
        IMPLEMENTATIONS[name](*args, **kwargs)
    assert _reason(str(ours.value), 1)[:1] == [reason]
