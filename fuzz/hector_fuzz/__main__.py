"""``python3 -m hector_fuzz``: the fuzzer's command line (:func:`hector_fuzz.cli.main`)."""

import sys

from hector_fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
