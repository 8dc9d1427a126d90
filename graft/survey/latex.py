"""LaTeX in paper text, as survey Markdown and as plain text.

Abstracts carry LaTeX: inline math (`$\\ell_\\infty$`, `$O(\\sqrt{T})$`), text commands
(`\\textit{global minima}`, `\\emph{}`, `{\\em ...}`, `\\url{}`), escaped specials (`\\%`, `\\&`) and
accents (`\\"o`). `segments` reads a text into typed pieces; `to_markdown` writes them as Markdown
(math as `$...$`, emphasis as `*...*`, everything else escaped as literal text, so no backslash of
the source is ever shown), and `to_plain` as plain words for matching and embedding.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

#: Commands whose braced argument is emphasised, set bold, set as code, or dropped.
_EMPH = {"textit", "emph", "textsl", "it", "em", "sl", "mathit"}
_BOLD = {"textbf", "bf", "bfseries", "mathbf", "boldsymbol"}
_CODE = {"texttt", "tt", "verb"}
_DROP = {"cite", "citep", "citet", "citealp", "citeauthor", "citeyear", "footnote", "label", "ref", "eqref",
         "thanks", "vspace", "hspace", "footnotemark", "nocite"}
#: Escaped specials and symbol commands in running text.
_SYMBOLS = {"%": "%", "&": "&", "_": "_", "#": "#", "$": "$", "{": "{", "}": "}", " ": " ", ",": " ", ";": " ",
            "!": "", "/": "", "-": "", "textbackslash": "\\", "textasciitilde": "~", "textasciicircum": "^",
            "textbraceleft": "{", "textbraceright": "}", "ldots": "…", "dots": "…", "textendash": "–",
            "textemdash": "—", "LaTeX": "LaTeX", "TeX": "TeX", "S": "§", "copyright": "©", "textregistered": "®",
            "texttrademark": "™", "times": "×", "pm": "±", "approx": "≈", "sim": "~", "geq": "≥", "leq": "≤",
            "ge": "≥", "le": "≤", "infty": "∞", "cdot": "·", "rightarrow": "→", "to": "→", "ell": "ℓ", "newline": " ",
            "\\": " ", "quad": " ", "qquad": " ", "noindent": "", "centering": "", "par": " "}
_ACCENTS = {"'": "\u0301", "`": "\u0300", '"': "\u0308", "^": "\u0302", "~": "\u0303", "=": "\u0304", ".": "\u0307",
            "u": "\u0306", "v": "\u030c", "H": "\u030b", "c": "\u0327", "k": "\u0328", "r": "\u030a"}
_LETTERS = {"ss": "ß", "o": "ø", "O": "Ø", "aa": "å", "AA": "Å", "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ",
            "l": "ł", "L": "Ł", "i": "ı"}

_MATH = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_COMMAND = re.compile(r"\\([A-Za-z]+|.)", re.S)
#: Math that is only a number, a percentage or words (`$10\%$`, `$\textit{global minima}$`) reads as text.
_PLAIN_MATH = re.compile(r"[\w\s.,%+\-/()×~≈≤≥]*")


def _group(text: str, start: int) -> tuple[str, int]:
    """The balanced `{...}` group at `start` (its content, the index after it); an unclosed group
    runs to the end of the text."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "\\":
            continue
        if text[i] == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif text[i] == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return text[start + 1 :], len(text)


def _text_segments(text: str) -> list[tuple[str, str]]:
    """Segments of LaTeX text outside math: ("text" | "em" | "strong" | "code", content)."""
    out: list[tuple[str, str]] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            out.append(("text", "".join(buf)))
            buf.clear()

    def styled(kind: str, inner: str) -> None:
        flush()
        words = plain_text(inner)
        if words.strip():
            out.append((kind, words))

    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            m = _COMMAND.match(text, i)
            if m is None:  # a backslash ending the text escapes nothing: it is the text's own
                buf.append(ch)
                break
            name = m.group(1)
            j = m.end()
            if name.isspace():  # `\` before a line break or a tab: TeX's control space
                buf.append(" ")
                i = j
                continue
            if name in _ACCENTS and j < n:
                if text[j] == "{":
                    arg, j = _group(text, j)
                else:
                    while j < n and text[j] == " " and name.isalpha():
                        j += 1
                    arg, j = text[j : j + 1], j + 1
                # an accent over a dotless \i or \j is over the plain letter
                base = {"i": "i", "j": "j"}.get(arg[1:], _LETTERS.get(arg[1:], arg[1:])) if arg.startswith("\\") \
                    else arg
                buf.append(unicodedata.normalize("NFC", base[:1] + _ACCENTS[name] + base[1:]) if base else "")
                i = j
                continue
            if name in _LETTERS and (j >= n or not text[j].isalpha()):
                buf.append(_LETTERS[name])
                i = j
                continue
            if name in _SYMBOLS:
                buf.append(_SYMBOLS[name])
                i = j
                continue
            while j < n and text[j] == "*":
                j += 1
            args: list[str] = []
            while j < n and text[j] in "[{":  # optional [..] and braced arguments
                if text[j] == "[":
                    k = text.find("]", j)
                    j = n if k < 0 else k + 1
                    continue
                arg, j = _group(text, j)
                args.append(arg)
            if name in _DROP:
                pass
            elif name == "href" and len(args) >= 2:
                buf.append(plain_text(args[1]))
            elif name in _EMPH and args:
                styled("em", args[-1])
            elif name in _BOLD and args:
                styled("strong", args[-1])
            elif name in _CODE and args:
                styled("code", args[-1])
            elif args:  # \url{x}, \textsc{x}, \underline{x}, an unknown \cmd{x}: its words
                buf.append(" ".join(plain_text(a) for a in args if a.strip()))
            i = j
            continue
        if ch == "{":
            inner, j = _group(text, i)
            m = re.match(r"\\(em|it|bf|tt|sl|bfseries|itshape)\b\s*", inner)
            if m:
                kind = {"bf": "strong", "bfseries": "strong", "tt": "code"}.get(m.group(1), "em")
                styled(kind, inner[m.end():])
            elif "\\" in inner:  # a group around commands: TeX's grouping, not the text's characters
                for kind, part in _text_segments(inner):
                    if kind == "text":
                        buf.append(part)
                    else:
                        flush()
                        out.append((kind, part))
            else:  # braces around plain words are the text's own ("{0, 1}", a title's "{x}"): kept
                buf.append(ch)
                i += 1
                continue
            i = j
            continue
        if ch == "~":  # a tie between two words ("Fig.~3"); spaced or before a number it means "about"
            tie = 0 < i < n - 1 and (text[i - 1].isalpha() or text[i - 1] in ".,") and not text[i + 1].isspace()
            buf.append(" " if tie else "~")
        elif text.startswith("---", i):
            buf.append("—")
            i += 3
            continue
        elif text.startswith("--", i):
            buf.append("–")
            i += 2
            continue
        elif text.startswith("``", i) or text.startswith("''", i):
            buf.append('"')
            i += 2
            continue
        else:
            buf.append(ch)
        i += 1
    flush()
    return out


