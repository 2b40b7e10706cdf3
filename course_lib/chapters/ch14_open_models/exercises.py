"""Chapter 14 (today's open models): a softmax with a learned sink, a gated attention output, and
one step of the gated delta rule."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.attention.delta_rule import gated_delta_step as _gdr_step
from course_lib.attention.output_gate import gate_output as _gate
from course_lib.attention.sink_softmax import sink_softmax as _sink_softmax
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import choice_probe

_NEG_INF = float("-inf")

# ------------------------------------------------------------------------------ sink_softmax

_SINK_SECTION = "14_open_models: A learned sink: somewhere to put nothing"


def _sink_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape, dtype=torch.float64, scale=1.0):
        return scale * torch.randn(*shape, generator=gen, dtype=dtype)

    cases = [Case("rows of four heads", (r(2, 4, 3, 5), r(4)), note="ordinary scores and sinks"),
             Case("float32, one head", (r(1, 1, 4, 6, dtype=torch.float32),
                                        r(1, dtype=torch.float32)), note="a single head")]
    s = r(1, 2, 4, 5)
    s[0, 0, 1, 3:] = _NEG_INF
    s[0, 1, 2, :] = _NEG_INF
    cases.append(Case("masked keys", (s, r(2)), note="-inf scores; head 1, row 2 sees no key "
                      "(all its mass goes to the sink)"))
    cases.append(Case("large scores", (1000.0 + r(1, 3, 2, 4), 1000.0 + r(3)),
                      note="scores and sinks near 1000: e^1000 overflows float64"))
    cases.append(Case("sinks far apart", (r(2, 3, 3, 4), torch.tensor(
        [-6.0, 0.0, 6.0], dtype=torch.float64)), note="sinks -6, 0 and 6: from nearly no "
        "mass on the sink to nearly all"))
    return cases


def sink_softmax(scores, sinks):
    """p = e^s / (e^b + Σ e^s), max-shifted with the sink included."""
    b = sinks.view(-1, 1, 1).expand(*scores.shape[:-1], 1)            # (..., H, L, 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))


def _added_to_logits(scores, sinks):
    return torch.softmax(scores + sinks.view(-1, 1, 1), dim=-1)


def _sink_column_kept(scores, sinks):
    b = sinks.view(-1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, b], dim=-1), dim=-1)


def _shift_without_sink(scores, sinks):
    b = sinks.view(-1, 1, 1)
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))


def _no_max_shift(scores, sinks):
    e = torch.exp(scores)
    return e / (torch.exp(sinks.view(-1, 1, 1)) + e.sum(dim=-1, keepdim=True))


def _with_term(rule, scores, sinks):
    """e^s / (T + Σ e^s) for the normaliser's sink term ``T`` named by ``rule``, stably."""
    b = sinks.view(-1, 1, 1).expand(*scores.shape[:-1], 1).to(scores.dtype)
    log_sum = torch.logsumexp(scores, dim=-1, keepdim=True)
    if rule == "none":
        log_z = log_sum
    elif rule == "e^-b":
        log_z = torch.logaddexp(log_sum, -b)
    elif rule == "1":
        log_z = torch.logaddexp(log_sum, torch.zeros_like(b))
    elif rule == "S·e^b":
        log_z = torch.logaddexp(log_sum, b + torch.log(torch.tensor(float(scores.shape[-1]))))
    else:                                                             # "b": not exponentiated
        log_z = torch.log(b + torch.exp(log_sum))
    return torch.exp(scores - log_z)


_SINK_TERMS = {"none": "a plain softmax: no sink in the normaliser",
               "e^-b": "a softmax whose normaliser holds e^{-b}: the sink's sign flipped",
               "1": "a softmax with a sink of logit 0 whatever b is (e^0 = 1)",
               "S·e^b": "a softmax whose normaliser holds e^b once per key",
               "b": "a softmax whose normaliser adds b itself, not e^b"}

