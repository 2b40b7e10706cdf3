"""The grading kernel: an IPython kernel fenced in before the learner's first cell.

Started by ``job.py`` through a kernel spec (``python -m course_lib.toolkit.grading.kernel -f
CONNECTION_FILE``). The fence's folders and memory cap come from ``COURSE_LIB_GRADING_FENCE``
(JSON: ``{"writable": [...], "hidden": [...], "memory": bytes}``), which the job sets; the
grading seed is never in this process.
"""

from __future__ import annotations

import json
import os


def main() -> None:
    rules = json.loads(os.environ.pop("COURSE_LIB_GRADING_FENCE", "{}"))
    from course_lib.toolkit.grading import sandbox

    sandbox.install(rules.get("writable", []), rules.get("hidden", []), rules.get("memory"),
                    rules.get("visible", []))
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


if __name__ == "__main__":
    main()
