"""A Python traceback in a job's log, folded to one line for whatever shows job lines.

Why: the log on the box keeps the whole traceback (an engineer debugging a crashed stage wants
every frame), but the operator's terminal, the TUI log and the session file get one line that
says what was raised where and points at the log bytes holding the full text. A crashing stage
already reports its error once, as its error record (with the advisor's fix when known): a
block followed by such a record names the exception type and the raising frame but not the
message again; any other (a vLLM engine's, a library's) carries the message, shortened
to the sentences that matter (`readable_message`).

Folded where job lines become events (remote/jobs/client.py), so `console run`, `console jobs tail`, the
TUI and replays all see the same line. The lines a tail yields to code (stage records) stay raw.

A block starts at a line holding ``Traceback (most recent call last):`` (after any prefix, such
as vLLM's ``(EngineCore pid=7) ERROR ... [core.py:1] ``); it goes on while lines carry the same
prefix and are indented (frames, source, carets), blank, or chain markers; the exception line
(the first one not indented) ends it, unless a chained traceback follows. A stage record line
(``@@eagle3 ``) is never swallowed: it ends a block as is.
"""

from __future__ import annotations

import re

MARK = "Traceback (most recent call last):"
MARK_BYTES = MARK.encode()
_CHAIN = ("During handling of the above exception, another exception occurred:",
          "The above exception was the direct cause of the following exception:")
_RECORD = "@@eagle3 "
_ERROR_RECORD = '"type":"error"'
MESSAGE_CHARS = 400
_FRAME = re.compile(r'\s*File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"([A-Za-z_][\w.]*)(?::|\s*$)")  # "ValueError: ..." / "pkg.mod.Err: ..."


# Library boilerplate that says nothing about this error: pydantic's pointer to its docs and the
# dump of the arguments it validated (vLLM's config errors carry both).
_NOISE = (re.compile(r"\s*For further information visit https?://errors\.pydantic\.dev/\S*"),
          re.compile(r"\s*\[type=\w+, input_value=.*?, input_type=\w+\]", re.S))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[`'\"])")
_CUT = " […] "


def readable_message(message: str, limit: int = MESSAGE_CHARS) -> str:
    """An exception message as one line of at most about `limit` characters, keeping what an
    operator acts on.

    Why not the first `limit` characters: a library's message usually says what failed first and
    why (with the numbers) after it, and a plain cut lands in the middle of that sentence; vLLM's
    config errors also end in pydantic boilerplate, so a plain head + tail keeps a docs URL
    instead. So: boilerplate dropped, whitespace collapsed, then whole sentences from the start
    and the message's own last sentence, with the middle left out. Where sentences cannot do it
    (one endless sentence, a list of 300 names), the head and the tail by characters."""
    one = message
    for noise in _NOISE:
        one = noise.sub("", one)
    one = " ".join(one.split())
    if len(one) <= limit:
        return one
    sentences = _SENTENCE_END.split(one)
    last = sentences[-1]
    if len(sentences) > 1 and len(last) <= limit // 2:
        room = limit - len(_CUT) - len(last)
        head = ""
        for sentence in sentences[:-1]:
            joined = f"{head} {sentence}" if head else sentence
            if len(joined) > room:
                break
            head = joined
        if not head:  # the first sentence alone is too long: its start, by characters
            head = sentences[0][:room].rstrip()
        return f"{head}{_CUT}{last}"
    keep = (limit - len(_CUT)) // 2
    return f"{one[:keep]}{_CUT}{one[-keep:]}"


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


class TracebackFolder:
    """Feed a job's lines in order (text, log offset just after it); get back the lines to show,
    each traceback replaced by one line. Lines of an unfinished block are held until it ends."""

    def __init__(self, log_path: str, offset: int = 0) -> None:
        self.log_path = log_path
        self._prev_end = offset  # log offset where the next line begins
        self._held: list[tuple[str, int]] = []
        self._prefix = ""
        self._start = 0
        self._frame: tuple[str, str, str] | None = None
        self._exc = ""
        self._message: list[str] = []
        self._after_exc = False  # the exception line was seen; only a chain continues the block

    @property
    def active(self) -> bool:
        return bool(self._held)

    def feed(self, texts: list[str], ends: list[int]) -> tuple[list[str], list[int]]:
        out_t: list[str] = []
        out_e: list[int] = []
        for text, end in zip(texts, ends, strict=True):
            start, self._prev_end = self._prev_end, end
            if self._held and self._continues(text):
                self._held.append((text, end))
                continue
            if self._held:
                self._close(out_t, out_e, text)
            cut = text.find(MARK)
            if cut >= 0 and not text.startswith(_RECORD):
                self._open(text, end, cut, start)
                continue
            out_t.append(text)
            out_e.append(end)
        return out_t, out_e

    def passed(self, end: int) -> None:
        """Lines up to `end` went by unfed (a block with no traceback in it)."""
        self._prev_end = end

    def flush(self) -> tuple[list[str], list[int]]:
        """The held block, folded (the log ended or the tail stops)."""
        out_t: list[str] = []
        out_e: list[int] = []
        if self._held:
            self._close(out_t, out_e)
        return out_t, out_e

    def _open(self, text: str, end: int, cut: int, start: int) -> None:
        self._held = [(text, end)]
        self._prefix = text[:cut]
        self._start = start
        self._frame = None
        self._exc = ""
        self._message = []
        self._after_exc = False

    def _continues(self, text: str) -> bool:
        if text.startswith(_RECORD) or not text.startswith(self._prefix):
            return False
        rest = text[len(self._prefix):]
        if rest.startswith(MARK) or rest.strip() in _CHAIN:
            self._after_exc = False  # a chained traceback follows: the block goes on
            self._frame, self._exc, self._message = None, "", []
            return True
        if not rest.strip():
            return True  # the blank line before a chain marker (dropped with the block)
        if self._after_exc:
            # An indented line goes on the message (pipeline/tracebacks.py indents a multi-line
            # message); anything else is the job's next output.
            if rest[:1].isspace():
                self._message.append(rest.strip())
                return True
            return False
        if rest[:1].isspace():
            m = _FRAME.match(rest)
            if m:
                self._frame = (m.group(1), m.group(2), m.group(3))
            return True
        m = _EXC.match(rest)
        self._exc = m.group(1) if m else rest.split(":", 1)[0][:60]
        self._message = [rest[m.end():].strip()] if m else [rest.strip()]
        self._after_exc = True
        return True

    def _close(self, out_t: list[str], out_e: list[int], following: str = "") -> None:
        held = self._held
        # Trailing blank lines were held for a chain that never came: show them as they were.
        tail: list[tuple[str, int]] = []
        while len(held) > 1 and not held[-1][0][len(self._prefix):].strip():
            tail.insert(0, held.pop())
        where = ""
        if self._frame is not None:
            path, line, fn = self._frame
            where = f" at {_short_path(path)}:{line} in {fn}"
        what = self._exc or "an exception (incomplete)"
        said = ""
        if not (following.startswith(_RECORD) and _ERROR_RECORD in following):
            message = readable_message(" ".join(part for part in self._message if part))
            said = f": {message}" if message else ""
        out_t.append(f"{self._prefix}[traceback folded: {len(held)} lines, {what} raised{where};"
                     f" full text in {self.log_path} from byte {self._start}]{said}")
        out_e.append(held[-1][1])
        for text, end in tail:
            out_t.append(text)
            out_e.append(end)
        self._held = []

