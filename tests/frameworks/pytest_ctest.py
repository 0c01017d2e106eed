"""pytest_ctest.py ARGS... — run pytest and map its result onto ctest's
conventions: 0 when at least one test passed and none failed, 77 when every
test was skipped, otherwise pytest's own non-zero status (1 failures,
2 interrupted, 3 internal error, 4 usage, 5 nothing collected)."""
import sys

import pytest


class Outcomes:
    def __init__(self):
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped += 1
        elif report.passed and report.when == "call":
            self.passed += 1


def main(args):
    outcomes = Outcomes()
    rc = pytest.main(["-p", "no:cacheprovider", "-v", "-rs", *args], plugins=[outcomes])
    if rc == 0 and outcomes.passed == 0 and outcomes.skipped > 0:
        return 77
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