SINK_SOFTMAX = Exercise(
    id="sink_softmax",
    chapter="14_open_models",
    title="Softmax with a learned sink",
    signature="sink_softmax(scores (B, H, L, S), sinks (H,)) -> (B, H, L, S)",
    params=("scores", "sinks"),
    cases=_sink_cases,
    oracle=_sink_softmax,
    solution=sink_softmax,
    hints=(
        "The sink is one more logit b_h per head that takes probability mass but has no value: "
        "it appears in the normaliser only, p_ij = e^{s_ij} / (e^{b_h} + Σ_j e^{s_ij}). The "
        "output has S columns and its rows sum to less than 1.",
        "Shift by m = max(max_j s_ij, b_h), the sink included, before exponentiating: then "
        "nothing overflows, and a row whose scores are all -inf gives e^{b - m} = 1 in the "
        "normaliser and weights 0, not NaN.",
        "b = sinks.view(-1, 1, 1) broadcast to (..., H, L, 1); m = maximum(scores.amax(-1, "
        "keepdim=True), b); e = exp(scores - m); return e / (exp(b - m) + e.sum(-1, "
        "keepdim=True)).",
    ),
    mistakes=(
        Mistake("sink_added_to_logits", "You added the sink to every score: softmax(s + b) is "
                "softmax(s), since a softmax ignores a constant added to its whole row. The "
                "sink must be a separate term of the normaliser, e^{b} + Σ_j e^{s_j}, that no "
                "key's numerator holds.", _added_to_logits),
        Mistake("sink_column_kept", "You appended the sink as one more key and returned its "
                "column too (S + 1 columns). The sink has no value: drop its column, keep the "
                "S keys' weights, which then sum to less than 1.", _sink_column_kept),
        Mistake("shift_without_sink", "Your rows whose scores are all -inf come out NaN: you "
                "shifted by the maximum score only, -inf there. Include the sink in the "
                "maximum, m = max(max_j s_j, b): such a row then puts all its mass on the sink "
                "and its weights are 0.", _shift_without_sink),
        Mistake("no_max_shift", "You exponentiated the scores and the sink directly: e^{1000} "
                "overflows to inf and inf / inf is NaN. Subtract m = max(max_j s_j, b) from the "
                "scores and the sink first.", _no_max_shift),
    ),
    probes=(
        choice_probe("sink_term", _with_term, {k: k for k in _SINK_TERMS}, _SINK_TERMS,
                     "The sink's logit b_h enters the normaliser once, exponentiated: p_ij = "
                     "e^{s_ij} / (e^{b_h} + Σ_j e^{s_ij}), with b_h = sinks[h] for head h "
                     "(dim -3 of scores).", _SINK_SECTION,
                     ids={"none": "sink_added_to_logits", "b": "sink_not_exponentiated"}),
    ),
)

# ------------------------------------------------------------------------- gated_attention

_GATE_SECTION = "14_open_models: Gated attention: a gate on each head's output"


def _gate_cases(gen: torch.Generator) -> list[Case]:
    def case(name, B, L, H, E, dtype=torch.float64, note=""):
        D = H * E                                                    # as in most layers
        r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
        return Case(name, (r(B, L, D), r(B, L, D), r(D, D) / D ** 0.5, r(D, D) / D ** 0.5),
                    note=note)

    return [case("2 heads of width 3", 2, 4, 2, 3, note="D = H·E = 6"),
            case("float32, 4 heads", 1, 5, 4, 2, torch.float32, note="D = 8"),
            case("one token", 3, 1, 2, 4, note="L = 1"),
            case("wide heads", 1, 3, 1, 8, note="one head of width 8")]


def gated_attention(attn, x, w_gate, w_out):
    """(attn ⊙ σ(x W_gᵀ)) W_oᵀ: the gate, from the input, on each head's output, before W_o."""
    gate = torch.sigmoid(x @ w_gate.T)                       # (B, L, H·E), one per feature
    return (attn * gate) @ w_out.T


def _gate_oracle(attn, x, w_gate, w_out):
    return _gate(attn, x @ w_gate.T) @ w_out.T


def _gate_rule(rule, attn, x, w_gate, w_out):
    where, how = rule
    source = attn if where == "from_attn" else x
    z = source @ w_gate.T
    act = {"sigmoid": torch.sigmoid, "silu": F.silu, "none": lambda t: t, "tanh": torch.tanh,
           "1-sigmoid": lambda t: 1 - torch.sigmoid(t)}[how]
    if where == "after":
        return (attn @ w_out.T) * act(z)
    if where == "added":
        return (attn + act(z)) @ w_out.T
    if where == "act_first":
        return (attn * (act(x) @ w_gate.T)) @ w_out.T
    return (attn * act(z)) @ w_out.T


_GATE_WHERE = {"before": "the gate applied before W_o", "after": "the gate applied after W_o",
               "from_attn": "the gate computed from the attention output, not from x",
               "added": "the gate added to the heads' output instead of multiplying it",
               "act_first": "the activation applied to x before the gate's projection, "
                            "act(x) W_gᵀ"}
