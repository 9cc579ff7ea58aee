"""Well-known secret shapes taken out of what the console records and shows (issue 33 item 3).

An operator pastes `-H 'Authorization: Bearer hf_…'`, `https://user:pw@host/…` or
`HF_TOKEN=hf_…` into a command's argv, and a box's log echoes its environment: without this the
session file (kept, shared, attached to a bug report) and the terminal held the secret in
clear. The event bus (remote/spine/bus.py) passes every event through one `Redactor` before
any consumer — recorder, printer, TUI — sees it, so nothing downstream can forget; the command
itself still runs with the real argv (the box's argv.json keeps it, mode 0600, readable by the
box's owner only). `--no-redact` turns it off for an operator who wants the secrets recorded.

Shapes (each replaced by its kind's fixed prefix and `***`, so a reader sees that something
was there and what):
- Hugging Face tokens: `hf_` then 20+ letters/digits (the hub's user and org tokens);
- HTTP bearer credentials: `Bearer <token>` (RFC 6750 §2.1, case-insensitive scheme);
- URL userinfo: `scheme://user[:password]@` (RFC 3986 §3.2.1), the user too (often a token);
- assignments to a name ending in `_TOKEN`, `_KEY`, `_SECRET` or `_PASSWORD` (`HF_TOKEN=…`,
  `--aws_secret_access_key=…`, `OPENAI_API_KEY=…`), any case;
- command-line flags that take a secret: `--password hunter2`, `--hf-token=…`, `--api-key …`,
  `--client-secret …` (the flag stays); in an argv list the element after such a flag
  (`["--password", "hunter2"]`, issue 41);
- OpenAI-style keys: `sk-` then 20+ letters, digits, `-` or `_` (`sk-proj-…`, bare `sk-…`);
- JSON string values of the keys `password`, `passwd`, `token`, `api_key`/`apikey`/`api-key`,
  `secret` and any key ending in one of them (`"access_token": "…"`), and the same keys in a
  payload's own dicts;
- HTTP Basic credentials: `Basic <base64>` (RFC 7617), as Bearer;
- API-key headers: `x-api-key: …` (and any `…-api-key:` header), any case.
Added by issue 48 row 7 (each leaked in a session, `replay --print`/`--json`, a report and
`jobs list --json`):
- an assignment's value in double or single quotes (`MY_API_KEY="…"`, `API_KEY='…'`), and
  names that end in PASSWORD/PASSWD without an underscore (`PGPASSWORD=…`);
- a URL password holding `/` or `@` (`https://user:pa/ss@host`, `https://u:p@ss@host`): the
  userinfo runs to the last `@` before the end of the URL, unless what precedes it is a host
  and port (`http://h:8000/p?a@b` is no userinfo);
- any other `Authorization:` scheme's credentials (`Authorization: Token …`), the scheme kept;
- curl's `-u user:password` / `--user user:password` (the user stays), in text and in an argv;
- GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` then 20+ letters/digits, and
  `github_pat_…`) and AWS access key ids (`AKIA` / `ASIA` then 16 capitals/digits).

The hot path is a job's log block (thousands of lines a second): a block is joined and tested
for a few literals, then searched once per shape it may hold, and only a block with a hit is
rewritten line by line; an event's payload is looked at through its JSON (one C call) first
(benchmarks/redact_cost.py measures the cost against no redaction).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import msgspec

MASK = "***"
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_VALUE = r"[^\s'\"&;]+"
# An assignment's value: bare, or quoted ("…" with escapes, or '…').
_ASSIGNED = (r"(?:\\\"[^\"\n]*?\\\"|\\'[^'\n]*?\\'|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|"
             + _VALUE + ")")  # \"…\" and \'…\': the same, inside a quoted string

# Each shape starts with a literal, so the regex engine finds candidates at memchr speed (an
# alternation, or a leading class or word boundary, made a clean log block ~30x slower to scan:
# benchmarks/redact_cost.py); the boundary before it is checked in `_mask` instead.
_RX: dict[str, re.Pattern[str]] = {
    "bearer": re.compile(r"(?:earer|EARER)[ \t]+[A-Za-z0-9._~+/=-]{8,}"),
    "url_userinfo": re.compile(r"://[^\s'\"<>]+@"),
    "assignment": re.compile(r"_(?:TOKEN|Token|token|KEY|Key|key|SECRET|Secret|secret|PASSWORD|"
                             r"Password|password)=" + _ASSIGNED),
    # PGPASSWORD=…: a name ending in PASSWORD/PASSWD with no underscore (looked for only where
    # its needle is: an alternation at the start would cost every block a slow scan).
    "password_assignment": re.compile(r"(?:PASSW(?:ORD|D)|[Pp]assw(?:ord|d))=" + _ASSIGNED),
    "curl_user": re.compile(r"-(?:u|-user)(?:[ \t]+|=)[^\s'\":]+:[^\s'\"]+"),
    "github_token": re.compile(r"g(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})"),
    "aws_key": re.compile(r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    "basic": re.compile(r"(?:asic|ASIC)[ \t]+[A-Za-z0-9+/]{4,}={0,2}"),
    "authorization": re.compile(r"(?:uthorization|UTHORIZATION):[ \t]*[A-Za-z][A-Za-z0-9_-]*"
                                r"[ \t]+[^\s'\"]+"),
    "api_key_header": re.compile(r"(?:[Aa]pi|API)-(?:[Kk]ey|KEY)[ \t]*:[ \t]*[^\s'\"]+"),
    "openai_key": re.compile(r"sk-[A-Za-z0-9_-]{20,}"),
    "hf_token": re.compile(r"hf_[A-Za-z0-9]{20,}"),  # inside a shape above, that one wins
    # After the token shapes: a value they masked already (`--token hf_***`) is left as it is.
    "json_secret": re.compile(r"(?:[Pp]ass(?:word|wd)|PASS(?:WORD|WD)|[Tt]oken|TOKEN|"
                              r"[Aa]pi[_-]?[Kk]ey|API[_-]?KEY|[Ss]ecret|SECRET)\\?\"[ \t]*:[ \t]*"
                              r"(?:\\\"[^\"\\\n]+\\\"|\"(?:[^\"\\\n]|\\.)+\")"),
    "secret_flag": re.compile(r"--(?:[A-Za-z0-9]+[-_])*(?:[Pp]ass(?:word|wd)|PASS(?:WORD|WD)|"
                              r"[Tt]oken|TOKEN|[Aa]pi[-_][Kk]ey|API[-_]KEY|[Ss]ecret|SECRET)"
                              r"(?:=|[ \t]+)(?!-)" + _VALUE),
}
# Names (a flag's, a JSON key's, a payload key's) whose value is a secret. A token is one only
# under a credential's name: `eos_token`, `pad_token`, a tokenizer's special tokens, are not.
_SECRET_ENDS = ("password", "passwd", "secret", "api_key", "apikey")
_TOKEN_NAMES = ("token", "access_token", "auth_token", "api_token", "hf_token", "hub_token",
                "refresh_token", "id_token", "session_token", "bearer_token", "github_token")


def secret_name(name: str) -> bool:
    """`--password`, `hf-token`, `"client_secret"`, `api_key` -- not `--max-tokens`, `eos_token`."""
    n = name.lower().replace("-", "_").strip("_")
    if n.endswith(_SECRET_ENDS):
        return True
    return n in _TOKEN_NAMES or n.endswith(tuple("_" + t for t in _TOKEN_NAMES[1:]))
# Literals one of which any secret's text (and its JSON form) holds: a payload or block without
# any of them is passed on untouched after a few substring tests.
_NEEDLES: dict[str, tuple[str, ...]] = {
    "bearer": ("earer", "EARER"), "url_userinfo": ("://",), "assignment": ("=",),
    # One needle a kind where one covers it (each needle is a scan of every block).
    "password_assignment": ("ASSW", "assw"),
    "curl_user": ("-u",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "aws_key": ("AKIA", "ASIA"),
    "basic": ("asic", "ASIC"), "authorization": ("uthorization:", "UTHORIZATION:"),
    "api_key_header": ("pi-", "PI-"),
    "openai_key": ("sk-",), "hf_token": ("hf_",),
    "json_secret": tuple(f"{end}{q}" for end in ("ord", "ORD", "wd", "WD", "oken", "OKEN",
                                                 "ey", "EY", "ecret", "ECRET")
                         for q in ('"', '\\"')),  # and JSON inside a quoted string
    "secret_flag": ("--",),
}
assert list(_NEEDLES) == list(_RX)  # the order shapes are applied in
# Looked for only where a one-character test (memchr) found what each of their texts holds:
# most log lines hold no quote, so the twenty JSON needles cost one scan there.
_GUARD = {"json_secret": '"'}

# A payload is looked at as JSON bytes: the text needles but the JSON ones, which matter there
# only in a string that holds JSON (its quotes escaped: a backslash, one memchr, first) or as a
# payload's own key (`"password":`, lower case: the keys are the producers' names).
_BYTE_NEEDLES = tuple(n.encode() for k, ns in _NEEDLES.items() if k != "json_secret" for n in ns)
_BYTE_JSON_NEEDLES = tuple(n.encode() for n in _NEEDLES["json_secret"] if "\\" in n)
_BYTE_KEY_NEEDLES = (b'password"', b'passwd"', b'token"', b'key"', b'secret"')


def _mask(kind: str, m: re.Match[str]) -> str | None:
    """The masked text of a match, or None when it is not a secret after all."""
    text, before = m.group(0), m.string[m.start() - 1] if m.start() else ""
    if kind == "hf_token":
        return None if before in _WORD else "hf_" + MASK
    if kind in ("bearer", "basic"):  # the scheme's first letter is the char before the literal;
        # what Basic holds is base64 of `user:password`
        if before not in ("B", "b") or (m.start() > 1 and m.string[m.start() - 2] in _WORD) \
                or (kind == "basic" and not _is_basic_credential(text.split(None, 1)[1])):
            return None
        return text.split(None, 1)[0] + " " + MASK
    if kind == "url_userinfo":
        return None if before not in _WORD else _userinfo(text)
    if kind == "authorization":  # the scheme stays; Bearer and Basic were masked already
        head, cred = text.rsplit(None, 1)
        return None if MASK in cred else head + " " + MASK
    if kind == "curl_user":
        if before in _WORD or before == "-":
            return None
        user, _, pw = text.partition(":")
        return None if MASK in pw else user + ":" + MASK
    if kind in ("github_token", "aws_key"):
        if before in _WORD:
            return None
        return (text[:11] if text.startswith("github_pat_") else text[:4]) + MASK
    if kind == "api_key_header":  # the header's name and spacing stay
        colon = text.index(":") + 1
        return text[:colon] + text[colon:][: len(text[colon:]) - len(text[colon:].lstrip())] + MASK
    if MASK in text:
        return None
    if kind == "json_secret":  # the key stays, the value's quotes too (escaped: `\"`)
        start = m.start()
        while start and (m.string[start - 1].isalnum() or m.string[start - 1] in "_-"):
            start -= 1
        stem = text[: min(i for i in (text.find('"'), text.find("\\")) if i >= 0)]
        if not secret_name(m.string[start:m.start()] + stem):
            return None
        quote = text.index('"', text.index(":"))
        q = '\\"' if text[quote - 1] == "\\" else '"'
        return text[: quote + 1 - len(q)] + q + MASK + q
    if kind == "secret_flag":
        if before in _WORD or before == "-" or not secret_name(re.split(r"[=\s]", text)[0]):
            return None
        cut = text.index("=") if "=" in text.split(None, 1)[0] else len(text.split(None, 1)[0])
        return text[:cut] + text[cut] + MASK
    if kind == "openai_key":
        return None if before in _WORD or before == "-" else "sk-" + MASK
    if kind == "password_assignment" and (before == "-" or before == "_"):
        return None  # `--password=…` is the flag's; `MY_PASSWORD=…` the assignment's
    return text[: text.index("=") + 1] + MASK  # assignment: the name stays


_SHORT_USERINFO = re.compile(r"://[^\s/?#@'\"]+@")


def _userinfo(text: str) -> str | None:
    """The masked `://userinfo@` of a match that runs to the URL's last `@`: a password may
    hold `/` or `@`. When what precedes that `@` is a host and a path (`h:8000/p?a@b`, or a
    `/` before any `:`), only a userinfo without them is one (the shorter match), else none."""
    inner = text[3:-1]
    first = inner.split("/", 1)[0]
    if "/" in inner and "@" in first:  # userinfo@host, then a path that holds an `@`
        return "://" + MASK + "@" + inner[first.rindex("@") + 1:] + "@"
    user, colon, rest = inner.partition(":")
    port_then_path = colon and rest.split("/", 1)[0].isdigit() and "/" in rest
    if not any(c in user for c in "/?#") and not port_then_path:
        return "://" + MASK + "@"
    short = _SHORT_USERINFO.match(text)
    if short is None:
        return None
    return "://" + MASK + "@" + text[short.end():]


def _is_basic_credential(token: str) -> bool:
    """RFC 7617: the credential is base64 of `user-id ":" password`; a word after "basic" in
    prose is not."""
    import base64
    import binascii

    try:
        return b":" in base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


class Redactor:
    """Counts what it took out, by kind (the session records the total at its end)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._subs: dict[str, Callable[[re.Match[str]], str]] = {
            kind: self._sub_for(kind) for kind in _RX}

    def _sub_for(self, kind: str) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            masked = _mask(kind, m)
            if masked is None:
                return m.group(0)
            self.counts[kind] += 1
            return masked
        return sub

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @staticmethod
    def _kinds_in(text: str) -> list[str]:
        return [k for k, needles in _NEEDLES.items()
                if (k not in _GUARD or _GUARD[k] in text) and any(n in text for n in needles)]

    def _apply(self, text: str, kinds: list[str]) -> str:
        for kind in kinds:
            if _RX[kind].search(text) is not None:
                text = _RX[kind].sub(self._subs[kind], text)
        return text

    def text(self, text: str) -> str:
        """`text` with every secret shape masked (the same object when there is none)."""
        kinds = self._kinds_in(text)
        if not kinds:
            return text
        out = self._apply(text, kinds)
        return text if out == text else out

    def lines(self, texts: Sequence[str]) -> Sequence[str] | None:
        """The block's lines masked, or None when the block holds no secret. The block is
        tested joined; on a hit only the lines the matches fall in are searched again."""
        joined = "\n".join(texts)
        hits: set[int] = set()
        ends: list[int] | None = None
        for kind in self._kinds_in(joined):
            for m in _RX[kind].finditer(joined):
                if ends is None:  # where each line ends in `joined`, once per hit block
                    ends = list(accumulate(len(t) + 1 for t in texts))
                hits.add(bisect_right(ends, m.start()))
        if not hits:
            return None
        out = list(texts)
        changed = False
        for i in sorted(hits):
            masked = self._apply(texts[i], self._kinds_in(texts[i]))
            if masked != texts[i]:
                out[i], changed = masked, True
        return out if changed else None

    def value(self, value: Any) -> Any:
        """Every string in a payload (dict keys too, lists such as an argv) masked; a payload
        without a secret comes back as the same object. The payload's JSON (one C call) is
        looked at first: most events (stats samples, progress) hold no candidate at all."""
        if isinstance(value, dict | list):
            try:
                blob = msgspec.json.encode(value)
            except (TypeError, ValueError):
                blob = None
            if blob is not None and not any(n in blob for n in _BYTE_NEEDLES) \
                    and not any(n in blob for n in _BYTE_KEY_NEEDLES) \
                    and not (b"\\" in blob and any(n in blob for n in _BYTE_JSON_NEEDLES)):
                return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {self._walk(k): self._masked_whole(k, v, "json_secret") for k, v in value.items()}
            same = all(a is b and ka is kb for (ka, a), (kb, b) in zip(value.items(), out.items(),
                                                                        strict=True))
            return value if same else out
        if isinstance(value, list | tuple):
            items = [self._masked_whole(value[i - 1], v, "secret_flag") if i else self._walk(v)
                     for i, v in enumerate(value)]
            if all(a is b for a, b in zip(value, items, strict=True)):
                return value
            return type(value)(items) if isinstance(value, tuple) else items
        return value


    def _masked_whole(self, name: Any, value: Any, kind: str) -> Any:
        """A dict's value whose key names a secret (`{"password": "x"}`, kind json_secret), or an
        argv element after a flag that takes one (`--password X`, kind secret_flag): masked whole."""
        walked = self._walk(value)
        after_flag = kind == "secret_flag"
        if after_flag and name in ("-u", "--user") and isinstance(walked, str) \
                and ":" in walked and MASK not in walked:  # curl's -u USER:PASSWORD
            self.counts["curl_user"] += 1
            return walked.split(":", 1)[0] + ":" + MASK
        if isinstance(walked, str) and isinstance(name, str) and walked and MASK not in walked \
                and not (after_flag and (walked.startswith("-") or not name.startswith("-"))) \
                and secret_name(name):
            self.counts[kind] += 1
            return MASK
        return walked
