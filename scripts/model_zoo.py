"""Print the model table made from the shipped models' cards, or write it into the README.

    python scripts/model_zoo.py                  # print the table
    python scripts/model_zoo.py --write          # rewrite it between README.md's markers

The table's rows come from the cards' front matter (``seg/zoo/<name>.md``), which
``scripts/ship_model.py`` writes from the run's ``metrics.json`` figures and its timing;
``tests/test_zoo.py`` fails when README.md's table differs from this script's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seg.cli import user_errors
from seg.zoo.table import shipped_cards, with_table, zoo_table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README's table")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    args = parser.parse_args(argv)
    with user_errors("model_zoo"):
        table = zoo_table(shipped_cards(), args.readme.parent)
        if not args.write:
            print(table)
            return 0
        args.readme.write_text(with_table(args.readme.read_text(), table, str(args.readme)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
