"""The generator an exercise's cases are drawn from, keeping every bit of the seed.

``torch.Generator().manual_seed(s)`` seeds the CPU Mersenne Twister from the low 32 bits of ``s``:
a grading seed of 62 secret bits would have 32 effective ones, and a case's inputs shown in a
learner's feedback would let a 2^32 search recover the seed of every case. So a seed outside
``[0, 2^32)`` fills the whole 624-word state from SHA-256 of the seed instead (counter mode), and
finding it means searching all of its bits. Seeds below 2^32 (a learner's checks, the tests, the
statistical sweeps) seed it exactly as ``manual_seed`` does, so their cases are unchanged.
"""

from __future__ import annotations

import hashlib
import struct

import torch

# torch's CPU generator state (CPUGeneratorImplStateLegacy): the initial seed (u64), left (i32),
# seeded (i32), next (u64), the Mersenne Twister's 624 words (each in a u64), then the normal
# samples' cache; 5056 bytes in all.
_WORDS = 624
_HEADER = struct.Struct("<QiiQ")
_STATE_BYTES = 5056


def _words(seed: int) -> list[int]:
    """624 32-bit words from SHA-256(seed || counter)."""
    key = seed.to_bytes(16, "little", signed=True)
    out: list[int] = []
    counter = 0
    while len(out) < _WORDS:
        block = hashlib.sha256(key + counter.to_bytes(4, "little")).digest()
        out.extend(struct.unpack("<8I", block))
        counter += 1
    return out[:_WORDS]


def case_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for ``seed``, with all of its bits in the state.

    ``0 <= seed < 2**32``: ``torch.Generator().manual_seed(seed)``, unchanged. Any other int
    (up to 127 bits with its sign): the 624-word state from SHA-256, ``initial_seed()`` the seed's
    low 64 bits.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    gen = torch.Generator()
    if 0 <= seed < 2 ** 32:
        return gen.manual_seed(seed)
    if not -(2 ** 127) <= seed < 2 ** 127:
        raise ValueError(f"seed must fit in 127 bits and a sign, got {seed.bit_length()} bits")
    gen.manual_seed(seed & 0xFFFFFFFF)                 # valid normal-sample caches, then the words
    state = bytearray(gen.get_state().numpy().tobytes())
    if len(state) != _STATE_BYTES:                     # a torch with another layout: say so
        raise RuntimeError(f"torch's CPU generator state has {len(state)} bytes, expected "
                           f"{_STATE_BYTES}: course_lib's case generator needs updating")
    # left = 1: the first draw regenerates (twists) the whole state before using it.
    _HEADER.pack_into(state, 0, seed & (2 ** 64 - 1), 1, 1, 0)
    struct.pack_into(f"<{_WORDS}Q", state, _HEADER.size, *_words(seed))
    gen.set_state(torch.frombuffer(state, dtype=torch.uint8).clone())
    return gen
