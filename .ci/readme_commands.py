"""Print one of README.md's two set-up commands, as written there, for .ci/run to execute.

The README promises exactly two commands near the top (in "## Set up and run": the first
installs phantom and runs a simulation, the second runs the tests); CI runs those very lines
so that they cannot drift from what users copy.

    python3 .ci/readme_commands.py 1    # install + quick start
    python3 .ci/readme_commands.py 2    # the test command
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Set up and run"


def setup_commands(text: str) -> list[str]:
    """The ```bash blocks of the set-up section, in order."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else len(text)]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def main() -> None:
    commands = setup_commands(README.read_text())
    if len(commands) != 2:
        raise SystemExit(f"readme_commands: README.md's '{SECTION}' section holds {len(commands)} "
                         "```bash blocks; it must hold exactly two (install and run, test)")
    which = int(sys.argv[1])
    print(commands[which - 1])


if __name__ == "__main__":
    main()
