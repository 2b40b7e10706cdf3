"""Forbidden torch operators by family, checked against torch's own list of registered operators.

A forbidden group (``FORBIDDEN_GROUPS``) names its aten operators by a pattern, so a new torch
release's new softmax or attention kernel is in the family without anyone listing it. These tests
read every registered aten operator: each one whose name *looks* like a member (a broad pattern)
is either in the family or in a reviewed list of non-members below, so a new operator that
matches neither fails here until someone decides which side it is on.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
import torch

from course_lib.toolkit.checking import FORBIDDEN_GROUPS
from course_lib.toolkit.checking._policy import _KEYS as KEYS
from course_lib.toolkit.checking._policy import _overloads, family

REGISTERED = sorted({n[6:].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                     if n.startswith("aten::")})

#: What a member's name looks like (broader than the family's own pattern).
LOOKS_LIKE = {
    "softmax": r"softmax|soft_max",
    "sdpa": r"attention|attn|_sdp|multi_head|transformer",
    "matmul": r"mm|matmul|linear|dot|einsum|tensordot|gemm|gemv|inner|outer|ger|kron|conv",
}

#: Reviewed: operators whose names look like a member but compute something else.
NOT_MEMBERS = {
    "softmax": set(),
    "sdpa": set(),
    "matmul": {
        "_compute_linear_combination",                        # a weighted sum of tensors
        "_cummax_helper", "_cummin_helper", "cummax", "cummin", "cummaxmin_backward",
        "_foreach_lgamma", "_foreach_lgamma_", "lgamma", "lgamma_", "mvlgamma", "mvlgamma_",
        "digamma", "digamma_", "polygamma", "polygamma_", "igamma", "igamma_", "igammac",
        "igammac_", "_standard_gamma", "_standard_gamma_grad", "special_digamma",
        "special_gammainc", "special_gammaincc", "special_gammaln", "special_multigammaln",
        "special_polygamma",                                  # the gamma function family
        "hamming_window", "_nested_get_jagged_dummy", "fbgemm_pack_quantized_matrix",
        "upsample_linear1d", "upsample_linear1d_backward", "upsample_bilinear2d",
        "upsample_bilinear2d_backward", "_upsample_bilinear2d_aa",
        "_upsample_bilinear2d_aa_backward", "upsample_trilinear3d",
        "upsample_trilinear3d_backward",                      # interpolation
        "_convert_indices_from_coo_to_csr", "_convert_indices_from_csr_to_coo",
        "_convert_weight_to_int4pack", "_convert_weight_to_int4pack_for_cpu",  # conversions
        "_conv_depthwise2d_backward",
    },
}


@pytest.mark.parametrize("group", sorted(LOOKS_LIKE))
def test_every_lookalike_operator_is_classified(group):
    looks = [n for n in REGISTERED if re.search(LOOKS_LIKE[group], n)]
    unclassified = [n for n in looks if n not in family(group) and n not in NOT_MEMBERS[group]]
    assert not unclassified, (f"torch {torch.__version__} registers operators that look like "
                              f"members of {group!r}: add each to the family or to NOT_MEMBERS")
    assert not family(group) & NOT_MEMBERS[group]


def test_the_families_hold_the_routes_the_red_team_took():
    assert {"_scaled_dot_product_flash_attention_for_cpu_backward", "_native_multi_head_attention",
            "_scaled_dot_product_attention_math", "_flash_attention_backward",
            "_efficient_attention_forward", "_transformer_encoder_layer_fwd"} <= family("sdpa")
    assert {"_softmax", "_log_softmax", "_softmax_backward_data", "_masked_softmax",
            "_safe_softmax", "_sparse_softmax"} <= family("softmax")
    assert {"mm", "bmm", "addmm", "baddbmm", "matmul", "einsum", "linear", "dot", "mv",
            "outer", "conv1d", "convolution", "_int_mm"} <= family("matmul")
    assert {"_native_multi_head_attention"} <= family("mha")


def test_every_kernel_of_a_family_member_gets_a_refusing_one():
    """Each overload of a member, for each dispatch key where this torch build has a kernel for
    it (CPU, CUDA, the composite keys...), is in the worker's list of kernels to replace."""
    overloads = torch._C._dispatch_get_all_op_names()
    for group in FORBIDDEN_GROUPS:
        refused = {(name, key) for name, key, _ in _overloads((group,))}
        members = family(group)
        for full in overloads:
            if not full.startswith("aten::") or full[6:].split(".")[0] not in members:
                continue
            for key in KEYS:
                if torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                    assert (full[6:], key) in refused, (group, full, key)
    assert ("_softmax", "CPU", FORBIDDEN_GROUPS["softmax"]["label"]) in _overloads(("softmax",))


def test_refusing_kernels_sit_below_every_mode():
    """In a fresh process (the registration lasts as long as the process): every route to a
    refused kernel raises, with torch-function modes switched off; other operators still run."""
    code = textwrap.dedent("""
        import torch
        import torch.nn.functional as F
        from course_lib.toolkit.checking import _policy
        _policy.refuse_kernels(("softmax", "sdpa", "matmul"))
        x = torch.randn(2, 3, 4, 8)
        routes = {
            "softmax": lambda: torch.softmax(x, -1),
            "log_softmax": lambda: F.log_softmax(x, -1),
            "sdpa": lambda: F.scaled_dot_product_attention(x, x, x),
            "flash cpu": lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                x, x, x),
            "matmul": lambda: x @ x.transpose(-2, -1),
            "einsum": lambda: torch.einsum("bhle,bhse->bhls", x, x),
            "conv1d": lambda: F.conv1d(x[0], x[0, :, :, :3]),
            "linear": lambda: F.linear(x, x[0, 0]),
        }
        refused = []
        for name, route in routes.items():
            try:
                with torch._C.DisableTorchFunction():
                    route()
            except BaseException:
                refused.append(name)
        print(len(refused), len(routes))
        print(float((x.exp() * 2).sum() > 0))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == out[1] and out[2] == "1.0"