_GATE_HOW = {"sigmoid": "σ", "silu": "SiLU", "none": "no activation", "tanh": "tanh",
             "1-sigmoid": "1 − σ"}
_GATE_CHOICES = {f"{w}/{h}": (w, h) for w in _GATE_WHERE for h in _GATE_HOW
                 if (w, h) != ("before", "sigmoid")}

GATED_ATTENTION = Exercise(
    id="gated_attention",
    chapter="14_open_models",
    title="Gate each head's output",
    signature="gated_attention(attn (B, L, H·E), x (B, L, D), w_gate (H·E, D), w_out (D, H·E)) "
              "-> (B, L, D)",
    params=("attn", "x", "w_gate", "w_out"),
    cases=_gate_cases,
    oracle=_gate_oracle,
    solution=gated_attention,
    hints=(
        "The gate's logits come from the layer's input x, like the queries: z = x W_gᵀ, one per "
        "head and feature (H·E of them). It multiplies the heads' outputs before they are "
        "mixed by the output projection W_o.",
        "σ(z) is in (0, 1): a head can close (output ~0) where it has nothing to add. The "
        "weights are stored as nn.Linear stores them, (out, in): multiply by their transpose.",
        "gate = sigmoid(x @ w_gate.T); return (attn * gate) @ w_out.T.",
    ),
    mistakes=(
        Mistake("gate_after_projection", "You gated after the output projection: W_o first "
                "mixes the heads, so a gate there cannot silence one head. Gate each head's "
                "output, attn ⊙ σ(x W_gᵀ), then project with W_o.",
                lambda *a: _gate_rule(("after", "sigmoid"), *a)),
        Mistake("gate_from_attention", "Your gate is computed from the attention output: the "
                "gate's logits come from the layer's input x (the same input as the queries), "
                "z = x W_gᵀ.", lambda *a: _gate_rule(("from_attn", "sigmoid"), *a)),
        Mistake("silu_gate", "Your gate is SiLU(z), the Gated DeltaNet's output gate: the "
                "gated attention's is a sigmoid, σ(z) in (0, 1).",
                lambda *a: _gate_rule(("before", "silu"), *a)),
        Mistake("no_sigmoid", "You multiplied by the gate's logits z themselves: squash them "
                "with σ(z) so that the gate is in (0, 1).",
                lambda *a: _gate_rule(("before", "none"), *a)),
    ),
    probes=(
        choice_probe("gate_rule", _gate_rule, _GATE_CHOICES,
                     {k: f"a gated output with {_GATE_WHERE[w]} and {_GATE_HOW[h]} as its "
                      "activation" for k, (w, h) in _GATE_CHOICES.items()},
                     "The gate σ(x W_gᵀ), from the layer's input, multiplies each head's output "
                     "feature by feature before the output projection: (attn ⊙ σ(x W_gᵀ)) "
                     "W_oᵀ.", _GATE_SECTION,
                     ids={"after/sigmoid": "gate_after_projection",
                          "from_attn/sigmoid": "gate_from_attention",
                          "before/silu": "silu_gate", "before/none": "no_sigmoid"}),
    ),
)

# ------------------------------------------------------------------------- gated_delta_step

_GDR_SECTION = "14_open_models: The gated delta rule: decay, erase, write"


def _gdr_cases(gen: torch.Generator) -> list[Case]:
    def case(name, B, H, E, Ev, dtype=torch.float64, decay=1.0, beta=None, zero=False,
             note=""):
        r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
        state = torch.zeros(B, H, E, Ev, dtype=dtype) if zero else r(B, H, E, Ev)
        k = F.normalize(r(B, H, E), dim=-1)
        g = -decay * torch.rand(B, H, generator=gen, dtype=dtype)
        b = torch.rand(B, H, generator=gen, dtype=dtype) if beta is None else \
            torch.full((B, H), beta, dtype=dtype)
        return Case(name, (state, r(B, H, E), k, r(B, H, Ev), g, b), note=note)

    return [case("two heads", 1, 2, 4, 3, note="E = 4, Ev = 3"),
            case("float32, batched", 2, 3, 5, 4, torch.float32),
            case("strong decay", 1, 2, 3, 3, decay=4.0, note="g down to -4: α down to 0.02"),
            case("beta = 1", 2, 1, 4, 2, beta=1.0, note="the value stored under k is replaced"),
            case("empty state", 1, 2, 4, 4, zero=True, note="the first token: S = 0")]


