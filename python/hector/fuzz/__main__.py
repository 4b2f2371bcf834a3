"""``python3 -m hector.fuzz``: the fuzzer's command line (:func:`hector.fuzz.cli.main`)."""

import sys

from hector.fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
