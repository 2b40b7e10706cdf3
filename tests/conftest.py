"""Session-wide test settings.

Every check a test makes is recorded in a throw-away progress record, never in the learner's own
(``~/.course_lib``): tests that look at the record set ``COURSE_LIB_PROGRESS`` themselves.
"""

import os
import tempfile

os.environ["COURSE_LIB_PROGRESS"] = os.path.join(
    tempfile.mkdtemp(prefix="course-lib-test-progress-"), "progress")
