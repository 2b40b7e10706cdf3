"""The capstone: a tiny transformer from course parts, trained on CPU, and probes of its heads.

- :mod:`.tasks`: synthetic data (a negation task and a repeated-sequence induction task);
- :mod:`.model`: :class:`~.model.TinyTransformer`, built on
  :class:`course_lib.multihead.MultiHeadAttention`;
- :mod:`.train`: a plain PyTorch training loop and the two seeded recipes the chapter runs;
- :mod:`.probes`: previous-token and induction scores, attention mass on chosen tokens.
"""

from . import evaluate, model, probes, tasks, train

__all__ = ["evaluate", "model", "probes", "tasks", "train"]
