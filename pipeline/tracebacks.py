"""A crashed stage's traceback as the job log keeps it: Python's own text, with the lines of a
multi-line exception message (and its notes) indented under the exception line.

Why: the log keeps the whole traceback for the engineer, and the console folds it to one line
(remote/spine/traceback_fold.py). A Python traceback's end is only certain when the message is one
line; transformers' messages often span several unindented lines (its "requires the protobuf
library" ImportError starts with a newline), which would otherwise leak to the operator's
terminal line by line after the fold. Indented, they read the same in the log and stay inside
the folded block.
"""

from __future__ import annotations

import sys
import traceback
from typing import TextIO

INDENT = "    "


def format_for_log(exc: BaseException) -> str:
    out: list[str] = []
    expect_exc = True  # the next non-frame chunk is an exception line (not a note)
    for chunk in traceback.TracebackException.from_exception(exc).format():
        if chunk.startswith("Traceback (most recent call last):"):
            expect_exc = True
            out.append(chunk)
        elif chunk[:1].isspace():  # frames, carets, chain markers ("\nDuring handling ...")
            out.append(chunk)
        else:  # the exception line and its message, or a note after it
            lines = chunk.splitlines() or [""]
            head, rest = (lines[:1], lines[1:]) if expect_exc else ([], lines)
            expect_exc = False
            body = head + [INDENT + line if line.strip() else line for line in rest]
            out.append("\n".join(body) + "\n")
    return "".join(out)


def print_for_log(exc: BaseException, file: TextIO | None = None) -> None:
    stream = file or sys.stderr
    stream.write(format_for_log(exc))
    stream.flush()