def gated_delta_step(state, q, k, v, g, beta):
    """Decay, erase what is stored under k, write v, then read with q."""
    state = state * torch.exp(g)[..., None, None]                    # decay: α = e^g
    stored = (state * k[..., None]).sum(dim=-2)                      # Sᵀk (B, H, Ev)
    delta = beta[..., None] * (v - stored)                           # erase and write
    state = state + k[..., None] * delta[..., None, :]
    out = (state * q[..., None]).sum(dim=-2)                         # Sᵀq (B, H, Ev)
    return out, state


def _gdr_oracle(state, q, k, v, g, beta):
    return _gdr_step(state, q, k, v, g, beta, 1.0)


def _gdr_order(order, state, q, k, v, g, beta):
    """One step with the order or form named by ``order``."""
    alpha = torch.exp(g)[..., None, None] if order != "g_as_factor" else g[..., None, None]
    if order == "no_beta":
        beta = torch.ones_like(beta)
    elif order == "one_minus_beta":
        beta = 1 - beta

    def update(s):
        stored = (s * k[..., None]).sum(dim=-2)
        return s + k[..., None] * (beta[..., None] * (v - stored))[..., None, :]

    if order == "decay_after_write":
        new = alpha * update(state)
    elif order == "erase_before_decay":
        stored = (state * k[..., None]).sum(dim=-2)
        new = alpha * state + k[..., None] * (beta[..., None] * (v - stored))[..., None, :]
    elif order == "no_erase":
        new = alpha * state + k[..., None] * (beta[..., None] * v)[..., None, :]
    else:                                                             # right order or g_as_factor
        new = update(alpha * state)
    read = state if order == "read_before_update" else new
    if order == "read_before_update":
        new = update(alpha * state)
    return (read * q[..., None]).sum(dim=-2), new


_GDR_SHOWS = {
    "decay_after_write": "a step that decays after the write, S' = α(S + βk(v − Sᵀk)ᵀ)",
    "erase_before_decay": "a step that erases with the undecayed state, S' = αS + βk(v − "
                          "Sᵀk)ᵀ",
    "no_erase": "a step that writes without erasing, S' = αS + βkvᵀ (decayed linear attention)",
    "read_before_update": "a step that reads with q before updating the state",
    "g_as_factor": "a step that multiplies the state by g itself, not α = e^g",
    "no_beta": "a step that erases and writes in full, as if β = 1",
    "one_minus_beta": "a step that erases and writes with strength 1 − β instead of β",
}

GATED_DELTA_STEP = Exercise(
    id="gated_delta_step",
    chapter="14_open_models",
    title="One step of the gated delta rule",
    signature="gated_delta_step(state (B, H, E, Ev), q (B, H, E), k (B, H, E), v (B, H, Ev), "
              "g (B, H), beta (B, H)) -> (out (B, H, Ev), state (B, H, E, Ev))",
    params=("state", "q", "k", "v", "g", "beta"),
    cases=_gdr_cases,
    oracle=_gdr_oracle,
    solution=gated_delta_step,
    output_names=("out", "state"),
    hints=(
        "Three moves, in this order: decay the state, S ← αS with α = e^g; erase what the "
        "decayed state stores under k and write v in its place, S ← S + βk(v − Sᵀk)ᵀ; then "
        "read the output with the updated state, out = Sᵀq.",
        "Sᵀk for a state (B, H, E, Ev) and a key (B, H, E) is (state * k[..., None]).sum(-2), "
        "shape (B, H, Ev); the rank-1 update k δᵀ is k[..., None] * δ[..., None, :].",
        "state = state * exp(g)[..., None, None]; stored = (state * k[..., None]).sum(-2); "
        "state = state + k[..., None] * (beta[..., None] * (v - stored))[..., None, :]; out = "
        "(state * q[..., None]).sum(-2).",
    ),
    mistakes=tuple(Mistake(
        name, f"Your output equals {shows}. " + (
            "The gated delta rule decays first, then erases and writes with the decayed "
            "state: S' = αS + βk(v − αSᵀk)ᵀ, out = S'ᵀq."),
        lambda *a, name=name: _gdr_order(name, *a)) for name, shows in _GDR_SHOWS.items()),
    probes=(
        choice_probe("step_order", _gdr_order, {k: k for k in _GDR_SHOWS}, _GDR_SHOWS,
                     "Decay (S ← e^g S), then erase and write with the decayed state (S ← S + "
                     "βk(v − Sᵀk)ᵀ), then read out = Sᵀq with the new state.", _GDR_SECTION,
                     ids={k: k for k in _GDR_SHOWS}),
    ),
)