def _math_as_text(content: str) -> str | None:
    """Math that is really text (a number, a percentage, words in \\text{}): that text, else None."""
    text = re.sub(r"\\(?:text\w*|mathrm|mbox|emph|operatorname)\s*\{([^{}]*)\}", r"\1", content)
    text = text.replace("\\%", "%").replace("\\,", " ").replace("\\ ", " ").replace("\\times", "×")
    text = " ".join(text.split())
    if "\\" in text or not _PLAIN_MATH.fullmatch(text) or not re.search(r"\d|\w\w", text):
        return None
    return text


def segments(text: str) -> list[tuple[str, str]]:
    """A LaTeX-bearing text as typed segments: ("text" | "math" | "em" | "strong" | "code", content).
    Math whose content is only text (`$10\\%$`) becomes text; a lone `$` is a dollar sign."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = str(text)
    for m in _MATH.finditer(text):
        out += _text_segments(text[pos : m.start()])
        content = " ".join(next(g for g in m.groups() if g is not None).split())
        as_text = _math_as_text(content)
        if as_text is not None:
            out.append(("text", as_text))
        elif content:
            out.append(("math", content.replace("$", "")))
        pos = m.end()
    out += _text_segments(text[pos:])
    merged: list[tuple[str, str]] = []
    for kind, part in out:
        if merged and kind == "text" and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + part)
        elif part:
            merged.append((kind, part))
    return merged


def plain_text(text: str) -> str:
    """Plain words of a LaTeX-bearing text: math kept as its source without `$`, commands read."""
    if not ("\\" in text or "$" in text or "{" in text):
        return text
    return " ".join("".join(part for _, part in segments(text)).split())


#: What inside math Markdown would read as markup, and the TeX that typesets the same: `<` opening a
#: tag, comment or autolink (`<b`, `</`, `<!`, `<?`), `&` opening an entity, `](` or `][` closing a
#: link's text, and a backtick (a code span). Math is otherwise copied into `$...$` as written, so
#: `$\gamma <1$` and `$[0,1]$` stay as they are.
_MATH_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=[A-Za-z#])|\](?=[(\[])|`")
_MATH_TEX = {"<": "\\lt ", "&": "\\&", "]": "\\rbrack ", "`": "'"}


def math_markdown(content: str) -> str:
    """Math as `$...$` that no Markdown reader takes for HTML, an entity, a link or code."""
    return "$" + _MATH_MARKUP.sub(lambda m: _MATH_TEX[m.group()], content.strip()).strip() + "$"


def to_markdown(text: str, escape: Callable[[str], str]) -> str:
    """A LaTeX-bearing text as Markdown: math as `$...$` (`math_markdown`), emphasis as `*...*`,
    bold as `**...**`, code in backticks, and every other piece passed through `escape`
    (Markdown-escaped literal text), so no backslash of the LaTeX source is shown and no piece of
    the text becomes markup."""
    parts: list[str] = []
    for kind, part in segments(text):
        if kind == "math":
            parts.append(math_markdown(part))
        elif kind == "code":
            parts.append(f"`{part.replace('`', '')}`")
        elif kind in ("em", "strong"):
            mark = "*" if kind == "em" else "**"
            lead, body, trail = re.match(r"(\s*)(.*?)(\s*)$", part, re.S).groups()
            parts.append(f"{lead}{mark}{escape(body)}{mark}{trail}" if body else part)
        else:
            lead = " " if part[:1].isspace() and parts else ""
            trail = " " if part[-1:].isspace() else ""
            parts.append(lead + escape(part) + trail)
    return " ".join("".join(parts).split())
