"""The grading kernel: an IPython kernel started inside the grading sandbox.

Started by ``job.py`` as ``bwrap ... python -m course_lib.toolkit.grading.kernel -f FILE`` (see
``sandbox.py``). Before IPython loads and before the learner's first cell, it caps this process
(address space, file size: ``COURSE_LIB_GRADING_LIMITS``, JSON ``{"memory": bytes, "disk":
bytes}``) and seeds Python's ``random``, NumPy and torch with 0, so two byte-identical notebooks
compute the same things. Nothing of the grader is in this process: no case, no answer, no seed.
"""

from __future__ import annotations

import json
import os


def main() -> None:
    limits = json.loads(os.environ.pop("COURSE_LIB_GRADING_LIMITS", "{}"))
    from course_lib.toolkit.grading.sandbox import set_limits

    if limits:
        set_limits(int(limits["memory"]), int(limits["disk"]))
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


if __name__ == "__main__":
    main()
